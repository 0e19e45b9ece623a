"""Boundaries of the sweep that no test pinned (issue 41, the mutation audit's untested behaviours):

- a point exactly at the KL budget continues to the next round (``promote``), as the final choice
  (``select_candidate``) accepts it: both read the budget as inclusive, so the point the choice would take is never
  dropped on the way (``select_candidate``'s own boundary: tests/runs/test_sweep.py, point 6 at KL exactly 0.05);
- two evaluators that differ only in ``evaluation.max_new_tokens`` keep their math results under different cache
  keys (a cut-short generation is another result; a resumed sweep with another length must not reuse it);
- ``run --from-sweep`` refuses discordant counts no confirmation can have (more discordant problems than problems,
  in the confirmation and in each control test), even where their p-value alone would pass;
- ``run --from-sweep`` refuses a recipe whose ``targets`` differ from the sweep's (other weights are scored: the
  confirmed setting does not hold for them).

The sweep.json files are written by hand (tests/runs/_sweep_json.py); ``run --from-sweep --dry-run`` validates
without running. docs/testing.md ("Behaviours tested in round 4") says which break each test was seen failing on.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from mathneuro_edit.cli.main import main
from mathneuro_edit.recipe.io import quickstart_recipe

# the sweep internals pinned here (issue 42 moves the sweep modules: a move is a fix of these lines only)
from mathneuro_edit.runs.steps.record import RunRecord
from mathneuro_edit.runs.sweep.cache import ResultCache, key_sha256
from mathneuro_edit.runs.sweep.evaluator import _Context, _Evaluator
from mathneuro_edit.runs.sweep.procedure import SweepPoint, promote, select_candidate

from ._sweep_json import valid_sweep

BUDGET = 0.05


def _point(correct: int, kl: float) -> SweepPoint:
    return SweepPoint(0.05, 1.1, 9, correct / 100, 2.0, kl, math_correct=correct, math_total=100)


# ------------------------------------------------------------------------------ 1. the KL budget is inclusive


def test_a_point_exactly_at_the_kl_budget_is_promoted() -> None:
    # the best count sits exactly at the budget: it continues, ahead of the next best
    assert promote([30, 34, 31], [0.01, BUDGET, 0.02], BUDGET, 1) == [1]
    assert promote([30, 34, 31], [0.01, BUDGET, 0.02], BUDGET, 2) == [1, 2]
    # the smallest step over the budget: out
    assert promote([30, 34, 31], [0.01, math.nextafter(BUDGET, 1.0), 0.02], BUDGET, 1) == [2]
    # a budget of 0: a point of KL exactly 0 is within it
    assert promote([5, 7], [0.0, 0.0], 0.0, 1) == [1]
    # through the function form of ``kl`` too (the sweep passes a function, asked lazily)
    assert promote([30, 34], lambda i: [0.01, BUDGET][i], BUDGET, 1) == [1]


@pytest.mark.parametrize("kl", [0.0, 0.049, math.nextafter(BUDGET, 0.0), BUDGET, math.nextafter(BUDGET, 1.0), 0.1])
def test_promotion_and_the_final_choice_share_the_budget_s_boundary(kl: float) -> None:
    """A point the choice would take is never dropped by the promotion before it (and the other way round)."""
    promoted = promote([60], [kl], BUDGET, 1) == [0]
    chosen = select_candidate([_point(60, kl)], 50, BUDGET) == 0
    assert promoted == chosen == (kl <= BUDGET)


# ------------------------------------------------------------------- 2. max_new_tokens is part of the cache key


class _Tok:
    chat_template = None


class _Recorder(ResultCache):
    """A cache that records the keys asked and answers every lookup (no model runs)."""

    def __init__(self, folder: Path) -> None:
        super().__init__(folder)
        self.asked: list[dict] = []

    def get(self, key):  # noqa: ANN001, ANN201
        self.asked.append(json.loads(json.dumps(key)))
        return {"correct": [True], "completions": ["#### 2"]}


def _math_key(tmp_path: Path, max_new: int) -> dict:
    recipe = quickstart_recipe(["evaluation.math=arithmetic", f"evaluation.max_new_tokens={max_new}"])
    cache = _Recorder(tmp_path)
    ev = _Evaluator(
        _Context(RunRecord(recipe, tokenizer=_Tok(), progress=False), "f" * 64, cache), [], ["a general text"]
    )
    assert ev.math([{"question": "What is 1 + 1?", "answer": "#### 2"}]) == [True]
    (key,) = cache.asked
    return key


def test_evaluators_that_differ_only_in_max_new_tokens_use_different_cache_keys(tmp_path: Path) -> None:
    short, long = _math_key(tmp_path, 4), _math_key(tmp_path, 64)
    assert short["max_new_tokens"] == 4 and long["max_new_tokens"] == 64
    assert {k: v for k, v in short.items() if k != "max_new_tokens"} == {
        k: v for k, v in long.items() if k != "max_new_tokens"
    }  # nothing else differs: the length alone separates them
    assert key_sha256(short) != key_sha256(long)  # different entries in the cache folder
    cache = ResultCache(tmp_path / "real")
    cache.put(short, {"correct": [False], "completions": ["#### 3"]})
    assert cache.get(long) is None  # the 64-token evaluator never reads the 4-token result
    assert cache.get(short) == {"correct": [False], "completions": ["#### 3"]}


# ---------------------------------------------------------------- 3. impossible discordant counts are refused


def _from_sweep(tmp_path: Path, data: dict, *sets: str) -> tuple[int, str]:
    folder = tmp_path / "sweep"
    folder.mkdir(exist_ok=True)
    (folder / "sweep.json").write_text(json.dumps(data))
    args = ["run", "--out", str(tmp_path / "release"), "--from-sweep", str(folder), "--dry-run"]
    result = CliRunner().invoke(main, args + [x for s in sets for x in ("--set", s)])
    assert not (tmp_path / "release").exists()
    return result.exit_code, result.output


def _error_line(text: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in text, text
    return lines[0]


def test_the_hand_made_sweep_is_taken(tmp_path: Path) -> None:
    code, text = _from_sweep(tmp_path, valid_sweep())
    assert code == 0, text


def test_more_discordant_problems_than_problems_are_refused(tmp_path: Path) -> None:
    """1 right only before and 8 only after of 8 problems: each count is within n, the exact p (0.039) is below
    alpha, and the control tests are fine, so only the sum gives the file away."""
    data = valid_sweep()
    data["confirmation"].update(base_only=1, edited_only=8, base_correct=0, edited_correct=7)
    code, text = _from_sweep(tmp_path, data)
    assert code == 2, text
    line = _error_line(text)
    assert "confirmation: 1 + 8 discordant problems of 8; the file was edited: re-run the sweep" in line, line


@pytest.mark.parametrize("arm,answered", [("base", False), ("base", True), ("general-specific", False)])
def test_a_control_test_with_more_discordant_problems_than_problems_is_refused(
    tmp_path: Path, arm: str, answered: bool
) -> None:
    """One of the three paired tests a confirmed boost rests on claims 1 + 8 discordant of 8 (p = 0.039: a
    'gain' by its p alone); the confirmation's own counts are possible."""
    data = valid_sweep()
    (test,) = [
        t for t in data["confirmation"]["formats"][0]["tests"] if (t["before"], t["answered_only"]) == (arm, answered)
    ]
    test.update(before_only=1, after_only=8)
    code, text = _from_sweep(tmp_path, data)
    assert code == 2, text
    line = _error_line(text)
    label = f"the candidate against {arm}" + (" (problems both answered)" if answered else "")
    assert f"says confirmed, but its test of {label} (8 vs 1 discordant" in line, line


