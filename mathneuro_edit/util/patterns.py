"""The regular expressions a user gives (``targets.include`` / ``exclude``): compiled, and refused when a
backtracking search could run for minutes.

Why: Python's ``re`` backtracks, so a pattern with a repeat inside a repeat, such as ``(a+)+b`` or ``(\\w+\\.?)*x``,
takes time exponential in the name's length when it does not match: ``(.+)+z`` over a 40-character parameter name
ran for minutes (issue 48). Such a pattern always has a plain equivalent (``a+b``, ``[\\w.]*x``), so it is refused
with that advice rather than bounded by a timeout (``re`` cannot be interrupted).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

try:  # Python >= 3.11
    import re._parser as _sre_parse
    from re._constants import MAXREPEAT
except ImportError:  # pragma: no cover - Python 3.10
    import sre_parse as _sre_parse  # type: ignore[no-redef]
    from sre_constants import MAXREPEAT  # type: ignore[no-redef]

__all__ = ["nested_repeat", "pattern_problem"]

_REPEATS = {"MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"}


def _repeats_inside(items: Any) -> bool:
    """Whether a parsed subpattern holds a repeat of a varying count (``a+``, ``a?``, ``a{2,5}``; not ``a{2}``,
    not possessive ``a++``), at any depth: the choices an outer repeat multiplies."""
    for op, av in items:
        name = str(op)
        if name in _REPEATS:
            low, high, body = av
            if (name != "POSSESSIVE_REPEAT" and (high == MAXREPEAT or high > low)) or _repeats_inside(body):
                return True
        elif _in_args(av, _repeats_inside):
            return True
    return False


def _nested(items: Any) -> bool:
    """Whether a parsed subpattern holds a repeat of more than one item around such a choice, at any depth."""
    for op, av in items:
        if str(op) in _REPEATS:
            low, high, body = av
            if ((high == MAXREPEAT or high > 1) and _repeats_inside(body)) or _nested(body):
                return True
        elif _in_args(av, _nested):
            return True
    return False


def _in_args(av: Any, search: Callable[[Any], bool]) -> bool:
    """``search`` over the subpatterns a group, branch, assertion or conditional holds."""
    if isinstance(av, _sre_parse.SubPattern):
        return search(av)
    return isinstance(av, (tuple, list)) and any(_in_args(a, search) for a in av)


def nested_repeat(pattern: str) -> bool:
    """Whether ``pattern`` (a valid regular expression) repeats something that itself repeats: ``(a+)+``,
    ``(\\d*\\.)*``, ``(x{2,})+``; the shape whose failing search backtracks exponentially (``(ab{2})*`` and
    ``(a++)*`` repeat fixed or possessive items: linear, taken).

    Example:
        >>> nested_repeat(r"(a+)+b"), nested_repeat(r"(.*)*z"), nested_repeat(r"layers\\.\\d+\\.mlp"), nested_repeat(r"(ab){2}")
        (True, True, False, False)
    """
    return _nested(_sre_parse.parse(pattern))


def pattern_problem(pattern: str) -> str | None:
    """What is wrong with a user's regular expression (``None``: nothing): not valid, or a repeat inside a
    repeat (:func:`nested_repeat`).

    Example:
        >>> pattern_problem(r"mlp\\.(up|down)_proj"), pattern_problem("(")
        (None, 'not a valid regular expression: missing ), unterminated subpattern at position 0')
        >>> pattern_problem(r"(\\w+\\.?)+x")[:60]
        'a repeat inside a repeat, which can search for minutes on a '
    """
    try:
        re.compile(pattern)
        nested = nested_repeat(pattern)
    except re.error as e:
        return f"not a valid regular expression: {e}"
    except RecursionError:
        return "not a valid regular expression: nested too deep"
    if nested:
        return (
            "a repeat inside a repeat, which can search for minutes on a name it does not match (like (a+)+); "
            "write it without the outer repeat (a+, [\\w.]*)"
        )
    return None
