"""The sweep's general KL against a base kept as a bounded support: exact with the whole vocabulary, a lower
bound with fewer tokens (the chain rule of KL), and exact losses either way."""

from __future__ import annotations

import torch

from mathneuro_edit.engine.apply import ReversibleEdit
from mathneuro_edit.engine.mask import Mask
from mathneuro_edit.evaluation.general_kl import base_support, edited_general
from mathneuro_edit.evaluation.runner import general_loss
from tests._tiny import GENERAL, VOCAB, build


def _edit(model):
    w = {n: p for n, p in model.named_parameters() if p.dim() == 2 and "mlp" in n}
    g = torch.Generator().manual_seed(0)
    return ReversibleEdit(model, Mask({n: torch.rand(p.shape, generator=g) < 0.5 for n, p in w.items()}), 0.0)


def test_support_of_the_whole_vocabulary_gives_the_exact_kl_and_loss():
    model, tok = build("llama", seed=1)
    edit = _edit(model)
    exact = general_loss(model, tok, GENERAL, edit=edit, max_length=64, progress=False)
    support = base_support(model, tok, GENERAL, max_length=64, k=VOCAB + 10)
    with edit:
        got = edited_general(model, support)
    n = sum(len(r) - 1 for r in support.rows)
    assert abs(sum(got.loss_sums) / n - exact.loss) < 1e-5
    assert abs(got.kl - exact.kl) <= 1e-5 * exact.kl and exact.kl > 1e-6
    assert got.tail_mass == 0.0


def test_a_small_support_is_a_lower_bound_that_tightens_with_k():
    model, tok = build("llama", seed=2)
    edit = _edit(model)
    exact = general_loss(model, tok, GENERAL, edit=edit, max_length=64, progress=False).kl
    kls = []
    for k in (1, 4, 16, 64):
        support = base_support(model, tok, GENERAL, max_length=64, k=k)
        with edit:
            kls.append(edited_general(model, support).kl)
    assert all(a <= b + 1e-9 for a, b in zip(kls, kls[1:]))  # a finer partition never lowers the KL
    assert kls[-1] <= exact + 1e-9 and kls[0] < exact  # coarse KL <= exact KL, strictly with one token kept
