"""Error bars and paired tests for evaluation results (pure Python: no torch, no scipy): intervals, the paired exact
McNemar test, standard errors over texts, Holm's adjustment and the power of a test (docs/evaluation.md).

Why these: Wilson's interval keeps its coverage near 0% and 100% (where the textbook ``p +- 1.96 sqrt(p(1-p)/n)``
collapses to a zero-width interval: 100/100 would read "100-100%"), and McNemar's exact test uses the pairing:
base and edited answer the SAME problems, so only the problems whose outcome changed carry evidence; two
independent-sample intervals overlapping says little about a paired difference.

Example:
    >>> [round(x, 3) for x in wilson_interval(124, 200)]
    [0.551, 0.684]
    >>> round(mcnemar_exact(2, 10), 4)
    0.0386
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

__all__ = [
    "Z95",
    "ALPHA",
    "wilson_interval",
    "mcnemar_exact",
    "discordant_pairs",
    "ratio_se",
    "significant",
    "holm_adjust",
    "mcnemar_critical",
    "mcnemar_power",
    "min_detectable_gain",
    "detectable_gain",
]

Z95 = 1.959963984540054  # the 97.5% quantile of the standard normal: a two-sided 95% interval
ALPHA = 0.05  # significance level of the paired test (reports say "significant" when p < ALPHA)


def wilson_interval(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval ``(low, high)`` of a proportion ``k / n``, ``0 <= k <= n`` (default: 95%, ``z``
    the normal quantile); ``n == 0`` gives ``(0.0, 1.0)``: nothing is known.

    Example:
        >>> wilson_interval(0, 10)[0], round(wilson_interval(10, 10)[0], 3)
        (0.0, 0.722)
    """
    if not (isinstance(k, int) and isinstance(n, int) and 0 <= k <= n):
        raise ValueError(f"wilson_interval: need integers 0 <= k <= n, got k={k!r}, n={n!r}")
    if n == 0:
        return 0.0, 1.0
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # at k = 0 (k = n) the lower (upper) bound is exactly 0 (1) in exact arithmetic; rounding would leave 1e-16
    low = 0.0 if k == 0 else max(0.0, centre - half)
    high = 1.0 if k == n else min(1.0, centre + half)
    return low, high


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value from the discordant counts.

    ``b`` problems are right only before the edit and ``c`` only after it. Under "the edit changes nothing"
    each discordant problem is equally likely to go either way, so ``min(b, c)`` is Binomial(b + c, 1/2); the
    two-sided p-value doubles the smaller tail (exact for this symmetric case) and caps it at 1: a p-value in
    ``(0, 1]``, 1.0 when there is no discordant problem.

    Example:
        >>> mcnemar_exact(0, 0), mcnemar_exact(0, 6)
        (1.0, 0.03125)
    """
    if not (isinstance(b, int) and isinstance(c, int) and b >= 0 and c >= 0):
        raise ValueError(f"mcnemar_exact: need integer counts >= 0, got b={b!r}, c={c!r}")
    n = b + c  # none discordant: a tail of 1 of 2**0, capped at 1
    # exact integer tail, then one division: no float underflow for large n (2**-n is 0.0 beyond n ~ 1074); each
    # binomial term built from the one before: milliseconds where a fresh comb per term takes minutes (n ~ 20,000)
    term = tail = 1
    for i in range(min(b, c)):
        term = term * (n - i) // (i + 1)
        tail += term
    return min(1.0, 2 * tail / 2**n)


def discordant_pairs(base: Sequence[bool], edited: Sequence[bool]) -> tuple[int, int]:
    """``(right with base only, right with edit only)`` over paired outcomes of the same problems.

    Example:
        >>> discordant_pairs([True, True, False, False], [True, False, True, True])
        (1, 2)
    """
    if len(base) != len(edited):
        raise ValueError(f"discordant_pairs: {len(base)} base vs {len(edited)} edited outcomes; pair the same problems")
    return sum(1 for x, y in zip(base, edited) if x and not y), sum(1 for x, y in zip(base, edited) if y and not x)


def ratio_se(sums: Sequence[float], counts: Sequence[int]) -> float:
    """Standard error, over texts, of the token-weighted mean ``sum(sums) / sum(counts)``.

    Tokens of one text are not independent, so the text is the unit: this is the usual (delta-method,
    cluster-robust) standard error of a ratio estimator,
    ``sqrt(n / (n - 1) * sum_i (s_i - m * c_i)**2) / sum_i c_i`` with ``m`` the weighted mean. With equal counts
    it is the plain standard error of the per-text means. Used for the general loss (``s_i`` the summed loss of
    text ``i``, ``c_i`` its predicted tokens) and for the paired loss change (``s_i`` the edited minus base sum).
    ``nan`` with fewer than two texts (no spread can be estimated).

    Example:
        >>> round(ratio_se([1.0, 2.0, 3.0], [1, 1, 1]), 4)  # = stdev([1, 2, 3]) / sqrt(3)
        0.5774
    """
    if len(sums) != len(counts):
        raise ValueError(f"ratio_se: {len(sums)} sums vs {len(counts)} counts")
    n, total = len(sums), sum(counts)
    if total <= 0:
        raise ValueError("ratio_se: the counts sum to 0; nothing was measured")
    if n < 2:
        return math.nan
    m = sum(sums) / total
    resid = math.fsum((s - m * c) ** 2 for s, c in zip(sums, counts))
    return math.sqrt(n / (n - 1) * resid) / total


def significant(p: float, alpha: float = ALPHA) -> bool:
    """Whether a p-value is below the significance level (0.05).

    Example:
        >>> significant(0.0386), significant(0.21)
        (True, False)
    """
    return p < alpha


def holm_adjust(pvalues: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values, in the order given (statsmodels' ``multipletests(method="holm")``).

    With the ``m`` p-values sorted ascending, ``p_(1) <= ... <= p_(m)``, the adjusted value of the ``i``-th is
    ``min(1, max_{j <= i} (m - j + 1) p_(j))``. Rejecting every hypothesis whose adjusted p is below ``alpha``
    is Holm's step-down procedure: the chance of ANY false rejection in the family stays at most ``alpha``
    whatever the dependence between the tests (a sweep's points share their problems and are correlated). Each
    adjusted value is ``>=`` its raw one.

    Example:
        >>> holm_adjust([0.01, 0.04, 0.03, 0.005])
        [0.03, 0.06, 0.06, 0.02]
    """
    ps = [float(p) for p in pvalues]
    for i, p in enumerate(ps):
        if not 0.0 <= p <= 1.0:  # also nan
            raise ValueError(f"holm_adjust: p-value {i} is {p!r}; p-values lie in [0, 1]")
    m = len(ps)
    out = [0.0] * m
    running = 0.0
    for rank, i in enumerate(sorted(range(m), key=lambda i: ps[i])):
        running = max(running, min(1.0, (m - rank) * ps[i]))
        out[i] = running
    return out


