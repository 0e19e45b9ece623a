"""Top-k selection with a deterministic tie rule: the ``k`` highest scores, ties at the threshold to the lower index.

Used by :mod:`mathneuro_edit.engine.mask` (one matrix, or each of its rows, at a time). Two implementations of one rule:
:func:`top_fraction` per row (``torch.kthvalue``), :func:`top_fraction_flat` over a whole flat matrix (a radix
select that serves several ``k`` from one histogram); tests check them against each other.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["top_fraction", "top_fraction_flat"]


def top_fraction(scores: torch.Tensor, k: int) -> torch.Tensor:
    """The ``k`` highest entries (``0 <= k <= n``) of each row of finite ``(rows, n)`` scores, ties at the threshold
    going to the lower column index: a ``(rows, n)`` bool tensor with exactly ``k`` True per row.

    Example:
        >>> top_fraction(torch.tensor([[1.0, 3.0, 3.0, 2.0]]), 2)
        tensor([[False,  True,  True, False]])
    """
    n = scores.shape[1]
    if k == 0:  # int(n * top_k) truncates to 0 on small rows: nothing selected
        return torch.zeros(scores.shape, dtype=torch.bool, device=scores.device)
    # the k-th largest is the (n - k + 1)-th smallest: an O(n) selection, no full sort
    kth = torch.kthvalue(scores, n - k + 1, dim=1, keepdim=True).values  # (rows, 1)
    sel = scores >= kth  # (rows, n): exactly k per row unless several entries tie with the k-th
    extra = torch.count_nonzero(sel, dim=1) - k  # (rows,) surplus ties per row
    if bool((extra > 0).any()):
        # rare path: keep the ties at the lower column indices
        above = scores > kth
        need = k - torch.count_nonzero(above, dim=1).unsqueeze(1)  # (rows, 1) ties to take
        ties = scores == kth
        tie_rank = ties.cumsum(dim=1, dtype=torch.int32)  # 1-based rank among ties, by position
        sel = above | (ties & (tie_rank <= need))
    return sel


def top_fraction_flat(scores: torch.Tensor, ks: Sequence[int]) -> list[torch.Tensor]:
    """Top-``k`` of a flat tensor of non-negative finite scores, for several ``k``; same rule as :func:`top_fraction`.

    A radix select: non-negative float32 values order like their bit patterns read as int32, so a histogram of
    the top 16 bits (sign, exponent, 7 mantissa bits) locates the bin holding the k-th largest value in one
    pass; only that bin's entries are sorted. Every ``k`` reuses the histogram.

    Example:
        >>> [m.tolist() for m in top_fraction_flat(torch.tensor([1.0, 3.0, 3.0, 2.0]), [1, 2])]
        [[False, True, False, False], [False, True, True, False]]
    """
    if all(k == 0 for k in ks):  # every k truncated to 0: no histogram needed
        return [torch.zeros(scores.shape, dtype=torch.bool, device=scores.device) for _ in ks]
    high = scores.contiguous().view(torch.int32) >> 16  # (n,) bin of each score, monotonic in the score
    hist = torch.bincount(high, minlength=1 << 15)  # scores >= 0, so the sign bit is 0: 2**15 bins
    at_least = hist.flip(0).cumsum(0).flip(0)  # (bins,) at_least[b] = entries in bins >= b
    # the bin holding each k-th largest (k = 0 takes no bin: it selects nothing)
    bins = [int((at_least >= k).nonzero()[-1]) for k in ks if k > 0]
    compare = high.to(torch.int16)  # half the bytes for the comparison passes below
    if len(set(bins)) == 1:
        cand = (compare == bins[0]).nonzero().squeeze(1)  # (m,) ascending flat indices
    else:  # one gather finds the candidates of every k: entries in exactly those bins
        wanted = torch.zeros(1 << 15, dtype=torch.bool, device=scores.device)  # on the scores' device (a GPU's)
        wanted[torch.tensor(bins, device=scores.device)] = True
        cand = wanted[high].nonzero().squeeze(1)
    del high
    cand_bin, cand_val = compare[cand], scores[cand]
    out = []
    nonzero_bins = iter(bins)
    for k in ks:
        if k == 0:
            out.append(torch.zeros(scores.shape, dtype=torch.bool, device=scores.device))
            continue
        b = next(nonzero_bins)
        n_above = int(at_least[b + 1]) if b + 1 < at_least.numel() else 0
        in_b = cand_bin == b
        # stable descending sort: equal scores keep ascending index order, so ties go to the lower index
        order = torch.sort(cand_val[in_b], descending=True, stable=True).indices[: k - n_above]
        sel = compare > b
        sel[cand[in_b][order]] = True
        out.append(sel)
    return out
