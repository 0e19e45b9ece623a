"""``mask.reference: official``: the released MathNeuro script's selection, against an independent re-implementation.

The reference below is written from the rule (docs/method.md, "The released script's selection"), not from the
package, and shares none of its mechanics: forward hooks (not pre-hooks) on every ``nn.Linear`` found by
``named_modules()``, complete forward passes (no early stop), a dict of running sums keyed by
``named_parameters()`` (which is how a tied ``lm_head`` drops out), the product ``n_s * |W|`` formed out of place, and
the top-k by a full stable sort (ties to the lower flat index). Equality is exact, tensor by tensor.

Each test here was checked to FAIL with one hand-applied mutation of ``mathneuro_edit/engine/official.py``
(docs/testing.md): float32 sums instead of the weight's dtype, the texts taken longest first, ties to the higher
index, the tied ``lm_head`` scored, an ``embed`` weight kept.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from mathneuro_edit.engine.calibration import calibrate
from mathneuro_edit.engine.mask import find_math_params
from mathneuro_edit.engine.official import (
    find_math_params_official,
    official_targets,
)
from mathneuro_edit.errors import InputError
from tests._tiny import GENERAL, MATH, build

TOP_K = 0.05


# ----------------------------------------------------------------------------------------------------------
# the reference
# ----------------------------------------------------------------------------------------------------------
def ref_sums(model: nn.Module, tokenizer, texts: list[str]) -> dict[str, torch.Tensor]:
    """Per scored weight: sum over samples (in order) of ``bf16(norm over tokens) * |W|``, in the weight's dtype."""
    last: dict[str, torch.Tensor] = {}

    def hook(module, inputs, output, name):
        n = inputs[0].norm(p=2, dim=1).to(torch.bfloat16)  # (1, d_in): L2 over the sample's tokens
        last[name] = n * torch.abs(module.weight.data)  # promoted, rounded once to the weight's dtype

    handles = [
        m.register_forward_hook(lambda m_, i, o, name=name: hook(m_, i, o, name))
        for name, m in model.named_modules()
        if isinstance(m, nn.Linear)
    ]
    sums = {name: torch.zeros_like(p) for name, p in model.named_parameters()}
    try:
        with torch.no_grad():
            for text in texts:
                model(torch.tensor([tokenizer(text)["input_ids"]]))
                for name, product in last.items():
                    if f"{name}.weight" in sums:  # a tied lm_head's weight is not under its own name
                        sums[f"{name}.weight"] = sums[f"{name}.weight"] + product
    finally:
        for h in handles:
            h.remove()
    return {k: v for k, v in sums.items() if k.removesuffix(".weight") in last and "embed" not in k}


def ref_top(sums: torch.Tensor, top_k: float) -> torch.Tensor:
    flat = sums.abs().float().flatten()
    order = torch.sort(-flat, stable=True).indices[: int(flat.numel() * top_k)]
    sel = torch.zeros(flat.numel(), dtype=torch.bool)
    sel[order] = True
    return sel.reshape(sums.shape)


def ref_mask(model, tokenizer, math: list[str], general: list[str] | None, top_k: float) -> dict[str, torch.Tensor]:
    m = ref_sums(model, tokenizer, math)
    g = ref_sums(model, tokenizer, general) if general is not None else None
    return {k: ref_top(v, top_k) & (~ref_top(g[k], top_k) if g is not None else True) for k, v in m.items()}


def assert_same(mask, ref: dict[str, torch.Tensor]) -> None:
    assert list(mask) == list(ref)
    for name, sel in ref.items():
        assert torch.equal(mask[name], sel), name


def jaccard(a, b) -> float:
    inter = sum(int((a[n] & b[n]).sum()) for n in a)
    union = sum(int((a[n] | b[n]).sum()) for n in a)
    return inter / union


# ----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("family", ["llama", "qwen2", "gemma2"])  # untied lm_head; q/k/v biases; tied lm_head
def test_official_mask_equals_the_reference_in_bf16(family):
    model, tok = build(family, dtype=torch.bfloat16, hidden_size=64)
    mask = find_math_params_official(model, tok, MATH, [GENERAL], top_k=TOP_K)
    assert_same(mask, ref_mask(model, tok, MATH, GENERAL, TOP_K))
    assert mask.meta["reference"] == "official" and mask.meta["dtype"] == "bfloat16"
    assert mask.total()[0] > 0


