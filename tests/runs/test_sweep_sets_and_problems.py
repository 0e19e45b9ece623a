"""What a sweep calibrates and evaluates on, and how a shared sweep.json's p-value is read: behaviours round 4 of
hand mutations (docs/testing.md "Round 4") found untested; each failed with the mutation its docstring names."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from mathneuro_edit.errors import InputError
from mathneuro_edit.recipe.io import quickstart_recipe


def test_two_variants_that_differ_only_in_the_data_seed_calibrate_their_own_sets() -> None:
    """r4-sweep-calib-set-ignores-seed: a calibration set is its source *and* how it is sampled; a variant with
    another ``data.seed`` draws other texts, so it must not reuse the recipe's statistics."""
    from mathneuro_edit.runs.sweep.calibration import _set_count
    from mathneuro_edit.runs.sweep.grid import _variants

    recipe = quickstart_recipe(["sweep.variants=[{name: s1, set: ['data.seed=1']}]"])
    sets = 1 + len(recipe.data.general)  # math, then each general set
    assert _set_count(_variants(recipe)) == 2 * sets
    same = quickstart_recipe(["sweep.variants=[{name: mlp, set: ['targets.include=[mlp]']}]"])
    assert _set_count(_variants(same)) == sets  # targets only: the same texts, calibrated once


class _Mask:
    def total(self) -> tuple[int, int]:
        return 40, 1000


def test_a_point_s_base_count_is_the_base_s_on_the_same_problems() -> None:
    """r4-sweep-point-base-count-all: a point of an early round saw only the first problems; its gain over the base
    (the front's merit) compares it with the base on those same problems, not on all of them."""
    from mathneuro_edit.runs.sweep.grid import _Arm, _sweep_point

    arm = _Arm(0, 0.05, 1.1, _Mask(), correct=[True, False], general={"loss_sums": [1.0, 2.0], "kl": 0.01}, round=1)
    base_general = {"loss_sums": [1.0, 2.0], "tokens": [3, 4]}
    point = _sweep_point(arm, "", [False, False, True, True], base_general)
    assert (point.math_correct, point.math_total, point.base_correct) == (1, 2, 0)
    assert point.gain_points == pytest.approx(100 * (1 - 0) / 2)


def test_no_worked_example_is_also_a_confirmation_problem(tmp_path: Path) -> None:
    """r4-sweep-confirmation-repeats-shots: a confirmation problem whose question repeats a worked example is
    dropped as one that repeats a selection problem is (the prompt would hold its own answer)."""
    from mathneuro_edit.runs.sweep.problems import sweep_problems

    path = tmp_path / "probs.jsonl"
    rows = [{"question": f"q{i % 7}", "answer": f"#### {i % 7}"} for i in range(40)]  # 7 distinct questions
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    for seed in range(5):
        r = quickstart_recipe(
            [
                f"evaluation.math={path}",
                "evaluation.n_shot=3",
                f"evaluation.seed={seed}",
                "sweep.selection_samples=2",
                "sweep.confirmation_samples=30",
            ]
        )
        shots, sel, conf = sweep_problems(r)
        earlier = {p["question"] for p in shots + sel}
        assert len(shots) == 3 and len(sel) == 2
        assert not earlier & {p["question"] for p in conf}, seed


def _exact_two_sided(b: int, k: int) -> float:
    """The two-sided exact McNemar p by its definition: twice the smaller binomial(n, 1/2) tail, at most 1."""
    n = b + k
    return 1.0 if n == 0 else min(1.0, 2 * sum(math.comb(n, i) for i in range(min(b, k) + 1)) / 2**n)


def test_the_sweep_file_s_p_value_is_the_two_sided_exact_mcnemar() -> None:
    """r4-evidence-exact-p-one-sided: read_sweep re-tests a shared file's counts with the two-sided p the sweep
    itself uses (evaluation.significance.mcnemar_exact, its terms built one from the other), never a one-sided one
    (half of it): equal to the definition, bit for bit, also at the 20,000 problems a sweep file may hold (10 vs 19,990)."""
    from mathneuro_edit.evaluation.significance import mcnemar_exact

    pairs = [(b, k) for b in range(25) for k in range(25)] + [(1_500, 1_700), (10, 19_990)]
    for b, k in pairs:
        assert mcnemar_exact(b, k) == _exact_two_sided(b, k), (b, k)


def test_a_sweep_file_whose_counts_are_significant_only_one_sided_is_refused(tmp_path: Path) -> None:
    """r4-evidence-exact-p-one-sided, through read_sweep: 5 problems right only after the edit and none only
    before is p = 2/32 = 0.0625 two-sided, not below 0.05, even in a file whose every verdict says math-boost."""
    from mathneuro_edit.runs.sweep.evidence import read_sweep

    from ._sweep_json import valid_sweep

    data = valid_sweep()
    c = data["confirmation"]
    c.update(base_correct=1, edited_correct=6, base_only=0, edited_only=5, mcnemar_p=0.0625)
    for t in c["formats"][0]["tests"]:
        t.update(before_only=0, after_only=5, mcnemar_p=0.0625, passes=True)
    (tmp_path / "sweep.json").write_text(json.dumps(data))
    with pytest.raises(InputError, match=r"its confirmation says confirmed, but its counts \(0 right only before, 5"):
        read_sweep(tmp_path)