def test_more_discordant_problems_than_problems_both_answered_are_refused(tmp_path: Path) -> None:
    """The test among the problems both answered claims 6 discordant problems of the 5 both answered."""
    data = valid_sweep()
    (test,) = [t for t in data["confirmation"]["formats"][0]["tests"] if t["answered_only"]]
    test["n"] = 5
    code, text = _from_sweep(tmp_path, data)
    assert code == 2, text
    assert "problems both answered" in _error_line(text)


# ---------------------------------------------------------------- 4. the recipe's targets must be the sweep's


@pytest.mark.parametrize(
    "sweep_sets,run_sets,key",
    [
        (["targets.include=[mlp]"], [], "targets.include"),  # the sweep scored the MLP only
        ([], ["targets.include=[mlp]"], "targets.include"),  # the release would score the MLP only
        ([], ["targets.exclude=[lm_head]"], "targets.exclude"),
    ],
)
def test_run_from_sweep_refuses_a_recipe_whose_targets_differ(
    tmp_path: Path, sweep_sets: list[str], run_sets: list[str], key: str
) -> None:
    code, text = _from_sweep(tmp_path, valid_sweep(sweep_sets), *run_sets)
    assert code == 2, text
    line = _error_line(text)
    assert f"--from-sweep: the recipe's {key} differs from the sweep's (" in line, line
    assert "the confirmed setting holds only for the sweep's recipe" in line, line


def test_the_same_targets_are_taken(tmp_path: Path) -> None:
    code, text = _from_sweep(tmp_path, valid_sweep(["targets.include=[mlp]"]), "targets.include=[mlp]")
    assert code == 0, text