def test_official_differs_from_the_default_rule_in_bf16():
    """Why the setting exists: bf16 sums and products select other weights than float32 statistics do."""
    model, tok = build("llama", dtype=torch.bfloat16, hidden_size=64)
    official = find_math_params_official(model, tok, MATH, [GENERAL], top_k=TOP_K)
    default = find_math_params(
        model, calibrate(model, tok, MATH, progress=False), calibrate(model, tok, GENERAL, progress=False), top_k=TOP_K
    )
    assert 0.5 < jaccard(official, default) < 1.0


def test_sample_order_matters_and_is_kept():
    """bf16 sums are not associative: the texts are summed in the order given (the reversed order differs)."""
    model, tok = build("llama", dtype=torch.bfloat16, hidden_size=64)
    texts = MATH * 3
    forward = find_math_params_official(model, tok, texts, None, top_k=0.2, method="wanda")
    backward = find_math_params_official(model, tok, texts[::-1], None, top_k=0.2, method="wanda")
    assert_same(forward, ref_mask(model, tok, texts, None, 0.2))
    assert_same(backward, ref_mask(model, tok, texts[::-1], None, 0.2))
    assert any(not torch.equal(forward[n], backward[n]) for n in forward)


def test_float32_model_and_several_top_k_and_methods():
    model, tok = build("llama", dtype=torch.float32, hidden_size=64)
    masks = find_math_params_official(model, tok, MATH, [GENERAL], top_k=[0.01, 0.1, 0.3])
    for top_k, mask in zip([0.01, 0.1, 0.3], masks):
        assert_same(mask, ref_mask(model, tok, MATH, GENERAL, top_k))
    wanda = find_math_params_official(model, tok, MATH, None, top_k=0.1, method="wanda")
    assert_same(wanda, ref_mask(model, tok, MATH, None, 0.1))
    rnd = find_math_params_official(model, tok, MATH, [GENERAL], top_k=0.1, method="random", seed=3)
    assert rnd.counts() == masks[1].counts() and any(not torch.equal(rnd[n], masks[1][n]) for n in rnd)


def test_ties_go_to_the_lower_flat_index():
    """bf16 sums tie often; with one text per set, every product of a row is a tie candidate."""
    model, tok = build("llama", dtype=torch.bfloat16, hidden_size=64)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.copy_(torch.sign(p) * 0.25)  # |W| constant: the sums tie along each row
    mask = find_math_params_official(model, tok, ["Question: 1 + 2?"], None, top_k=0.1, method="wanda")
    assert_same(mask, ref_mask(model, tok, ["Question: 1 + 2?"], None, 0.1))


def test_skipped_tensors_are_the_scripts():
    tied, _ = build("gemma2", dtype=torch.bfloat16)
    assert "lm_head.weight" not in official_targets(tied)
    untied, _ = build("llama", dtype=torch.bfloat16)
    assert "lm_head.weight" in official_targets(untied)
    moe, _ = build("mixtral", dtype=torch.bfloat16)
    assert not any("experts" in n for n in official_targets(moe))  # fused experts are not nn.Linear
    with pytest.raises(InputError, match="no nn.Linear weight"):
        official_targets(build("gpt2")[0])  # Conv1D only (its lm_head is tied)


def test_a_linear_named_embed_is_never_selected():
    model, tok = build("llama", dtype=torch.bfloat16, hidden_size=64)
    model.model.embed_proj = nn.Linear(4, 4).to(torch.bfloat16)  # never called: would be refused if scored
    assert "model.embed_proj.weight" not in official_targets(model)
    mask = find_math_params_official(model, tok, MATH[:3], [GENERAL[:3]], top_k=TOP_K)
    assert "model.embed_proj.weight" not in mask


def test_a_module_that_does_not_run_is_refused():
    model, tok = build("llama", dtype=torch.bfloat16, hidden_size=64)
    model.model.extra = nn.Linear(4, 4).to(torch.bfloat16)  # a Linear the forward never calls
    with pytest.raises(InputError, match="model.extra.weight: its module did not run"):
        find_math_params_official(model, tok, MATH[:2], [GENERAL[:2]], top_k=TOP_K)


def test_bad_arguments():
    model, tok = build("llama", dtype=torch.bfloat16)
    with pytest.raises(InputError, match="needs general_texts"):
        find_math_params_official(model, tok, MATH, None, top_k=TOP_K)
    with pytest.raises(InputError, match="a list of sets"):
        find_math_params_official(model, tok, MATH, GENERAL, top_k=TOP_K)
    with pytest.raises(InputError, match="top_k"):
        find_math_params_official(model, tok, MATH, [GENERAL], top_k=5)
    with pytest.raises(InputError, match="math_texts"):
        find_math_params_official(model, tok, [], [GENERAL], top_k=TOP_K)
