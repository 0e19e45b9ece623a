"""Statistics of the evaluation (mathneuro_edit.evaluation.significance): the Wilson interval, the exact McNemar
test and the loss standard error against scipy and hand-computed values, their input checks and messages, the
exact 0 lower bound at k = 0, the zero-count guard of ratio_se and the strict "p < 0.05" of a significance claim;
and how the eval dict and the sweep's candidate use them."""

from __future__ import annotations

import math
import random

import pytest

from mathneuro_edit.evaluation.results import (
    EvalResults,
    GeneralResult,
    MathPrediction,
    MathResult,
)
from mathneuro_edit.evaluation.significance import (
    ALPHA,
    discordant_pairs,
    mcnemar_exact,
    ratio_se,
    significant,
    wilson_interval,
)
from mathneuro_edit.runs.sweep.procedure import SweepPoint, recommend, select_candidate
from mathneuro_edit.runs.sweep.result import _point

scipy_stats = pytest.importorskip("scipy.stats")  # the test extra installs it


@pytest.mark.parametrize("k, n", [(0, 1), (1, 1), (0, 10), (10, 10), (124, 200), (3, 7), (299, 300), (50, 100)])
def test_wilson_matches_scipy(k: int, n: int) -> None:
    ref = scipy_stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    low, high = wilson_interval(k, n)
    assert low == pytest.approx(ref.low, abs=1e-12) and high == pytest.approx(ref.high, abs=1e-12)
    assert 0.0 <= low <= k / n <= high <= 1.0


