"""Two rules every command shares, at unit speed (issue 48 item 2; milliseconds): what a ``top_k`` is
(``engine/top_k_rule.py``: a number in (0, 1], with a hint for a percent) and which user patterns are refused
(``util/patterns.py``: invalid, or a repeat inside a repeat, whose failing search backtracks for minutes).
``scripts/mutation.sh rules`` mutates both against this file."""

from __future__ import annotations

import math

import pytest

from mathneuro_edit.engine.top_k_rule import is_top_k, top_k_error, top_k_hint
from mathneuro_edit.errors import InputError
from mathneuro_edit.util.patterns import nested_repeat, pattern_problem


@pytest.mark.parametrize("value", [0.05, 1, 1.0, math.nextafter(0.0, 1.0), 0.5])
def test_a_top_k_is_a_number_in_zero_one(value: float) -> None:
    assert is_top_k(value) is True


@pytest.mark.parametrize(
    "value", [0, 0.0, -0.1, math.nextafter(1.0, 2.0), 5, True, False, math.nan, math.inf, "0.1", None, [0.1]]
)
def test_anything_else_is_not(value: object) -> None:
    assert is_top_k(value) is False


@pytest.mark.parametrize(
    ("value", "hint"),
    [
        (5, ", did you mean 0.05?"),
        (100, ", did you mean 1?"),
        (12.5, ", did you mean 0.125?"),
        (math.nextafter(1.0, 2.0), ", did you mean 0.01?"),
        (1, ""),
        (0.05, ""),
        (100.5, ""),
        (101, ""),
        (True, ""),
        ("5", ""),
        (-5, ""),
    ],
)
def test_a_percent_gets_a_hint_and_nothing_else_does(value: object, hint: str) -> None:
    assert top_k_hint(value) == hint


def test_the_refusal_is_one_line_with_the_value_as_given() -> None:
    e = top_k_error(5)
    assert isinstance(e, InputError)
    assert str(e) == "top_k: must be in (0, 1], got 5, did you mean 0.05?; pass a fraction such as 0.05"
    assert str(top_k_error("x")) == "top_k: must be in (0, 1], got 'x'; pass a fraction such as 0.05"


NESTED = [
    r"(a+)+b",
    r"(.*)*z",
    r"(\w+\.?)+x",
    r"(\d*\.)*",
    r"(x{2,})+",
    r"(x{2,3})+",
    r"(a?)*",
    r"(a*?)+",
    r"(?:a+)+",
    r"((a+))+",
    r"(b|a+)+",
    r"(?=(a+)+)x",
    r"(a+){2,}",
    r"(a+){0,2}",
    r"x(?:y(a+)*)?z",
    r"((a|b)+c)*",
]
LINEAR = [
    r"layers\.\d+\.mlp",
    r"mlp\.(up|down)_proj",
    r"(ab){2}",
    r"(ab{2})*",
    r"(a++)*",
    r"(a+){1}",
    r"(a+)?",
    r"(a+)",
    r"a+b+",
    r"(ab)+",
    r"(a|b)+",
    r"(?:x{3})+",
    r"[a+]+",
    r"",
]


@pytest.mark.parametrize("pattern", NESTED)
def test_a_repeat_inside_a_repeat_is_nested(pattern: str) -> None:
    assert nested_repeat(pattern) is True


@pytest.mark.parametrize("pattern", LINEAR)
def test_a_repeat_of_fixed_or_possessive_items_is_not(pattern: str) -> None:
    assert nested_repeat(pattern) is False


def test_what_is_wrong_with_a_pattern_in_words() -> None:
    assert pattern_problem(r"mlp\.(up|down)_proj") is None
    assert pattern_problem("(") == "not a valid regular expression: missing ), unterminated subpattern at position 0"
    assert pattern_problem(r"(a+)+") == (
        "a repeat inside a repeat, which can search for minutes on a name it does not match (like (a+)+); "
        "write it without the outer repeat (a+, [\\w.]*)"
    )
    assert pattern_problem("(" * 2000 + ")" * 2000) in (
        "not a valid regular expression: nested too deep",
        "not a valid regular expression: too many groups",
    )