def _log_binom_pmf(k: int, n: int, p: float) -> float:
    """``log P(X = k)`` for ``X ~ Binomial(n, p)`` (``-inf`` where the probability is 0)."""
    if p <= 0.0:
        return 0.0 if k == 0 else -math.inf
    if p >= 1.0:
        return 0.0 if k == n else -math.inf
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * math.log(p) + (n - k) * math.log1p(-p)


@functools.lru_cache(maxsize=65536)
def mcnemar_critical(d: int, alpha: float = ALPHA) -> int:
    """The smallest ``c`` with ``c > d - c`` and ``mcnemar_exact(d - c, c) < alpha`` (``d + 1`` when none is).

    With ``d`` discordant problems, the exact two-sided McNemar test shows a gain exactly when the edit-only count
    is at least this (the p-value falls as ``c`` grows). Decided by :func:`mcnemar_exact` itself, started from the
    normal approximation; cached.

    Example:
        >>> mcnemar_critical(6), mcnemar_exact(0, 6), mcnemar_exact(1, 5)
        (6, 0.03125, 0.21875)
    """
    if isinstance(d, bool) or not isinstance(d, int) or d < 0:
        raise ValueError(f"mcnemar_critical: d must be an int >= 0, got {d!r}")
    c = min(d, max(d // 2 + 1, int(d / 2 + 1.96 * math.sqrt(d) / 2)))
    while c <= d and mcnemar_exact(d - c, c) >= alpha:
        c += 1
    while c - 1 > d - (c - 1) and mcnemar_exact(d - c + 1, c - 1) < alpha:
        c -= 1
    return c


def mcnemar_power(n: int, gain: float, discordance: float, alpha: float = ALPHA) -> float:
    """Probability that one two-sided exact McNemar test on ``n`` paired problems shows a gain (``c > b`` and
    ``p < alpha``), when the edit truly raises accuracy by ``gain``.

    Model: every problem independently is right only with the edit with probability ``(discordance + gain) / 2``
    and right only with the base with probability ``(discordance - gain) / 2``; ``discordance`` is the expected
    share of problems whose outcome changes. Then the discordant count ``D`` is Binomial(n, discordance) and, given
    ``D``, the edit-only count ``c`` is Binomial(D, (discordance + gain) / (2 discordance)). The test decision
    is :func:`mcnemar_exact` itself (exact, per ``D``), so the power is exact for this model; the base accuracy
    does not enter except that the shares must be possible (``b <= base``, ``c <= 1 - base``). At ``gain = 0``
    the power is the chance of a false "gain", at most ``alpha / 2``.

    Example:
        >>> round(mcnemar_power(600, 0.04, 0.10), 2)
        0.86
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"mcnemar_power: n must be an int >= 1, got {n!r}")
    if not 0.0 < discordance <= 1.0:
        raise ValueError(f"mcnemar_power: discordance must be in (0, 1], got {discordance!r}")
    if not 0.0 <= gain <= discordance:
        raise ValueError(f"mcnemar_power: gain must be in [0, discordance={discordance}], got {gain!r}")
    q = (discordance + gain) / (2 * discordance)  # P(edit-only | discordant)
    log_pd = [_log_binom_pmf(d, n, discordance) for d in range(n + 1)]
    top = max(log_pd)
    total = 0.0
    for d in range(1, n + 1):
        if log_pd[d] - top < -40:  # P(D = d) below 4e-18 of the mode's: nothing to add
            continue
        crit = mcnemar_critical(d, alpha)
        if crit > d:
            continue  # no outcome of d discordant problems is significant
        tail = math.fsum(math.exp(_log_binom_pmf(c, d, q)) for c in range(crit, d + 1))
        total += math.exp(log_pd[d]) * tail
    return min(1.0, total)


def min_detectable_gain(n: int, discordance: float, power: float = 0.8, alpha: float = ALPHA) -> float | None:
    """The smallest true gain (fraction) that :func:`mcnemar_power` detects with at least ``power``.

    Found by bisection to 1e-5 (the power grows with the gain); ``None`` when even ``gain = discordance`` (every
    discordant problem goes the edit's way) falls short.

    Example:
        >>> round(100 * min_detectable_gain(600, 0.10), 1)  # percentage points
        3.7
    """
    if not 0.0 < power < 1.0:
        raise ValueError(f"min_detectable_gain: power must be in (0, 1), got {power!r}")
    if mcnemar_power(n, discordance, discordance, alpha) < power:
        return None
    lo, hi = 0.0, discordance
    while hi - lo > 1e-5:
        mid = (lo + hi) / 2
        if mcnemar_power(n, mid, discordance, alpha) >= power:
            hi = mid
        else:
            lo = mid
    return hi


def detectable_gain(
    n: int, before_only: int, after_only: int, alpha: float = ALPHA, power: float = 0.8
) -> float | None:
    """The smallest true gain (fraction) a paired exact McNemar test on ``n`` problems detects with ``power``, at
    the discordance the test observed, ``(before_only + after_only) / n``: what a "not confirmed" can rule out.

    ``None`` when no gain is detectable at that discordance (a gain cannot exceed the share of problems that
    change, and with few of them even every change going the edit's way is not significant), or when no problem
    changed (nothing to estimate the discordance from). :func:`min_detectable_gain` computes it.

    Example:
        >>> round(100 * detectable_gain(800, 5, 14), 1)  # 19 of 800 problems changed (2.4%): +1.6 points
        1.6
        >>> detectable_gain(1000, 1, 3) is None  # 4 of 1,000 changed: even +0.4 (all 4 the edit's) is not shown
        True
    """
    for name, k, lo in (("n", n, 1), ("before_only", before_only, 0), ("after_only", after_only, 0)):
        if isinstance(k, bool) or not isinstance(k, int) or k < lo:
            raise ValueError(f"detectable_gain: {name} must be an int >= {lo}, got {k!r}")
    if before_only + after_only > n:
        raise ValueError(f"detectable_gain: {before_only} + {after_only} discordant problems of {n}")
    if before_only + after_only == 0:
        return None
    return min_detectable_gain(n, (before_only + after_only) / n, power, alpha)
