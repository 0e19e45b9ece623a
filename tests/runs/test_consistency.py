"""Mask consistency: the overlaps are Jaccard (|A & B| / |A | B|), checked against an independent computation.

A hand-applied change this file must catch: "Jaccard" computed as containment (|A & B| / |A| or / |B|); see
docs/testing.md.
"""

from __future__ import annotations

import random
from itertools import combinations

import pytest
import torch

from mathneuro_edit import calibrate, find_math_params
from mathneuro_edit.recipe.io import quickstart_recipe
from mathneuro_edit.runs.consistency import DrawMasks, jaccard, mask_consistency
from mathneuro_edit.runs.steps.record import RunRecord
from tests._tiny import GENERAL, MATH, build


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
    recipe = quickstart_recipe([f"mask.top_k={top_k}"])
    masks = DrawMasks(RunRecord(recipe, model=model, tokenizer=tok, progress=False))
    rows = mask_consistency(masks, MATH, GENERAL, sizes=sizes, repeats=repeats, seed=seed)
    c = recipe.calibration

    def mask_of(m, g):  # independently: the library's calibrate and find_math_params at the recipe's settings
        return find_math_params(
            model,
            calibrate(model, tok, list(m), max_length=c.max_length, batch_size=c.batch_size, progress=False),
            calibrate(model, tok, list(g), max_length=c.max_length, batch_size=c.batch_size, progress=False),
            top_k=top_k,
        )

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


class _Recorder:
    """A draw's mask determined by the texts drawn; records every call."""

    top_k = 0.05

    def __init__(self) -> None:
        self.calls: list[tuple[tuple[str, ...], tuple[str, ...]]] = []

    def __call__(self, math, general):
        self.calls.append((tuple(math), tuple(general)))
        bits = torch.zeros(64, dtype=torch.bool)
        for t in [*math, *general]:
            bits[sum(map(ord, t)) % 64] = True
        return {"w": bits}


def test_mask_consistency_defaults_and_draws():
    """With a recording mask maker: the documented defaults (3 repeats, seed 0), draws and size checks."""
    from mathneuro_edit import InputError

    masks = _Recorder()
    math_texts, general_texts = [f"m{i}" for i in range(6)], [f"g{i}" for i in range(5)]
    rows = mask_consistency(masks, math_texts, general_texts, sizes=[1, 5])
    assert [(r.samples, r.repeats) for r in rows] == [(1, 3), (5, 3)]  # default repeats 3; n = 1 and n = min allowed
    assert masks.calls[0] == (tuple(math_texts), tuple(general_texts))  # the full-data mask first
    full = masks(math_texts, general_texts)
    for row, n in zip(rows, [1, 5]):
        draws = []
        for r in range(3):  # default seed 0
            rng = random.Random(f"0:{n}:{r}")
            draws.append(masks(rng.sample(math_texts, n), rng.sample(general_texts, n)))
        assert row.overlap_with_full_mean == pytest.approx(sum(_ref_jaccard(d, full) for d in draws) / 3)
        between = [_ref_jaccard(a, b) for a, b in combinations(draws, 2)]
        assert row.overlap_between_draws_mean == pytest.approx(sum(between) / 3)
    one = mask_consistency(masks, math_texts, general_texts, sizes=[2], repeats=1)
    assert one[0].overlap_between_draws_mean is None  # one draw: nothing to compare it with
    for bad in ([0], [6], [-1]):
        with pytest.raises(InputError, match="sizes: "):
            mask_consistency(masks, math_texts, general_texts, sizes=bad)
    with pytest.raises(InputError, match="repeats: must be >= 1"):
        mask_consistency(masks, math_texts, general_texts, sizes=[1], repeats=0)


def test_a_draw_s_mask_is_made_by_the_run_s_steps(monkeypatch):
    """DrawMasks calibrates each set with the recipe (calibrate_set) and selects with its mask rule (recipe_masks)."""
    import mathneuro_edit.runs.consistency as consistency_mod

    calls: dict[str, list] = {"calibrate": [], "mask": []}

    def fake_calibrate(run, texts):
        calls["calibrate"].append((run.recipe, tuple(texts), run.progress))
        return tuple(texts)

    def fake_masks(recipe, stats, top_ks, weights, **kwargs):
        calls["mask"].append((recipe, stats.math, stats.general, list(top_ks), kwargs))
        return ["mask"]

    monkeypatch.setattr(consistency_mod, "calibrate_set", fake_calibrate)  # the names consistency calls
    monkeypatch.setattr(consistency_mod, "recipe_masks", fake_masks)
    monkeypatch.setattr(consistency_mod, "model_weights", lambda model: "weights")
    recipe = quickstart_recipe(["mask.top_k=0.2"])
    assert DrawMasks(RunRecord(recipe, progress=True))(["m"], ["g"]) == "mask"
    assert calls["calibrate"] == [(recipe, ("m",), True), (recipe, ("g",), True)]
    assert calls["mask"] == [(recipe, ("m",), [("g",)], [0.2], {})]