def test_wilson_hand_values_and_errors() -> None:
    # by hand: p = 0.62, z^2/n = 0.019207; centre 0.61760, half-width 0.06667 -> 55.1% .. 68.4%
    assert [round(100 * x, 1) for x in wilson_interval(124, 200)] == [55.1, 68.4]
    assert wilson_interval(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        wilson_interval(3, 2)


def test_mcnemar_matches_scipy_binomial() -> None:
    rng = random.Random(0)
    cases = [(0, 0), (0, 1), (0, 6), (1, 1), (2, 10), (4, 20), (10, 2), (30, 31), (0, 50)] + [
        (rng.randrange(60), rng.randrange(60)) for _ in range(20)
    ]
    for b, c in cases:
        expected = 1.0 if b + c == 0 else scipy_stats.binomtest(min(b, c), b + c, 0.5).pvalue
        assert mcnemar_exact(b, c) == pytest.approx(expected, rel=1e-12), (b, c)
    assert mcnemar_exact(0, 6) == 2 / 64  # all 6 discordant problems the same way: 2 * (1/2)^6
    assert mcnemar_exact(600, 0) > 0.0  # exact integers: no underflow to 0 for large counts
    for b, c in ((1_500, 1_700), (10, 3_000)):  # past float range (2**1024): the exact integer tail, no float
        assert mcnemar_exact(b, c) == min(
            1.0, 2 * sum(math.comb(b + c, i) for i in range(min(b, c) + 1)) / 2 ** (b + c)
        )
    assert mcnemar_exact(0, 0) == 1.0 and isinstance(mcnemar_exact(0, 0), float)
    with pytest.raises(ValueError):
        mcnemar_exact(-1, 2)


def test_discordant_pairs() -> None:
    assert discordant_pairs([True, True, False, False, True], [True, False, True, True, True]) == (1, 2)
    with pytest.raises(ValueError, match="pair"):
        discordant_pairs([True], [True, False])


def test_ratio_se_against_plain_formulas() -> None:
    # equal counts: the standard error of the per-text means, stdev / sqrt(n)
    means = [2.0, 3.5, 1.0, 4.0, 2.5]
    plain = (sum((m - sum(means) / 5) ** 2 for m in means) / 4) ** 0.5 / 5**0.5
    assert ratio_se([10 * m for m in means], [10] * 5) == pytest.approx(plain, rel=1e-12)
    # unequal counts, hand-computed: sums (100, 150.5) over (40, 60): m = 2.505, residuals -0.2, 0.2
    assert ratio_se([100.0, 150.5], [40, 60]) == pytest.approx(math.sqrt(2 * 0.08) / 100, rel=1e-12)
    assert math.isnan(ratio_se([1.0], [3]))


def _math(flags: list[bool]) -> MathResult:
    return MathResult(
        sum(flags), len(flags), tuple(MathPrediction(f"q{i}", 1, "", int(ok)) for i, ok in enumerate(flags))
    )


def test_eval_dict_carries_intervals_and_paired_test() -> None:
    base = [i % 2 == 0 for i in range(40)]  # 20/40
    edited = [ok or i % 4 == 1 for i, ok in enumerate(base)]  # gains 10, loses none: 30/40
    d = EvalResults(
        {"m": _math(base), "g": GeneralResult(2.0, 9, 0.0, "", (4.0, 14.0), (3, 6))},
        {"m": _math(edited), "g": GeneralResult(2.2, 9, 0.01, "", (4.6, 15.2), (3, 6))},
    ).to_dict()
    assert (d["m"]["base"]["math_ci95_low"], d["m"]["base"]["math_ci95_high"]) == wilson_interval(20, 40)
    c = d["m"]["comparison"]
    assert (c["base_only"], c["edited_only"]) == (0, 10) and c["mcnemar_p"] == 2 / 2**10 and c["significant"]
    assert d["g"]["comparison"]["loss_change"] == pytest.approx(0.2)
    assert d["g"]["comparison"]["loss_change_se"] == pytest.approx(ratio_se([0.6, 1.2], [3, 6]))
    assert d["g"]["base"]["general_loss_se"] == pytest.approx(ratio_se([4.0, 14.0], [3, 6]))


def test_sweep_candidate_ignores_the_p_values_and_needs_the_budget() -> None:
    # select-then-confirm: the candidate is the largest gain within the KL budget; an uncorrected p < 0.05 plays no part
    def P(correct: int, p: float, kl: float) -> SweepPoint:  # noqa: N802 - a point, briefly
        return SweepPoint(0.05, 1.1, 10, correct / 200, 2.0, kl, correct, 200, mcnemar_p=p, significant=p < 0.05)

    points = [
        P(140, 0.20, 0.001),  # the largest gain within the budget, not significant: the candidate
        P(132, 0.01, 0.001),  # significant, within budget, smaller gain
        P(150, 0.001, 0.30),
    ]  # the largest gain, over the KL budget
    assert select_candidate(points, 120, 0.05) == 0
    assert select_candidate(points, 120, 0.5) == 2
    best, text = recommend(points, 120, 200, 0, None, 0.05)
    assert best is None and text.startswith("nothing confirmed: the candidate top_k=0.05 scale=1.1")


def test_sweep_point_from_eval_dict() -> None:
    base = [i < 10 for i in range(20)]
    edited = [True] * 20
    d = EvalResults(
        {"math": _math(base), "general": GeneralResult(2.0, 9, 0.0, "", (4.0, 14.0), (3, 6))},
        {"math": _math(edited), "general": GeneralResult(2.1, 9, 0.02, "", (4.3, 14.6), (3, 6))},
    ).to_dict()
    p = _point(0.05, 1.1, 7, d)
    assert (p.math_accuracy, p.math_correct, p.math_total, p.general_kl) == (1.0, 20, 20, 0.02)
    assert p.mcnemar_p == mcnemar_exact(0, 10) and p.significant
    assert (p.math_ci95_low, p.math_ci95_high) == wilson_interval(20, 20)


@pytest.mark.parametrize("k, n", [(3, 2), (-1, 5), (2.0, 4), (2, 4.0), (True, 1.5), (None, 3)])
def test_wilson_rejects_bad_counts_by_its_own_check(k: object, n: object) -> None:
    with pytest.raises(ValueError, match=r"need integers 0 <= k <= n"):
        wilson_interval(k, n)  # type: ignore[arg-type]


def test_wilson_lower_bound_is_exactly_zero_at_k_zero() -> None:
    # in floats centre - half leaves ~1e-19 for some n (e.g. n = 2999); the interval must still start at 0
    for n in [*range(1, 60), 2999]:
        low, high = wilson_interval(0, n)
        assert low == 0.0, n
        assert high == pytest.approx(scipy_stats.binomtest(0, n).proportion_ci(method="wilson").high, abs=1e-12)
        assert wilson_interval(n, n)[1] == 1.0


def test_ratio_se_guards() -> None:
    with pytest.raises(ValueError, match="sum to 0"):
        ratio_se([1.0, 2.0], [0, 0])  # two texts, no token: a clear error, not a ZeroDivisionError
    with pytest.raises(ValueError, match="sum to 0"):
        ratio_se([], [])
    assert math.isnan(ratio_se([1.0], [1]))  # one text with one token: measured, but no spread
    # two texts, 1 token in total: a valid (if tiny) sample; m = 3, residuals (3 - 3, 0 - 0) -> se 0
    assert ratio_se([3.0, 0.0], [1, 0]) == 0.0


def test_significance_is_strictly_below_alpha() -> None:
    assert ALPHA == 0.05
    assert significant(0.0499999) and not significant(0.05) and not significant(0.2)
    assert significant(0.05, alpha=0.1) and not significant(0.1, alpha=0.1)
