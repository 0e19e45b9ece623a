"""Edges of mathneuro_edit.runs.sweep that the mutation run (scripts/mutation.sh sweep) found unguarded: the general
loss error columns read from an eval dict, and the candidate's ties (lower KL; issue 21 made the largest selection
gain the one candidate that is confirmed, where it used to be the "largest gain" named when nothing qualified)."""

from __future__ import annotations

import math

import pytest

from mathneuro_edit.evaluation.results import (
    EvalResults,
    GeneralResult,
    MathPrediction,
    MathResult,
)
from mathneuro_edit.evaluation.significance import ratio_se
from mathneuro_edit.runs.sweep import _num, _point
from mathneuro_edit.runs.sweep_procedure import SweepPoint, select_candidate


def _math(flags: list[bool]) -> MathResult:
    preds = tuple(MathPrediction(f"q{i}", 1, "", int(ok)) for i, ok in enumerate(flags))
    return MathResult(sum(flags), len(flags), preds)


def test_point_reads_the_general_loss_error_columns() -> None:
    base_g = GeneralResult(2.0, 9, 0.0, "", (4.0, 14.0), (3, 6))
    edited_g = GeneralResult(2.1, 9, 0.02, "", (4.3, 14.6), (3, 6))
    d = EvalResults(
        {"math": _math([True, False]), "general": base_g}, {"math": _math([True, True]), "general": edited_g}
    ).to_dict()
    p = _point(0.05, 1.1, 7, d)
    assert p.general_loss_se == pytest.approx(ratio_se([4.3, 14.6], [3, 6]), rel=1e-12)
    assert p.loss_change == pytest.approx(0.1, rel=1e-12)
    assert p.loss_change_se == pytest.approx(ratio_se([0.3, 0.6], [3, 6]), rel=1e-12)
    # without per-text sums (no standard error) and without a general comparison: nan, not an error
    d = EvalResults(
        {"math": _math([True, False]), "general": GeneralResult(2.0, 9)},
        {"math": _math([True, True]), "general": GeneralResult(2.1, 9, 0.02)},
    ).to_dict()
    p = _point(0.05, 1.1, 7, d)
    assert math.isnan(p.general_loss_se) and math.isnan(p.loss_change) and math.isnan(p.loss_change_se)
    del d["math"]["comparison"]  # no paired math result: p = 1, not significant
    p = _point(0.05, 1.1, 7, d)
    assert (p.mcnemar_p, p.significant) == (1.0, False)


def test_num_is_nan_only_for_none() -> None:
    assert math.isnan(_num(None)) and _num(2) == 2.0 and _num(0) == 0.0 and isinstance(_num(3), float)


def test_largest_gain_ties_go_to_the_lower_kl() -> None:
    def P(correct: int, kl: float, k: float) -> SweepPoint:  # noqa: N802 - a point, briefly
        return SweepPoint(k, 1.1, 10, correct / 100, 2.0, kl, correct, 100, mcnemar_p=0.3, significant=False)

    assert select_candidate([P(70, 0.02, 0.01), P(70, 0.01, 0.02), P(60, 0.0, 0.03)], 50, 0.05) == 1
    assert select_candidate([P(70, 0.01, 0.01), P(70, 0.01, 0.02)], 50, 0.05) == 0  # a full tie: the earlier
    assert select_candidate([P(51, 0.05, 0.01)], 50, 0.05) == 0  # one problem gained, KL at the budget: in
    assert select_candidate([P(51, 0.05, 0.01)], 51, 0.05) is None  # no gain: out
