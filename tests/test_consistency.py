"""Mask consistency: the overlaps are Jaccard (|A & B| / |A | B|), checked against an independent computation.

Checked to FAIL with the hand-applied mutation the earlier suite let through: "Jaccard" computed as containment
(|A & B| / |A| or / |B|); see docs/testing.md.
"""

from __future__ import annotations

import random
from itertools import combinations

import pytest
import torch

from mathneuro_edit import calibrate, find_math_params
from mathneuro_edit.consistency import jaccard, mask_consistency

from ._tiny import GENERAL, MATH, build


def _ref_jaccard(a, b) -> float:
    """|A & B| / |A | B| over sets of (tensor name, flat index); 1.0 for two empty masks."""
    sa = {(n, i) for n in a for i in a[n].reshape(-1).nonzero().reshape(-1).tolist()}
    sb = {(n, i) for n in b for i in b[n].reshape(-1).nonzero().reshape(-1).tolist()}
    return len(sa & sb) / len(sa | sb) if sa | sb else 1.0


def test_jaccard_is_intersection_over_union():
    a = {"x": torch.tensor([True, True, False, False]), "y": torch.tensor([[True, False], [False, False]])}
    b = {"x": torch.tensor([True, True, True, False]), "y": torch.tensor([[True, False], [False, True]])}
    # a is inside b: containment would say 1.0; Jaccard is 3 / 5
    assert jaccard(a, b) == pytest.approx(3 / 5) == _ref_jaccard(a, b)
    assert jaccard(b, a) == pytest.approx(3 / 5)
    c = {"x": torch.tensor([False, True, True, True]), "y": torch.tensor([[False, True], [False, False]])}
    assert jaccard(a, c) == pytest.approx(_ref_jaccard(a, c)) == pytest.approx(1 / 6)
    empty = {"x": torch.zeros(4, dtype=torch.bool), "y": torch.zeros(2, 2, dtype=torch.bool)}
    assert jaccard(empty, empty) == 1.0 and jaccard(a, empty) == 0.0


def test_mask_consistency_overlaps_equal_independent_jaccard():
    model, tok = build("llama")
    seed, repeats, top_k, sizes = 5, 3, 0.1, [2, 4]
    rows = mask_consistency(model, tok, MATH, GENERAL, sizes=sizes, repeats=repeats, top_k=top_k, seed=seed)

    def mask_of(m, g):
        return find_math_params(model, calibrate(model, tok, list(m), progress=False),
                                calibrate(model, tok, list(g), progress=False), top_k=top_k)

    full = mask_of(MATH, GENERAL)
    assert [r.samples for r in rows] == sizes
    some_partial = False
    for row, n in zip(rows, sizes):
        draws = []
        for r in range(repeats):  # the documented draw: Random(f"{seed}:{n}:{r}"), math first, then general
            rng = random.Random(f"{seed}:{n}:{r}")
            draws.append(mask_of(rng.sample(list(MATH), n), rng.sample(list(GENERAL), n)))
        with_full = [_ref_jaccard(d, full) for d in draws]
        between = [_ref_jaccard(a, b) for a, b in combinations(draws, 2)]
        assert row.repeats == repeats
        assert row.overlap_with_full_mean == pytest.approx(sum(with_full) / repeats, abs=1e-12)
        assert row.overlap_with_full_min == pytest.approx(min(with_full), abs=1e-12)
        assert row.overlap_between_draws_mean == pytest.approx(sum(between) / len(between), abs=1e-12)
        some_partial |= any(0 < v < 1 for v in with_full + between)
    assert some_partial  # partial overlaps exist, so containment and Jaccard would differ
