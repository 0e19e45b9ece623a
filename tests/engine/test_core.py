"""Core engine against an independent, deliberately simple batch-size-1 implementation of MathNeuro.

The reference here shares no code with the package: its own hooks (one sample at a time, no padding), its own
expert routing replay, and a full stable sort for the top-k (the package uses kthvalue + tie ranks).
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from mathneuro_edit import (
    ActivationStats,
    InputError,
    Mask,
    apply_mask,
    calibrate,
    find_math_params,
    find_targets,
)
from mathneuro_edit.engine.apply import ReversibleEdit, scale_masked
from tests._tiny import FAMILIES, GENERAL, MATH, build, char_tokenizer


# ----------------------------------------------------------------------------------------------------------
# the reference (batch size 1, per-sample norms, sort-based top-k)
# ----------------------------------------------------------------------------------------------------------
def reference_stats(model: nn.Module, tokenizer, texts: list[str]) -> dict[str, torch.Tensor]:
    """name -> (groups, d_in): sum over samples of the per-sample L2 norm of each input feature."""
    from transformers.pytorch_utils import Conv1D

    out: dict[str, torch.Tensor] = {}
    handles = []

    def add(name, group, groups, x):  # x: (tokens, d_in) of ONE sample
        norm = x.double().pow(2).sum(0).sqrt()
        acc = out.setdefault(name, torch.zeros(groups, x.shape[-1], dtype=torch.float64))
        acc[group] += norm

    tied = model.get_output_embeddings() is not None and (
        model.get_output_embeddings().weight is model.get_input_embeddings().weight
    )
    for mod_name, module in model.named_modules():
        if isinstance(module, (nn.Linear, Conv1D)) and not (tied and module is model.get_output_embeddings()):

            def hook(m, args, name=f"{mod_name}.weight"):
                add(name, 0, 1, args[0].reshape(-1, args[0].shape[-1]))

            handles.append(module.register_forward_pre_hook(hook))
        elif type(module).__name__.endswith("Router"):

            def hook(m, args, name=f"{mod_name}.weight"):
                add(name, 0, 1, args[0].reshape(-1, args[0].shape[-1]))

            handles.append(module.register_forward_pre_hook(hook))
        elif type(module).__name__.endswith("Experts"):

            def hook(m, args, name=mod_name):
                hidden, top_k_index = args[0], args[1]
                for e in range(m.num_experts):
                    rows = [i for i in range(hidden.shape[0]) if e in top_k_index[i].tolist()]
                    if not rows:
                        continue
                    x = hidden[rows]
                    gate, up = nn.functional.linear(x, m.gate_up_proj[e]).chunk(2, dim=-1)  # eager Mixtral math
                    add(f"{name}.gate_up_proj", e, m.num_experts, x)
                    add(f"{name}.down_proj", e, m.num_experts, m.act_fn(gate) * up)

            handles.append(module.register_forward_pre_hook(hook))
    try:
        with torch.no_grad():
            for text in texts:
                ids = torch.tensor([tokenizer(text)["input_ids"]])
                model(input_ids=ids, use_cache=False)
    finally:
        for h in handles:
            h.remove()
    return {k: v.float() for k, v in out.items()}


def reference_top(weight2d: torch.Tensor, stat: torch.Tensor, top_k: float) -> torch.Tensor:
    """Top-k of |W| * stat over the whole matrix, ties to the lower flat index, by a full stable sort."""
    scores = (weight2d.abs().float() * stat.float()[None, :]).flatten()
    k = int(scores.numel() * top_k)  # the released code's keep_num = int(num_params * keep_ratio)
    order = torch.sort(-scores, stable=True).indices[:k]  # k = 0: nothing
    sel = torch.zeros(scores.numel(), dtype=torch.bool)
    sel[order] = True
    return sel.reshape(weight2d.shape)


def reference_mask(model, math_ref, gen_ref, top_k) -> dict[str, torch.Tensor]:
    params = dict(model.named_parameters())
    result = {}
    for name, stat in math_ref.items():
        w = params[name].detach()
        if w.dim() == 2:
            is_conv1d = type(model.get_submodule(name.rsplit(".", 1)[0])).__name__ == "Conv1D"
            mats = [w.t()] if is_conv1d else [w]
        else:
            mats = list(w)  # (E, d_out, d_in)
        sels = [
            reference_top(m, stat[g], top_k) & ~reference_top(m, gen_ref[name][g], top_k) for g, m in enumerate(mats)
        ]
        if w.dim() == 2:
            result[name] = sels[0].t() if is_conv1d else sels[0]
        else:
            result[name] = torch.stack(sels)
    return result


def jaccard(a: Mask | dict, b: Mask | dict) -> float:
    inter = sum(int((a[n] & b[n]).sum()) for n in b)
    union = sum(int((a[n] | b[n]).sum()) for n in b)
    return inter / union if union else 1.0


# ----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("family", FAMILIES)
def test_statistics_and_masks_match_reference(family):
    model, tok = build(family)
    math_ref = reference_stats(model, tok, MATH)
    gen_ref = reference_stats(model, tok, GENERAL)
    ref_mask = reference_mask(model, math_ref, gen_ref, top_k=0.1)
    for bs in (1, 8):
        ms = calibrate(model, tok, MATH, batch_size=bs, progress=False)
        gs = calibrate(model, tok, GENERAL, batch_size=bs, progress=False)
        assert set(ms.norm_sum) == set(math_ref), f"{family}: targets differ from the reference"
        for name, ref in math_ref.items():
            torch.testing.assert_close(ms.norm_sum[name], ref, rtol=1e-5, atol=1e-6, msg=f"{family} bs={bs} {name}")
            torch.testing.assert_close(gs.norm_sum[name], gen_ref[name], rtol=1e-5, atol=1e-6)
        mask = find_math_params(model, ms, gs, top_k=0.1)
        assert jaccard(mask, ref_mask) == 1.0
        for name in ref_mask:
            assert torch.equal(mask[name], ref_mask[name]), f"{family} bs={bs}: mask differs at {name}"


def test_wanda_statistic_is_sum_of_squares_over_tokens():
    model, tok = build("llama")
    stats = calibrate(model, tok, MATH, batch_size=3, progress=False)
    captured = []
    h = model.model.layers[0].mlp.down_proj.register_forward_pre_hook(lambda m, a: captured.append(a[0][0]))
    with torch.no_grad():
        for t in MATH:
            model(input_ids=torch.tensor([tok(t)["input_ids"]]), use_cache=False)
    h.remove()
    expect = sum(x.double().pow(2).sum(0) for x in captured).float()
    torch.testing.assert_close(stats.sq_sum["model.layers.0.mlp.down_proj.weight"][0], expect, rtol=1e-5, atol=1e-6)
    n_tokens = sum(len(tok(t)["input_ids"]) for t in MATH)
    assert stats.meta["num_tokens"] == n_tokens
    assert int(stats.token_count["model.layers.0.mlp.down_proj.weight"][0]) == n_tokens


def test_moe_token_counts_follow_routing():
    model, tok = build("mixtral")
    stats = calibrate(model, tok, MATH, batch_size=4, progress=False)
    n_tokens = stats.meta["num_tokens"]
    counts = stats.token_count["model.layers.0.mlp.experts.gate_up_proj"]
    assert counts.shape == (model.config.num_local_experts,)
    assert int(counts.sum()) == n_tokens * model.config.num_experts_per_tok  # every real token, top-k experts


def test_targets_policy_tied_lm_head_and_filters():
    gemma, _ = build("gemma2")
    assert gemma.config.tie_word_embeddings
    names = find_targets(gemma)
    assert "lm_head.weight" not in names and not any("embed" in n for n in names)
    assert "lm_head.weight" in find_targets(gemma, include_tied_lm_head=True)
    llama, _ = build("llama")  # untied
    assert "lm_head.weight" in find_targets(llama)
    only_q = find_targets(llama, include=[r"q_proj"])
    assert list(only_q) == [f"model.layers.{i}.self_attn.q_proj.weight" for i in range(2)]
    no_mlp = find_targets(llama, exclude=[r"\.mlp\."])
    assert no_mlp and not any(".mlp." in n for n in no_mlp)
    with pytest.raises(InputError, match="not a valid regular expression"):
        find_targets(llama, include=["("])
    gpt2, _ = build("gpt2")
    kinds = {t.kind for t in find_targets(gpt2).values()}
    assert kinds == {"conv1d"}  # GPT-2's lm_head is tied, its blocks are Conv1D


def test_unhandled_parameter_is_an_error_naming_it():
    class Odd(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(4, 4)
            self.mystery = nn.Parameter(torch.zeros(3, 4))

    with pytest.raises(InputError, match="mystery"):
        find_targets(Odd())
    assert list(find_targets(Odd(), exclude=["mystery"])) == ["proj.weight"]


def test_round_trips_and_determinism(tmp_path):
    model, tok = build("qwen2")
    ms = calibrate(model, tok, MATH, progress=False)
    gs = calibrate(model, tok, GENERAL, progress=False)
    ms.save(tmp_path / "m.stats.safetensors")
    back = ActivationStats.load(tmp_path / "m.stats.safetensors")
    assert back.meta == ms.meta and back.targets == ms.targets and back.sha256 == ms.sha256
    for n in ms.norm_sum:
        assert torch.equal(back.norm_sum[n], ms.norm_sum[n]) and torch.equal(back.sq_sum[n], ms.sq_sum[n])
    mask = find_math_params(model, ms, gs, top_k=0.05)
    again = find_math_params(model, back, ActivationStats.load(gs.save(tmp_path / "g.stats.safetensors")), top_k=0.05)
    assert again.sha256 == mask.sha256
    mask.save(tmp_path / "mask.safetensors")
    loaded = Mask.load(tmp_path / "mask.safetensors")
    assert list(loaded) == list(mask) and loaded.meta == mask.meta and loaded.sha256 == mask.sha256
    for n in mask:
        assert torch.equal(loaded[n], mask[n])
    # a second calibration of the same texts is identical bit for bit
    assert calibrate(model, tok, MATH, progress=False).sha256 == ms.sha256
    # provenance
    assert ms.meta["num_samples"] == len(MATH) and len(ms.meta["texts_sha256"]) == 64
    assert mask.meta["math_stats_sha256"] == ms.sha256 and mask.meta["general_stats_sha256"] == [gs.sha256]


def test_mask_compact_encoding_is_smaller_than_bool(tmp_path):
    dense = torch.rand(64, 64) < 0.6
    sparse = torch.zeros(64, 64, dtype=torch.bool)
    sparse[3, 5] = sparse[60, 1] = True
    m = Mask({"dense": dense, "sparse": sparse})
    path = m.save(tmp_path / "m.safetensors")
    assert path.stat().st_size < 64 * 64 // 8 * 2 + 1024  # bits for the dense, 2 indices for the sparse
    back = Mask.load(path)
    assert torch.equal(back["dense"], dense) and torch.equal(back["sparse"], sparse)


def test_methods_and_granularity():
    model, tok = build("llama")
    ms = calibrate(model, tok, MATH, progress=False)
    gs = calibrate(model, tok, GENERAL, progress=False)
    gs2 = calibrate(model, tok, ["the cat sat on the mat", "a bird sings"], progress=False)
    mn = find_math_params(model, ms, gs, top_k=0.1)
    wanda = find_math_params(model, ms, None, top_k=0.1, method="wanda")
    rnd = find_math_params(model, ms, gs, top_k=0.1, method="random", seed=1)
    rnd_again = find_math_params(model, ms, gs, top_k=0.1, method="random", seed=1)
    rnd_other = find_math_params(model, ms, gs, top_k=0.1, method="random", seed=2)
    both = find_math_params(model, ms, [gs, gs2], top_k=0.1)
    for n in mn:
        numel = mn[n].numel()
        assert int(wanda[n].sum()) == int(numel * 0.1)
        assert bool((mn[n] <= wanda[n]).all())  # mathneuro is a subset of the math top-k
        assert int(rnd[n].sum()) == int(mn[n].sum())  # random: same count per matrix
        assert bool((both[n] <= mn[n]).all())  # a second general set only removes more
    assert rnd.sha256 == rnd_again.sha256 and rnd.sha256 != rnd_other.sha256
    row = find_math_params(model, ms, None, top_k=0.25, method="wanda", granularity="row")
    for n in row:
        per_row = row[n].sum(dim=1)
        assert bool((per_row == int(row[n].shape[1] * 0.25)).all())  # the released rule applied to each row


def test_ties_break_to_lower_index():
    from mathneuro_edit.engine.topk import top_fraction

    scores = torch.tensor([[5.0, 1.0, 2.0, 2.0, 2.0, 0.0]])
    assert top_fraction(scores, 3).tolist() == [[True, False, True, True, False, False]]
    assert top_fraction(torch.ones(2, 4), 2).tolist() == [[True, True, False, False]] * 2


def test_apply_mask_matches_formula_and_prunes_exactly():
    model, tok = build("llama", dtype=torch.bfloat16)
    ms = calibrate(model, tok, MATH, progress=False)
    gs = calibrate(model, tok, GENERAL, progress=False)
    mask = find_math_params(model, ms, gs, top_k=0.1)
    for scale in (1.1, 0.0):
        edited = copy.deepcopy(model)
        apply_mask(edited, mask, scale)
        base_params = dict(model.named_parameters())
        for name, p in edited.named_parameters():
            w = base_params[name].detach()
            if name not in mask:
                assert torch.equal(p, w)
                continue
            m = mask[name]
            expect = torch.where(m, (w.float() * scale).to(torch.bfloat16), w)
            assert torch.equal(p.detach(), expect)
            assert torch.equal(p.detach(), scale_masked(w, m, scale))
            if scale == 0:
                assert not torch.signbit(p.detach()[m]).any()  # +0.0, never -0.0
    # ReversibleEdit switches on and off exactly
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    with ReversibleEdit(model, mask, 0.0):
        assert all(int((p.detach()[mask[n]] != 0).sum()) == 0 for n, p in model.named_parameters() if n in mask)
    assert all(torch.equal(p.detach(), before[n]) for n, p in model.named_parameters())


# ----------------------------------------------------------------------------------------------------------
# bad input
# ----------------------------------------------------------------------------------------------------------
def test_bad_inputs_raise_clear_errors(tmp_path):
    model, tok = build("llama")
    with pytest.raises(InputError, match="empty"):
        calibrate(model, tok, [], progress=False)
    with pytest.raises(InputError, match="list of strings"):
        calibrate(model, tok, "just one string", progress=False)
    ms = calibrate(model, tok, MATH, progress=False)
    gs = calibrate(model, tok, GENERAL, progress=False)
    for bad in (0, 1.5, -0.1, float("nan")):
        with pytest.raises(InputError, match="top_k"):
            find_math_params(model, ms, gs, top_k=bad)
    other, _ = build("llama", hidden_size=48)
    with pytest.raises(InputError, match=r"model\.layers\.0\.self_attn\.q_proj\.weight.*another model"):
        find_math_params(other, ms, gs, top_k=0.1)
    mask = find_math_params(model, ms, gs, top_k=0.1)
    with pytest.raises(InputError, match="another model"):
        apply_mask(other, mask, 1.1)
    for bad_scale in (float("nan"), float("inf"), -1.0):
        with pytest.raises(InputError, match="scale"):
            apply_mask(model, mask, bad_scale)
    (tmp_path / "junk.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(InputError, match="corrupt"):
        Mask.load(tmp_path / "junk.safetensors")
    with pytest.raises(InputError, match="no such"):
        ActivationStats.load(tmp_path / "missing.safetensors")
    with pytest.raises(InputError, match="not a mathneuro-edit statistics file"):
        ActivationStats.load(mask.save(tmp_path / "mask.safetensors"))


def test_tokenizer_without_pad_token_is_not_modified():
    model, tok = build("llama")
    assert tok.pad_token is None
    side = tok.padding_side
    calibrate(model, tok, MATH, batch_size=8, progress=False)
    assert tok.pad_token is None and tok.padding_side == side


def test_hooks_removed_on_error_and_mode_restored():
    model, tok = build("llama")
    model.train()

    def boom(*a, **k):
        raise RuntimeError("injected")

    h = model.model.layers[1].register_forward_pre_hook(boom)
    with pytest.raises(RuntimeError, match="injected"):
        calibrate(model, tok, MATH, progress=False)
    h.remove()
    assert all(not m._forward_pre_hooks for m in model.modules())
    assert model.training


def test_truncation_is_recorded():
    model, tok = build("llama")
    stats = calibrate(model, tok, MATH, max_length=8, progress=False)
    assert stats.meta["truncated_samples"] == sum(len(tok(t)["input_ids"]) > 8 for t in MATH)
    assert stats.meta["num_tokens"] == sum(min(8, len(tok(t)["input_ids"])) for t in MATH)


def test_radix_select_equals_kthvalue_select_with_many_ties():
    from mathneuro_edit.engine.topk import top_fraction, top_fraction_flat

    gen = torch.Generator().manual_seed(0)
    for trial in range(100):
        n = int(torch.randint(1, 2000, (1,), generator=gen))
        x = torch.rand(n, generator=gen)
        if trial % 2:  # heavy ties: few distinct values
            x = (x * int(torch.randint(1, 20, (1,), generator=gen))).floor() * 0.37
        ks = sorted({int(v) for v in torch.randint(1, n + 1, (3,), generator=gen)} | {n})
        for k, got in zip(ks, top_fraction_flat(x, ks)):
            assert torch.equal(got, top_fraction(x[None], k)[0]), (trial, n, k)
            assert int(got.sum()) == k


def test_multi_top_k_equals_single_calls():
    model, tok = build("gpt2")
    ms = calibrate(model, tok, MATH, progress=False)
    gs = calibrate(model, tok, GENERAL, progress=False)
    ks = [0.01, 0.05, 0.2]
    for method in ("mathneuro", "random"):
        multi = find_math_params(model, ms, gs, top_k=ks, method=method)
        assert len(multi) == len(ks)
        for k, m in zip(ks, multi):
            single = find_math_params(model, ms, gs, top_k=k, method=method)
            assert m.sha256 == single.sha256 and m.meta == single.meta
            # and against the independent reference (sort-based top-k), not only the code against itself
            ref = reference_mask(model, ms.norm_sum, gs.norm_sum, top_k=k)
            for name in ref:
                if method == "mathneuro":
                    assert torch.equal(m[name], ref[name]), (k, name)
                else:  # random: the reference count per matrix
                    assert int(m[name].sum()) == int(ref[name].sum()), (k, name)


def test_public_api_names_are_the_functions_after_any_import():
    import importlib
    import pkgutil

    import mathneuro_edit

    for found in pkgutil.walk_packages(mathneuro_edit.__path__, "mathneuro_edit."):  # every module, then the names
        if not found.name.endswith("__main__"):
            importlib.import_module(found.name)
    from mathneuro_edit import calibrate, evaluate, verify

    assert callable(calibrate) and callable(evaluate) and callable(verify)
    from pathlib import Path

    import tomllib

    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    assert mathneuro_edit.__version__ == pyproject["project"]["version"]
    for name in mathneuro_edit.__all__:
        if name == "__version__":
            continue
        obj = getattr(mathneuro_edit, name)
        # the defined function/class, never a submodule that an import bound to the same name
        assert not isinstance(obj, type(importlib)) and callable(obj), name
        assert obj.__name__ == name and obj.__module__.startswith("mathneuro_edit."), (name, obj)


# ----------------------------------------------------------------------------------------------------------
# the released code's top-K count, and a calibration forward that stops after the last scored input
# ----------------------------------------------------------------------------------------------------------
def _synthetic(shapes: dict[str, tuple[int, int]], seed: int = 0):
    """Random weights and positive statistics for plain (d_out, d_in) matrices, as a mapping + ActivationStats."""
    from mathneuro_edit.engine.targets import Target

    g = torch.Generator().manual_seed(seed)
    weights = {n: torch.randn(s, generator=g) for n, s in shapes.items()}
    targets = {n: Target(n, "linear", n.removesuffix(".weight"), s) for n, s in shapes.items()}

    def stats():
        norm = {n: torch.rand(1, s[1], generator=g) + 0.1 for n, s in shapes.items()}
        return ActivationStats(
            norm,
            {n: v.square() for n, v in norm.items()},
            {n: torch.ones(1, dtype=torch.int64) for n in shapes},
            dict(targets),
            {},
        )

    return weights, stats(), stats()


def test_top_k_count_is_the_released_int_of_n_times_top_k():
    # (d_out, d_in, top_k) where int(n * top_k) differs from the old max(1, floor(top_k * n + 0.5)):
    # 30 * 0.05 = 1.5 -> 1 (was 2); 19 * 0.05 = 0.95 -> 0 (was 1); 100 * 0.29 = 28.999999999999996 -> 28 (was 29);
    # 21 * 0.5 = 10.5 -> 10 (was 11); and the whole matrix at top_k = 1
    cases = {
        "a.weight": ((5, 6), 0.05),
        "b.weight": ((19, 1), 0.05),
        "c.weight": ((10, 10), 0.29),
        "d.weight": ((7, 3), 0.5),
        "e.weight": ((4, 8), 1.0),
    }
    expected = {"a.weight": 1, "b.weight": 0, "c.weight": 28, "d.weight": 10, "e.weight": 32}
    for name, ((d_out, d_in), top_k) in cases.items():
        weights, ms, _ = _synthetic({name: (d_out, d_in)})
        wanda = find_math_params(weights, ms, None, top_k=top_k, method="wanda")
        assert int(wanda[name].sum()) == expected[name] == int(d_out * d_in * top_k), name
        assert torch.equal(wanda[name], reference_top(weights[name], ms.norm_sum[name][0], top_k)), name
        row = find_math_params(weights, ms, None, top_k=top_k, method="wanda", granularity="row")
        assert row[name].sum(dim=1).tolist() == [int(d_in * top_k)] * d_out, name  # the same rule per row


def test_zero_count_matrices_select_nothing_in_every_method_and_sweep():
    from mathneuro_edit.engine.topk import top_fraction, top_fraction_flat

    shapes = {"small.weight": (3, 5), "big.weight": (16, 40)}  # 15 * 0.05 = 0.75 -> 0; 640 * 0.05 = 32
    weights, ms, gs = _synthetic(shapes)
    for method in ("mathneuro", "wanda", "random"):
        mask = find_math_params(weights, ms, gs, top_k=0.05, method=method)
        assert int(mask["small.weight"].sum()) == 0, method
        assert 0 < int(mask["big.weight"].sum()) <= 32, method
    ks = [0.05, 0.2, 0.5]  # the small matrix: 0, 3, 7 entries
    for k, multi in zip(ks, find_math_params(weights, ms, gs, top_k=ks, method="wanda"), strict=True):
        single = find_math_params(weights, ms, gs, top_k=k, method="wanda")
        assert multi.sha256 == single.sha256 and int(multi["small.weight"].sum()) == int(15 * k)
    assert not top_fraction(torch.rand(2, 5), 0).any()
    assert [int(m.sum()) for m in top_fraction_flat(torch.rand(50), [0, 3, 0])] == [0, 3, 0]


def _count_forwards(module: nn.Module) -> list[int]:
    """Count executions of ``module.forward`` itself (pre-hooks run before it, so they do not count)."""
    calls = [0]
    inner = module.forward

    def counted(*args, **kwargs):
        calls[0] += 1
        return inner(*args, **kwargs)

    module.forward = counted
    return calls


@pytest.mark.parametrize("family", ["llama", "gemma2", "mixtral"])  # untied, tied lm_head; fused experts
def test_calibration_never_runs_the_lm_head_and_stops_after_the_last_scored_layer(family):
    model, tok = build(family)
    reference = calibrate(model, tok, MATH, batch_size=2, progress=False)  # before any counting wrapper
    head = _count_forwards(model.lm_head)
    last_layer = _count_forwards(model.model.layers[1])
    stats = calibrate(model, tok, MATH, batch_size=2, progress=False)
    assert head[0] == 0  # no logits: an untied head is scored from its input alone
    assert last_layer[0] == 5  # 10 texts, batch 2: layer 1 holds scored weights, it runs in every batch
    assert stats.sha256 == reference.sha256
    # layer 1 (and the head) unscored: the first batch stops at the head, every later batch after layer 0
    only_first = calibrate(model, tok, MATH, batch_size=2, progress=False, exclude=[r"layers\.1\.", "lm_head"])
    assert head[0] == 0 and last_layer[0] == 5 + 1
    assert set(only_first.norm_sum) == {n for n in stats.norm_sum if n.startswith("model.layers.0.")}
    for name in only_first.norm_sum:  # the same batches, the same float32 sums: bit for bit
        assert torch.equal(only_first.norm_sum[name], stats.norm_sum[name]), name
        assert torch.equal(only_first.sq_sum[name], stats.sq_sum[name]), name
    # no hook outlives the call, and the model still computes what it computed before
    assert all(not (m._forward_pre_hooks or m._forward_hooks) for m in model.modules())
    ids = torch.tensor([tok(MATH[0])["input_ids"]])
    fresh, _ = build(family)
    with torch.no_grad():
        out = model(input_ids=ids, output_hidden_states=True)
        want = fresh(input_ids=ids, output_hidden_states=True)
    assert torch.equal(out.logits, want.logits)
    assert all(torch.equal(a, b) for a, b in zip(out.hidden_states, want.hidden_states))


class _RoutedToy(nn.Module):
    """A toy causal LM whose experts run only when a token is routed to them (expert 3: the token 'Z' only)."""

    def __init__(self, vocab: int, z_id: int, d: int = 8) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList(
            nn.ModuleDict({"experts": nn.ModuleList(nn.Linear(d, d) for _ in range(4))}) for _ in range(2)
        )
        self.lm_head = nn.Linear(d, vocab)
        self.z_id = z_id

    def get_input_embeddings(self):
        return self.embed

    def get_output_embeddings(self):
        return self.lm_head

    def forward(self, input_ids, attention_mask=None, use_cache=None):
        h = self.embed(input_ids)  # (batch, tokens, d)
        route = torch.where(input_ids == self.z_id, 3, input_ids % 3)  # (batch, tokens)
        for layer in self.layers:
            for e, expert in enumerate(layer["experts"]):
                routed = (route == e).unsqueeze(-1)  # (batch, tokens, 1)
                if routed.any():  # skipped when no token of the batch is routed to it
                    h = h + routed * expert(h)
        return self.lm_head(h)


def test_stop_waits_for_experts_that_run_only_when_routed_to():
    tok = char_tokenizer()
    z_id = tok.convert_tokens_to_ids("Z")
    model = _RoutedToy(len(tok), z_id).eval()
    # longest first: batch 1 (no 'Z') never runs expert 3; batch 2 does, after the last expert batch 1 ran
    texts = ["abcdefghijkl mnop", "Zabc"]
    stats = calibrate(model, tok, texts, batch_size=1, progress=False, exclude=["lm_head"])
    ref = reference_stats(model, tok, texts)
    name = "layers.1.experts.3.weight"
    assert float(stats.norm_sum[name].sum()) > 0
    for n in stats.norm_sum:
        torch.testing.assert_close(stats.norm_sum[n], ref[n], rtol=1e-5, atol=1e-6, msg=n)
