"""Evaluation results (mathneuro_edit.evaluation.results): where a completion is cut, the problem checks and their
messages, the paired comparison's exact keys, the non-finite values of eval.json and its exact bytes, and the
atomic write (a hidden temp file beside the target, the existing file kept when the write fails)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from mathneuro_edit.errors import InputError
from mathneuro_edit.evaluation.results import (
    EvalResults,
    GeneralResult,
    MathPrediction,
    MathResult,
    compare,
    truncate_completion,
)
from mathneuro_edit.evaluation.tasks import _check_problems


@pytest.mark.parametrize(
    "text, cut, done",
    [
        # the answer comes after a first "\nQuestion:": the text ends at that first one (not at the last)
        ("a\nQuestion: b #### 5\nQuestion: c", "a", True),
        # a completion that starts with "\nQuestion:" (index 0) already began a new problem: nothing of it is kept
        ("\nQuestion: x #### 5", "", True),
        ("\nQuestion: no answer", "", True),
        # a blank line BEFORE the answer is kept; the cut is at the first blank line after it
        ("a\n\nb #### 5\n\nc\n\nd", "a\n\nb #### 5", True),
        # several "\nQuestion:" after the answer (no blank line): cut at the first one
        ("#### 5\nQuestion: a\nQuestion: b", "#### 5", True),
        ("#### 5 then\nQuestion: a\n\nmore", "#### 5 then", True),
    ],
)
def test_truncate_completion_cuts_at_the_first_end_after_the_answer(text: str, cut: str, done: bool) -> None:
    assert truncate_completion(text) == (cut, done)


GOOD = {"question": "1 + 1?", "answer": "1 + 1 = 2\n#### 2"}


def test_check_problems_returns_plain_copies_with_prefill_only_where_given() -> None:
    given = [dict(GOOD, prefill="Let us"), dict(GOOD, prefill=""), dict(GOOD, prefill=None), GOOD]
    before = [dict(p) for p in given]
    out = _check_problems("task", given)
    assert out == (dict(GOOD, prefill="Let us"), GOOD, GOOD, GOOD)
    assert [list(p) for p in out] == [
        ["question", "answer", "prefill"],
        ["question", "answer"],
        ["question", "answer"],
        ["question", "answer"],
    ]
    assert given == before and all(o is not g for o, g in zip(out, given))  # copies; the input is untouched


@pytest.mark.parametrize(
    "problems, message",
    [
        (5, "task: must be a list of {'question': str, 'answer': str} dicts, got int"),
        (
            {"question": "q", "answer": "#### 1"},
            "task: must be a list of {'question': str, 'answer': str} dicts, got dict",
        ),
        ("#### 1", "task: must be a list of {'question': str, 'answer': str} dicts, got str"),
        ([GOOD, {"question": "q"}], "task[1]: must be a dict with str 'question' and 'answer', got {'question': 'q'}"),
        (
            [{"question": 1, "answer": "#### 1"}],
            "task[0]: must be a dict with str 'question' and 'answer', got {'question': 1, 'answer': '#### 1'}",
        ),
        (["q"], "task[0]: must be a dict with str 'question' and 'answer', got 'q'"),
        ([dict(GOOD, prefill=5)], "task[0]: prefill must be a string (the text that starts the answer), got 5"),
        (
            [dict(GOOD, answer="two")],
            "task[0]: the answer has no '#### <integer>' line; GSM8K answers end with '#### 42'",
        ),
    ],
)
def test_check_problems_messages(problems: object, message: str) -> None:
    with pytest.raises(InputError) as err:
        _check_problems("task", problems)
    assert str(err.value) == message


def _pred(i: int, ok: bool) -> MathPrediction:
    return MathPrediction(f"q{i}", 1, "", 1 if ok else 0)


def test_compare_math_is_the_exact_paired_record() -> None:
    base = MathResult(3, 4, tuple(_pred(i, ok) for i, ok in enumerate([True, True, True, False])))
    edited = MathResult(1, 4, tuple(_pred(i, ok) for i, ok in enumerate([False, False, True, False])))
    # base 3/4 -> edited 1/4: change -0.5; two problems lost, none gained; p = 2 * (1/2)^2 = 0.5
    assert compare(base, edited) == {
        "test": "mcnemar_exact",
        "accuracy_change": -0.5,
        "base_only": 2,
        "edited_only": 0,
        "mcnemar_p": 0.5,
        "significant": False,
    }
    with pytest.raises(InputError, match="different problems"):
        compare(base, MathResult(1, 4, tuple(_pred(i + 1, True) for i in range(4))))
    assert compare(base, None) is None and compare(MathResult(3, 4), MathResult(1, 4)) is None


def test_non_finite_values_are_null_in_the_dict_and_the_file(tmp_path: Path) -> None:
    # loss 800: perplexity overflows to inf; no per-text sums: the standard error is nan; both become null
    broken = GeneralResult(800.0, 9, 5.0)
    assert math.isinf(broken.perplexity) and math.isnan(broken.loss_se)
    d = EvalResults({"g": GeneralResult(2.0, 9)}, {"g": broken}).to_dict()
    assert d["g"]["edited"] == {
        "general_loss": 800.0,
        "general_loss_se": None,
        "general_perplexity": None,
        "general_kl": 5.0,
        "general_texts": 0,
    }
    assert d["g"]["base"]["general_perplexity"] == math.exp(2.0)
    path = EvalResults({"g": GeneralResult(2.0, 9)}, {"g": broken}).save_json(tmp_path / "e.json")
    assert json.loads(path.read_text(encoding="utf-8")) == d  # strict JSON: no NaN / Infinity tokens


def test_save_json_bytes_are_the_documented_layout(tmp_path: Path) -> None:
    # non-ASCII text is written as UTF-8 characters, not \\u escapes; 2-space indent; one final newline
    preds = (MathPrediction("Zoë a 3 € ?", 3, "3 €\n#### 3", 3, "Soit"), MathPrediction("q", 2, "", None))
    res = EvalResults({"m": MathResult(1, 2, preds)}, {"m": MathResult(1, 2, preds)})
    path = res.save_json(tmp_path / "eval.json")
    expected = json.dumps(res.to_dict(predictions=True), indent=2, ensure_ascii=False) + "\n"
    assert path.read_bytes() == expected.encode("utf-8")
    assert "Zoë a 3 € ?" in path.read_text(encoding="utf-8")


def test_save_json_writes_a_hidden_temp_file_beside_the_target_then_renames(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    moves: list[tuple[str, str]] = []
    real_replace = os.replace

    def spy(src: str, dst: str) -> None:
        moves.append((str(src), str(dst)))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    path = EvalResults({"m": MathResult(1, 2)}).save_json(tmp_path)
    ((src, dst),) = moves
    # same folder: the rename is atomic (never across file systems); hidden, so no reader takes it for eval.json
    assert Path(dst) == path == tmp_path / "eval.json" and Path(src).parent == tmp_path
    assert Path(src).name.startswith(".eval.json-") and src.endswith(".tmp")  # util.files.write_bytes_atomic


def test_save_json_refuses_non_finite_numbers_and_keeps_the_existing_file(tmp_path: Path) -> None:
    # metrics are made finite by to_dict; a non-finite number elsewhere (here: an extracted value) must not
    # produce non-standard JSON ("Infinity"): the write fails, the temp file is removed, the existing file stays
    target = tmp_path / "eval.json"
    target.write_text("old\n", encoding="utf-8")
    bad = EvalResults({"m": MathResult(0, 1, (MathPrediction("q", 1, "", math.inf),))})
    with pytest.raises(ValueError, match="not JSON compliant"):
        bad.save_json(target)
    assert target.read_text(encoding="utf-8") == "old\n" and [p.name for p in tmp_path.iterdir()] == ["eval.json"]
    with pytest.raises(InputError, match="does not exist"):
        bad.save_json(tmp_path / "missing" / "eval.json")
