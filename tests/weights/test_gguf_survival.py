"""The edit's survival in a quantized file (weights/gguf_survival.py): the pure count against a plain loop, the
share and the one line a run says when most of the edit is gone. Milliseconds, no files."""

from __future__ import annotations

import numpy as np
import pytest

from mathneuro_edit.weights.gguf_survival import add_counts, gone_line, share, survival_counts


def _loop(b, e, qb, qe):
    """The same figures, one entry at a time."""
    edited = survived = collateral = 0
    intended = along = 0.0
    for x, y, qx, qy in zip(b, e, qb, qe):
        if x != y:
            edited += 1
            survived += qx != qy
            intended += abs(y - x)
            along += (1 if y > x else -1) * (qy - qx)
        else:
            collateral += qx != qy
    return edited, survived, collateral, intended, along


def test_counts_equal_a_plain_loop() -> None:
    rng = np.random.default_rng(0)
    b = rng.normal(size=500)
    e = b.copy()
    hit = rng.random(500) < 0.1
    e[hit] *= 1.1
    qb = np.round(b * 4) / 4  # a coarse grid: some edits round back to the base's value
    qe = np.round(e * 4) / 4
    qe[~hit & (rng.random(500) < 0.05)] += 0.25  # a moved block scale: collateral
    got = survival_counts(b, e, qb, qe)
    edited, survived, collateral, intended, along = _loop(b, e, qb, qe)
    assert (got["edited"], got["survived"], got["collateral"]) == (edited, survived, collateral)
    assert got["intended"] == pytest.approx(intended) and got["delivered_along"] == pytest.approx(along)
    assert 0 < survived < edited  # the grid keeps some edits and loses others: the test can tell them apart


def test_a_wrong_way_rounding_counts_against_the_delivery() -> None:
    got = share(survival_counts([1.0, 1.0], [1.2, 1.2], [1.0, 1.0], [0.9, 1.5]))
    assert got == {"survived_share": 1.0, "delivered": pytest.approx((-0.1 + 0.5) / 0.4)}


def test_totals_add_and_a_model_without_edits_has_no_share() -> None:
    a = survival_counts([0.0, 1.0], [0.0, 2.0], [0.0, 1.0], [0.0, 2.0])
    total = add_counts([a, a])
    assert (total["edited"], total["survived"], total["intended"]) == (2, 2, 2.0)
    assert share(survival_counts([1.0], [1.0], [1.0], [1.0])) == {"survived_share": None, "delivered": None}


def test_the_run_says_so_only_when_most_of_the_edit_is_gone() -> None:
    keep = {"edited": 10, "survived": 5, "intended": 1.0, "delivered_along": 0.5}
    lost = {"edited": 10, "survived": 4, "intended": 1.0, "delivered_along": 0.1}
    assert gone_line("Q4_K_M", keep) is None
    assert gone_line("Q4_K_M", lost) == (
        "most of the edit is gone in Q4_K_M: 4 of 10 edited weights (40.0%) still differ from the base in Q4_K_M "
        "(delivered 10% of the intended change)"
    )
    assert gone_line("Q4_0", {"edited": 0, "survived": 0, "intended": 0.0, "delivered_along": 0.0}) is None


def test_shapes_must_agree() -> None:
    with pytest.raises(ValueError, match="shapes differ"):
        survival_counts([1.0, 2.0], [1.0], [1.0], [1.0])
