"""What a ``top_k`` is: the fraction of each matrix (or row) a mask keeps, a number in (0, 1].

One rule for every place that takes one (the recipe's ``mask.top_k`` and ``sweep.top_k``, :func:`~.mask.find_math_params`,
``plan``, ``mask --top-k``, ``sweep --top-k``), each wording its own refusal, with the same hint for a value given as a
percent. No torch here: reading a recipe, and ``plan``, load none.
"""

from __future__ import annotations

from typing import Any

from ..errors import InputError

__all__ = ["is_top_k", "top_k_hint", "top_k_error"]


def is_top_k(value: Any) -> bool:
    """Whether ``value`` is a top_k: a number (not a bool) in (0, 1].

    Example:
        >>> [is_top_k(v) for v in (0.05, 1, 0, 5, True, float("nan"), "0.1")]
        [True, True, False, False, False, False, False]
    """
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value <= 1


def top_k_hint(value: Any) -> str:
    """``", did you mean 0.05?"`` for a top_k given as a percent (``5``), else ``""``.

    Example:
        >>> top_k_hint(5), top_k_hint(0.05)
        (', did you mean 0.05?', '')
    """
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return f", did you mean {value / 100:g}?" if number and 1 < value <= 100 else ""


def top_k_error(value: Any) -> InputError:
    """The one line refusing ``value`` as an argument's top_k (the Python API and ``plan``).

    Example:
        >>> print(top_k_error(5))
        top_k: must be in (0, 1], got 5, did you mean 0.05?; pass a fraction such as 0.05
    """
    return InputError(f"top_k: must be in (0, 1], got {value!r}{top_k_hint(value)}; pass a fraction such as 0.05")
