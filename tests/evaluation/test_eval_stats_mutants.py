"""Edges of mathneuro_edit.evaluation.significance that the mutation run (scripts/mutation.sh evaluation) found unguarded: the
input checks (with their messages, not a math-domain error that happens to be a ValueError too), the exact 0 lower
bound at k = 0, the zero-count guard of ratio_se and the strict "p < 0.05" of a significance claim."""

from __future__ import annotations

import math

import pytest

from mathneuro_edit.evaluation.significance import (
    ALPHA,
    ratio_se,
    significant,
    wilson_interval,
)

scipy_stats = pytest.importorskip("scipy.stats")  # the test extra installs it


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
