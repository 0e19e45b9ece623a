"""How a completion's form and a problem's operation are read (issue 48 item 2; milliseconds): ``answer_form``
(``42 = 59`` after a prefill is a restart of the equation; a completion without a prefill is never a restart) and
``operation_of`` (a negative first operand is read as a number, not as the operation). The sweep's format verdict
and its per-operation table rest on these two."""

from __future__ import annotations

import pytest

from mathneuro_edit.evaluation.prompts import answer_form, operation_of

PREFILL = "42 + 17 = "


@pytest.mark.parametrize(
    ("completion", "form"),
    [
        ("59", "answer"),
        ("59\nQuestion: next", "answer"),
        ("-3", "answer"),
        ("1,234", "answer"),
        ("42 = 59", "restart"),  # the equation written again, up to its "="
        ("42 +", "restart"),
        ("42+17", "restart"),
        ("42\t*", "restart"),
        ("42 / 2", "restart"),
        ("42 \u00d7 2", "restart"),
        ("42 \u00f7 2", "restart"),
        ("42 - 17", "restart"),
        ("42.", "answer"),  # a full stop ends an answer
        ("42, so", "answer"),
        ("42\n+", "answer"),  # only blanks and tabs may stand between the number and the operator
        (" so", "none"),
        ("", "none"),
        ("#### 59", "answer"),
        ("#### = 59", "none"),
        ("####59 +", "answer"),  # the #### rule reads its number whatever follows
        ("59 #### none", "none"),
    ],
)
def test_the_form_of_a_completion_after_a_prefill(completion: str, form: str) -> None:
    assert answer_form(completion, PREFILL) == form


@pytest.mark.parametrize("completion", ["42 = 59", "42 +", "42+17", "59 - 3 = 56"])
def test_a_completion_without_a_prefill_is_never_a_restart(completion: str) -> None:
    assert answer_form(completion) == "answer"
    assert answer_form(completion, None) == "answer"
    assert answer_form(completion, "") == "answer"


def test_the_form_is_read_before_the_next_question() -> None:
    assert answer_form("none here\nQuestion: 42 + 17 = 59", PREFILL) == "none"
    assert answer_form("She has 5.\n#### 5") == "answer"


@pytest.mark.parametrize(
    ("prefill", "operation"),
    [
        ("9 * 7 = ", "*"),
        ("23 + 45 = ", "+"),
        ("23 - 45 = ", "-"),
        ("-3 + 5 = ", "+"),  # a negative first operand: its sign is not the operation
        ("-3 - 5 = ", "-"),
        ("-3 * -5 = ", "*"),
        ("3 - -5 = ", "-"),
        ("  1,200 / 4 = ", "/"),
        ("1.5 \u00d7 2 = ", "\u00d7"),
        ("8 \u00f7 2 = ", "\u00f7"),
        ("12+3=", "+"),
        ("x + 1 = ", ""),
        ("- 3 + 5 = ", ""),  # a sign apart from its number is no number
        ("3 + x = ", ""),
        ("3 = ", ""),
        ("", ""),
    ],
)
def test_the_operation_of_a_problem(prefill: str, operation: str) -> None:
    assert operation_of({"question": "q", "prefill": prefill}) == operation


def test_a_problem_without_a_prefill_has_no_operation() -> None:
    assert operation_of({"question": "What is 9 * 7?"}) == ""
    assert operation_of({"question": "What is 9 * 7?", "prefill": None}) == ""
