"""Error bars and paired tests for evaluation results (pure Python: no torch, no scipy).

- :func:`wilson_interval`: the 95% Wilson score interval of an accuracy ``k / n``;
- :func:`mcnemar_exact`: the paired exact McNemar test of base vs edited on the same problems (a two-sided
  binomial test of the discordant pairs against 1/2);
- :func:`ratio_se`: the standard error, over texts, of a token-weighted mean (the general loss, its change).

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

import math
from collections.abc import Sequence

__all__ = ["Z95", "ALPHA", "wilson_interval", "mcnemar_exact", "discordant_pairs", "ratio_se", "significant"]

Z95 = 1.959963984540054  # the 97.5% quantile of the standard normal: a two-sided 95% interval
ALPHA = 0.05  # significance level of the paired test (reports say "significant" when p < ALPHA)


def wilson_interval(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a proportion ``k / n`` (default: 95%).

    Args:
        k: successes, ``0 <= k <= n``.
        n: trials, ``n >= 1`` (``n == 0`` gives ``(0.0, 1.0)``: nothing is known).
        z: the normal quantile (1.96 for 95%).

    Returns:
        ``(low, high)``, both in ``[0, 1]``.

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
    two-sided p-value doubles the smaller tail (exact for this symmetric case) and caps it at 1.

    Args:
        b: problems right with the base only.
        c: problems right with the edit only.

    Returns:
        The p-value in ``(0, 1]``; 1.0 when there is no discordant problem.

    Example:
        >>> mcnemar_exact(0, 0), mcnemar_exact(0, 6)
        (1.0, 0.03125)
    """
    if not (isinstance(b, int) and isinstance(c, int) and b >= 0 and c >= 0):
        raise ValueError(f"mcnemar_exact: need integer counts >= 0, got b={b!r}, c={c!r}")
    n = b + c
    if n == 0:
        return 1.0
    # exact integer tail, then one division: no float underflow for large n (2**-n is 0.0 beyond n ~ 1074)
    tail = sum(math.comb(n, i) for i in range(min(b, c) + 1))
    return min(1.0, 2 * tail / 2**n)


def discordant_pairs(base: Sequence[bool], edited: Sequence[bool]) -> tuple[int, int]:
    """``(right with base only, right with edit only)`` over paired outcomes of the same problems.

    Example:
        >>> discordant_pairs([True, True, False, False], [True, False, True, True])
        (1, 2)
    """
    if len(base) != len(edited):
        raise ValueError(f"discordant_pairs: {len(base)} base vs {len(edited)} edited outcomes; pair the same "
                         "problems")
    b = sum(1 for x, y in zip(base, edited) if x and not y)
    c = sum(1 for x, y in zip(base, edited) if y and not x)
    return b, c


def ratio_se(sums: Sequence[float], counts: Sequence[int]) -> float:
    """Standard error, over texts, of the token-weighted mean ``sum(sums) / sum(counts)``.

    Tokens of one text are not independent, so the text is the unit: this is the usual (delta-method,
    cluster-robust) standard error of a ratio estimator,
    ``sqrt(n / (n - 1) * sum_i (s_i - m * c_i)**2) / sum_i c_i`` with ``m`` the weighted mean. With equal counts
    it is the plain standard error of the per-text means. Used for the general loss (``s_i`` the summed loss of
    text ``i``, ``c_i`` its predicted tokens) and for the paired loss change (``s_i`` the edited minus base sum).

    Args:
        sums: per-text sums.
        counts: per-text token counts (> 0 in total).

    Returns:
        The standard error; ``nan`` with fewer than two texts (no spread can be estimated).

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
