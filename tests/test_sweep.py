"""Sweep decisions on constructed points, against hand-computed answers (issue 17, issue 11e).

Checked to FAIL with two hand-applied mutations the earlier suite let through: the Pareto front including every
point, and the recommendation ignoring the KL budget (docs/testing.md). The recommendation also needs a
significant gain (paired exact McNemar p < 0.05 vs the base, docs/evaluation.md): the table below mixes
significant and non-significant points so that both paths are checked.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import asdict

import pytest

from mathneuro_edit.evaluation.significance import wilson_interval
from mathneuro_edit.runs.sweep import SweepPoint, SweepResult, _point, pareto_front, recommend

NAN = math.nan  # a point built without the loss columns holds nan (the same object, so dicts compare equal)

N = 100  # problems per evaluation: math_correct = accuracy * N


def P(acc: float, kl: float, top_k: float = 0.05, p: float = 0.01, scale: float = 1.1) -> SweepPoint:  # noqa: N802
    """A point of ``N`` problems with its Wilson interval and McNemar p (significant exactly when p < 0.05)."""
    k = round(acc * N)
    low, high = wilson_interval(k, N)
    return SweepPoint(top_k, scale, 10, acc, 2.0, kl, k, N, low, high, p, p < 0.05)


# index: (math accuracy, general KL, McNemar p)      hand-computed role (base 0.50, budget 0.05)
POINTS = [
    P(0.60, 0.020, 0.01, p=0.12),    # 0 front, within budget, NOT significant: never recommended
    P(0.70, 0.100, 0.02, p=0.0004),  # 1 front (best accuracy), significant, OVER budget
    P(0.60, 0.030, 0.03, p=0.03),    # 2 dominated by 0 (same accuracy, more KL)
    P(0.55, 0.010, 0.04, p=0.05),    # 3 front; p exactly 0.05 is NOT significant
    P(0.40, 0.005, 0.05, p=0.02),    # 4 front (least KL), a significant LOSS (below the base)
    P(0.58, 0.040, 0.06, p=0.04),    # 5 dominated by 0
    P(0.62, 0.050, 0.07, p=0.004),   # 6 front, exactly at the budget: the recommendation
    P(0.60, 0.020, 0.08, p=0.045),   # 7 identical to 0 but significant: both on the front
    P(0.30, 0.200, 0.09, p=0.001),   # 8 dominated by everything
]
FRONT = [0, 1, 3, 4, 6, 7]
SIGNIFICANT = [False, True, True, False, True, True, True, True, True]


def reference_front(points) -> list[int]:
    """Indices of the points no other point beats (>= accuracy and <= KL, one strictly): written out pairwise."""
    out = []
    for i, p in enumerate(points):
        beaten = False
        for j, q in enumerate(points):
            better_or_equal = q.math_accuracy >= p.math_accuracy and q.general_kl <= p.general_kl
            strictly = q.math_accuracy > p.math_accuracy or q.general_kl < p.general_kl
            beaten = beaten or (i != j and better_or_equal and strictly)
        if not beaten:
            out.append(i)
    return out


def reference_best(points, base_accuracy: float, kl_budget: float) -> int | None:
    """Highest accuracy above the base, significant (McNemar p < 0.05) and within the budget; ties to the lower
    KL, then the earlier point."""
    best = None
    for i, p in enumerate(points):
        if p.general_kl > kl_budget or p.math_accuracy <= base_accuracy or not p.mcnemar_p < 0.05:
            continue
        if best is None or (p.math_accuracy, -p.general_kl) > (points[best].math_accuracy, -points[best].general_kl):
            best = i
    return best


def test_reference_agrees_with_the_hand_computed_front():
    assert reference_front(POINTS) == FRONT
    assert [p.significant for p in POINTS] == SIGNIFICANT


def test_pareto_front_is_the_hand_computed_one():
    assert pareto_front(POINTS) == FRONT  # significance plays no part in the front: 0 and 3 are on it
    assert pareto_front([]) == []
    assert pareto_front([POINTS[8]]) == [0]
    assert pareto_front([POINTS[2], POINTS[0]]) == [1]
    assert pareto_front([P(0.5, 0.02), P(0.6, 0.02)]) == [1]  # equal KL, higher accuracy: that one beats it
    assert pareto_front([P(0.6, 0.02), P(0.6, 0.01)]) == [1]  # equal accuracy, lower KL


def test_recommendation_respects_the_kl_budget():
    best, text = recommend(POINTS, 0.50, 0.05)
    assert best == 6 == reference_best(POINTS, 0.50, 0.05)  # point 1 is better but over the budget
    # 62/100: Wilson 95% interval 52.2%-70.9% (centre 0.6156, half-width 0.0935 by hand)
    assert text == ("recommended: top_k=0.07 scale=1.1: math 50.0% -> 62.0% (62/100, 95% CI 52.2-70.9), "
                    "p = 0.004 (paired McNemar), general KL 0.05 (budget 0.05)")
    assert recommend(POINTS, 0.50, 0.1)[0] == 1  # a larger budget admits point 1
    assert recommend(POINTS, 0.50, 0.049)[0] == 7  # 6 just over: 0/2/7 tie at 60%; 0 is not significant; 7 < 2 KL
    assert recommend(POINTS, 0.50, 0.025)[0] == 7  # 0 has the same numbers but is not significant


def test_recommendation_needs_a_significant_gain():
    # budget 0.015: 3 (55%, KL 0.01) fits and beats the base, but p = 0.05 is not significant; 4 is a loss
    best, text = recommend(POINTS, 0.50, 0.015)
    assert best is None is reference_best(POINTS, 0.50, 0.015)
    assert text == ("nothing qualifies: no setting raises math accuracy over the base (50.0%) significantly "
                    "(paired McNemar p < 0.05) within the general-KL budget 0.015 (largest gain: top_k=0.02 "
                    "scale=1.1, 50.0% -> 70.0%, p < 0.001, general KL 0.1); do not publish a boost from this sweep")
    best, text = recommend(POINTS, 0.50, 0.009)  # only point 4 fits: significant, but below the base
    assert best is None and text.startswith("nothing qualifies:") and "budget 0.009 (largest gain: top_k=0.02" in text
    best, text = recommend(POINTS, 0.70, 1.0)  # equal to the base is no improvement; nothing gains at all
    assert best is None and text == (
        "nothing qualifies: no setting raises math accuracy over the base (70.0%) significantly (paired McNemar "
        "p < 0.05) within the general-KL budget 1; do not publish a boost from this sweep")
    # the same table with every point significant / none significant
    all_sig = [P(p.math_accuracy, p.general_kl, p.top_k, p=0.01) for p in POINTS]
    assert recommend(all_sig, 0.50, 0.049)[0] == 0  # 0 now qualifies: tied with 7 on accuracy and KL, first
    assert recommend(all_sig, 0.50, 0.015)[0] == 3
    none_sig = [P(p.math_accuracy, p.general_kl, p.top_k, p=0.2) for p in POINTS]
    assert all(recommend(none_sig, 0.50, b)[0] is None for b in (0.0, 0.05, 1.0))
    assert recommend([SweepPoint(0.05, 1.1, 9, 0.9, 2.0, 0.0)], 0.5, 1.0)[0] is None  # no p given: not significant


@pytest.mark.parametrize("budget", [0.0, 0.005, 0.01, 0.02, 0.03, 0.05, 0.1, 0.2, 1.0])
@pytest.mark.parametrize("base", [0.0, 0.4, 0.55, 0.6, 0.7])
def test_recommendation_equals_reference_over_a_grid(base, budget):
    assert recommend(POINTS, base, budget)[0] == reference_best(POINTS, base, budget)


def test_ties_in_accuracy_go_to_the_lower_kl():
    pts = [P(0.6, 0.04), P(0.6, 0.01), P(0.6, 0.02)]
    assert recommend(pts, 0.5, 0.05)[0] == 1
    assert pareto_front(pts) == [1]
    pts[1] = P(0.6, 0.01, p=0.3)  # the least-KL one not significant: the next least KL
    assert recommend(pts, 0.5, 0.05)[0] == 2


def test_point_takes_the_paired_comparison_of_the_eval():
    res = {"math": {"edited": {"math_accuracy": 0.62, "math_correct": 62, "math_total": 100, "math_ci95_low": 0.52,
                               "math_ci95_high": 0.71},
                    "comparison": {"mcnemar_p": 0.004, "significant": True}},
           "general": {"edited": {"general_loss": 2.5, "general_kl": 0.03}}}
    assert _point(0.07, 1.1, 9, res) == SweepPoint(0.07, 1.1, 9, 0.62, 2.5, 0.03, 62, 100, 0.52, 0.71, 0.004, True)
    res["math"].pop("comparison")  # no paired comparison: never significant
    assert _point(0.07, 1.1, 9, res).significant is False and _point(0.07, 1.1, 9, res).mcnemar_p == 1.0


def test_csv_marks_the_front():
    result = SweepResult(0.5, 2.0, POINTS, pareto_front(POINTS), "x", 6)
    rows = list(csv.reader(io.StringIO(result.to_csv())))
    assert rows[0] == ["top_k", "scale", "selected", "math_accuracy", "math_correct", "math_total", "math_ci95_low",
                       "math_ci95_high", "mcnemar_p", "significant", "general_loss", "general_loss_se", "loss_change",
                       "loss_change_se", "general_kl", "pareto"]
    assert rows[1:] == [[str(p.top_k), str(p.scale), str(p.selected), str(p.math_accuracy),
                         str(round(100 * p.math_accuracy)), "100", f"{p.math_ci95_low:.4f}", f"{p.math_ci95_high:.4f}",
                         f"{p.mcnemar_p:g}",
                         str(SIGNIFICANT[i]), str(p.general_loss), "nan", "nan", "nan", str(p.general_kl), str(i in FRONT)]
                        for i, p in enumerate(POINTS)]
    assert rows[7][6:10] == ["0.5221", "0.7090", "0.004", "True"]  # point 6, by hand (62/100)
    assert result.to_dict() == {
        "base": {"math_accuracy": 0.5, "general_loss": 2.0, "general_loss_se": NAN},
        "points": [{"top_k": p.top_k, "scale": p.scale, "selected": p.selected, "math_accuracy": p.math_accuracy,
                    "general_loss": p.general_loss, "general_kl": p.general_kl, "math_correct": p.math_correct,
                    "math_total": 100, "math_ci95_low": p.math_ci95_low, "math_ci95_high": p.math_ci95_high,
                    "mcnemar_p": p.mcnemar_p, "significant": SIGNIFICANT[i], "general_loss_se": NAN,
                    "loss_change": NAN, "loss_change_se": NAN} for i, p in enumerate(POINTS)],
        "pareto_front": FRONT, "recommendation": "x", "best": 6}
    base = {"math_accuracy": 0.5, "math_correct": 50, "math_total": 100, "predictions": [{"correct": True}]}
    with_base = SweepResult(0.5, 2.0, POINTS, FRONT, "x", 6, base).to_dict()["base"]
    assert with_base == {"math_accuracy": 0.5, "general_loss": 2.0, "general_loss_se": NAN, "math_correct": 50,
                         "math_total": 100}
    assert asdict(POINTS[0])["significant"] is False
