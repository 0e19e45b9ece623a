"""GGUF export of DeepSeek-V3: MLA's kv_b_proj split per head as llama.cpp's deepseek2 runs it absorbed.

transformers stores each layer's ``kv_b_proj`` as ``[heads * (nope + v), kv_lora]`` (per head: the ``nope`` key
rows, then the ``v`` value rows). llama.cpp wants ``attn_k_b`` ``[heads, kv_lora, nope]`` (the key rows,
transposed) and ``attn_v_b`` ``[heads, v, kv_lora]`` (numpy order), the router's selection bias as
``exp_probs_b.bias``, MLA as one KV head of ``kv_lora + rope`` keys, and the router's keys (sigmoid, groups,
normalization, routed scaling). Checked here against an independent reading (safetensors + numpy reshaping), by
the audit, and by llama.cpp itself on weights large enough that attention, routing (groups, selection bias) and
the experts all show in the logits; the configs llama.cpp would run differently are refused from config.json
alone, and the refusals that are cheap to show are shown to be needed (bypassed, llama.cpp's logits leave the
tolerance).
"""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch

gguf = pytest.importorskip("gguf")

from safetensors.numpy import load_file, save_file  # noqa: E402

from mathneuro_edit.weights import gguf_arch  # noqa: E402
from mathneuro_edit.weights.gguf_arch import gguf_refusal  # noqa: E402
from mathneuro_edit.weights.gguf_tensors import gguf_plan  # noqa: E402
from mathneuro_edit.weights.gguf_writer import audit_gguf, write_gguf  # noqa: E402
from tests._family_shapes import family_shape  # noqa: E402
from tests._llama_cpp import family_base, gguf_tensors  # noqa: E402
from tests.weights.test_gguf import _llama  # noqa: E402

HEADS, NOPE, ROPE, V, KV_LORA, LAYERS = 4, 8, 8, 16, 16, 2
PROMPTS = ("Question: Tom has 3 apples and buys 4 more.", "The quiet river")
YARN = {
    "rope_type": "yarn",
    "rope_theta": 10000.0,
    "factor": 4.0,
    "original_max_position_embeddings": 64,
    "mscale": 1.0,
    "mscale_all_dim": 1.0,
    "beta_fast": 32.0,
    "beta_slow": 1.0,
}  # the released V3's kind


def _base(tmp_path: Path, *, strong: bool = False, **overrides) -> Path:
    """The family's tiny base; ``strong``: matrices scaled up (logits of a few units), norms and the selection
    bias random (ones and zeros at init), the router 5x (large enough that groups and bias change the experts
    picked, small enough that the sigmoid does not saturate into ties)."""
    rng = np.random.default_rng(0)

    def reweigh(k, v):
        if k.endswith("e_score_correction_bias"):
            return rng.normal(0, 0.3, v.shape)
        if k.endswith("norm.weight"):
            return 1 + rng.normal(0, 0.2, v.shape)
        if k.endswith("mlp.gate.weight"):
            return v * 5
        return v * 8 if v.ndim == 2 else None

    return family_base(tmp_path / "base", "DeepSeek-V3", reweigh if strong else None, **overrides)


@pytest.mark.parametrize("qtype", ["F32", "Q8_0"])
def test_kv_b_is_split_per_head_as_numpy_computes_it(qtype, tmp_path) -> None:
    base = _base(tmp_path, strong=True)
    path = write_gguf(base, tmp_path / "m.gguf", qtype)
    ckpt, got = load_file(str(base / "model.safetensors")), gguf_tensors(path)
    for b in range(LAYERS):
        kv_b = ckpt[f"model.layers.{b}.self_attn.kv_b_proj.weight"]
        assert kv_b.shape == (HEADS * (NOPE + V), KV_LORA)
        per_head = kv_b.reshape(HEADS, NOPE + V, KV_LORA)
        for name, want in (
            (f"blk.{b}.attn_k_b.weight", np.transpose(per_head[:, :NOPE], (0, 2, 1))),
            (f"blk.{b}.attn_v_b.weight", per_head[:, NOPE:]),
        ):
            t = got[name]
            assert [int(s) for s in t.shape] == list(reversed(want.shape)), name
            # rows of 8 (k_b) are no Q8_0 block (32): F16, as the writer falls back; v_b's rows of 16 too
            assert t.tensor_type.name == ("F32" if qtype == "F32" else "F16"), (name, t.tensor_type.name)
            stored = np.asarray(t.data).reshape(want.shape)
            np.testing.assert_array_equal(stored, want.astype(stored.dtype))
    for name, hf in (
        ("blk.1.exp_probs_b.bias", "model.layers.1.mlp.gate.e_score_correction_bias"),
        ("blk.1.ffn_gate_inp.weight", "model.layers.1.mlp.gate.weight"),
    ):
        assert got[name].tensor_type.name == "F32", name  # selection bias and router: F32 in every file type
        np.testing.assert_array_equal(np.asarray(got[name].data).reshape(ckpt[hf].shape), ckpt[hf])
    assert {
        "blk.0.ffn_gate.weight",
        "blk.1.ffn_gate_exps.weight",
        "blk.1.ffn_up_shexp.weight",
        "blk.0.attn_q_a.weight",
        "blk.0.attn_q_a_norm.weight",
        "blk.0.attn_q_b.weight",
        "blk.0.attn_kv_a_mqa.weight",
        "blk.0.attn_kv_a_norm.weight",
    } <= set(got)
    assert "blk.0.ffn_gate_exps.weight" not in got and "blk.1.ffn_gate.weight" not in got  # layer 0 dense
    assert not any("kv_b" in n for n in got)
    assert audit_gguf(path, base) == (len(got), [])


def test_the_keys_llama_cpp_reads_for_deepseek2(tmp_path) -> None:
    fields = gguf.GGUFReader(str(write_gguf(_base(tmp_path), tmp_path / "m.gguf", "F32"))).fields

    def value(key: str):
        return fields[f"deepseek2.{key}"].contents()

    assert fields["general.architecture"].contents() == "deepseek2"
    assert (value("attention.head_count"), value("attention.head_count_kv")) == (HEADS, 1)  # MLA as MQA
    assert (value("attention.key_length"), value("attention.value_length")) == (KV_LORA + ROPE, KV_LORA)
    assert (value("attention.key_length_mla"), value("attention.value_length_mla")) == (NOPE + ROPE, V)
    assert (value("attention.q_lora_rank"), value("attention.kv_lora_rank")) == (32, KV_LORA)
    assert value("rope.dimension_count") == ROPE and value("leading_dense_block_count") == 1
    assert (value("feed_forward_length"), value("expert_feed_forward_length")) == (128, 32)
    assert (value("expert_count"), value("expert_used_count"), value("expert_shared_count")) == (4, 2, 1)
    assert value("expert_weights_scale") == 2.5 and value("expert_weights_norm") is True
    assert value("expert_gating_func") == int(gguf.ExpertGatingFuncType.SIGMOID)
    assert (value("expert_group_count"), value("expert_group_used_count")) == (2, 1)
    assert "deepseek2.rope.scaling.yarn_log_multiplier" not in fields


def test_no_group_keys_when_every_group_is_kept(tmp_path) -> None:
    """topk_group == n_group selects every group, as no grouping; llama.cpp asserts used < groups, so no keys."""
    fields = gguf.GGUFReader(str(write_gguf(_base(tmp_path, topk_group=2), tmp_path / "m.gguf", "F32"))).fields
    assert "deepseek2.expert_group_count" not in fields and "deepseek2.expert_group_used_count" not in fields


def test_yarn_writes_mscale_all_dim_as_llama_cpp_s_converter_does(tmp_path) -> None:
    fields = gguf.GGUFReader(str(write_gguf(_base(tmp_path, rope_parameters=YARN), tmp_path / "m.gguf", "F32"))).fields
    assert fields["deepseek2.rope.scaling.yarn_log_multiplier"].contents() == pytest.approx(0.1)
    assert fields["deepseek2.rope.scaling.type"].contents() == "yarn"
    assert fields["deepseek2.rope.scaling.factor"].contents() == 4.0


def test_the_audit_catches_a_corrupted_kv_b_entry_in_the_half_it_belongs_to(tmp_path) -> None:
    base = _base(tmp_path, strong=True)
    path = write_gguf(base, tmp_path / "m.gguf", "F16")
    weights = load_file(str(base / "model.safetensors"))
    weights["model.layers.1.self_attn.kv_b_proj.weight"][2 * (NOPE + V) + NOPE + 3, 5] += 1.0  # head 2, value row 3
    save_file(weights, str(base / "model.safetensors"), metadata={"format": "pt"})
    checked, bad = audit_gguf(path, base)
    assert bad == ["blk.1.attn_v_b.weight: not the F16 encoding of the checkpoint's tensor"], bad
    assert checked == len(gguf_plan(base, "F16"))


@pytest.mark.parametrize(
    "overrides,why",
    [
        ({"hidden_act": "gelu"}, "hidden_act 'gelu': llama.cpp's DEEPSEEK2 hard-codes silu in every MLP and expert"),
        ({"attention_bias": True}, "attention_bias is set but llama.cpp's DEEPSEEK2 has no attention biases"),
        (
            {"rope_interleave": False},
            "rope_interleave is false (rotate-half rotary) but llama.cpp's DEEPSEEK2 rotates "
            "interleaved pairs (the released weights' order)",
        ),
        (
            {"q_lora_rank": None},
            "q_lora_rank is null (a full q_proj): only the low-rank q (q_a/q_b) is written for DEEPSEEK2",
        ),
        (
            {"num_hidden_layers": 27},
            "27 layers (vocab 703): llama.cpp's DEEPSEEK2 takes a 26/27-layer model (48 with "
            "vocab 128256) for a Lite one without q_lora_rank and would not load its q_a/q_b",
        ),
        (
            {"rope_parameters": {"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0}},
            "rope 'linear': only default and YaRN rope are written for deepseek_v3 (verified against llama.cpp)",
        ),
        (
            {"rope_parameters": {**YARN, "mscale": 0.707}},
            "its YaRN has mscale 0.707 and mscale_all_dim 1.0 (attention_factor None) but llama.cpp's DEEPSEEK2 assumes "
            "mscale == mscale_all_dim (released: 1.0 and 1.0) and no attention_factor",
        ),
        (
            {"rope_parameters": {k: v for k, v in YARN.items() if not k.startswith("mscale")}},
            "its YaRN has mscale None and mscale_all_dim None (attention_factor None) but llama.cpp's DEEPSEEK2 assumes "
            "mscale == mscale_all_dim (released: 1.0 and 1.0) and no attention_factor",
        ),
        (
            {"rope_parameters": {**YARN, "attention_factor": 2.0}},
            "its YaRN has mscale 1.0 and mscale_all_dim 1.0 (attention_factor 2.0) but llama.cpp's DEEPSEEK2 assumes "
            "mscale == mscale_all_dim (released: 1.0 and 1.0) and no attention_factor",
        ),
    ],
)
def test_configs_llama_cpp_runs_differently_are_refused_in_one_exact_line(overrides, why) -> None:
    cfg = family_shape("DeepSeek-V3").config().to_dict()
    assert gguf_refusal(cfg) is None and gguf_refusal({**cfg, "rope_parameters": YARN}) is None
    assert gguf_refusal({**cfg, **overrides}) == (
        f"outputs.gguf: this deepseek_v3 config cannot be run by llama.cpp as transformers runs it: {why}; "
        "set outputs.gguf: null (the checkpoint holds the edit)"
    )


def _need_llama_cpp(tmp_path: Path) -> None:
    if importlib.util.find_spec("llama_cpp") is None:
        _llama(tmp_path / "none.gguf")  # skips, or fails where MATHNEURO_EDIT_REQUIRE_LLAMA_CPP=1 (CI)


def _gaps(tmp_path: Path, base: Path, *, greedy: bool = False) -> list[float]:
    """llama.cpp's largest logit difference to transformers' per prompt, relative as the families test holds it
    (and, with ``greedy``, their 8-token greedy continuations asserted equal)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tests.runs.test_families import _cpp_greedy, _greedy

    llm = _llama(write_gguf(base, tmp_path / "m.gguf", "F32"))
    tok, ref = AutoTokenizer.from_pretrained(base), AutoModelForCausalLM.from_pretrained(base).eval()
    gaps = []
    for prompt in PROMPTS:
        ids = tok(prompt).input_ids
        llm.reset()
        llm.eval(ids)
        cpp = torch.tensor(np.array(llm.scores[: len(ids)]))
        with torch.no_grad():
            hf = ref(torch.tensor([ids])).logits[0]
        gaps.append(float((cpp - hf).abs().max()) / max(1.0, float(hf.abs().max())))
        if greedy:
            assert _cpp_greedy(llm, ids, 8) == _greedy(ref, ids, 8), prompt
    return gaps


@pytest.mark.parametrize(
    "overrides",
    [{}, {"rope_parameters": YARN}, {"norm_topk_prob": False, "routed_scaling_factor": 1.0}, {"topk_group": 2}],
    ids=["released", "yarn", "no-renormalization-no-scaling", "every-group-kept"],
)
def test_llama_cpp_matches_transformers_where_mla_routing_and_experts_matter(overrides, tmp_path) -> None:
    """The families test's base has tiny logits (transformers' init); here attention, the grouped biased routing
    and the experts all move them by units, and llama.cpp still computes transformers' logits and continuation
    (also with YaRN, with the router's keys at their other values, and with every group kept: no group keys)."""
    _need_llama_cpp(tmp_path)
    base = _base(tmp_path, strong=True, **overrides)
    assert max(_gaps(tmp_path, base, greedy=True)) < 1e-3


def test_the_group_keys_are_needed_llama_cpp_would_route_elsewhere(tmp_path, monkeypatch) -> None:
    """Without the expert-group keys llama.cpp picks the top experts over all groups: its logits leave the
    tolerance, so the strong base's routing really depends on the groups (the match above is not luck)."""
    _need_llama_cpp(tmp_path)
    base = _base(tmp_path, strong=True)
    monkeypatch.setattr(gguf.GGUFWriter, "add_expert_group_count", lambda self, n: None)
    monkeypatch.setattr(gguf.GGUFWriter, "add_expert_group_used_count", lambda self, n: None)
    assert max(_gaps(tmp_path, base)) > 1e-3


@pytest.mark.parametrize(
    "overrides",
    [
        {"rope_interleave": False},
        {"hidden_act": "gelu"},
        {"rope_parameters": {**YARN, "mscale": 0.707}},
        {"rope_parameters": {k: v for k, v in YARN.items() if not k.startswith("mscale")}},
    ],
    ids=["rotate-half", "gelu", "yarn-mscale", "yarn-no-mscale"],
)
def test_each_refusal_is_needed_llama_cpp_would_differ(overrides, tmp_path, monkeypatch) -> None:
    """With the refusal bypassed, llama.cpp's logits leave the tolerance the families test holds the written
    families to: the refused configs really run differently there."""
    _need_llama_cpp(tmp_path)
    base = _base(tmp_path, strong=True, **overrides)
    family = gguf_arch.FAMILIES["deepseek_v3"]
    monkeypatch.setitem(gguf_arch.FAMILIES, "deepseek_v3", dataclasses.replace(family, refusal_reason=lambda cfg: None))
    assert max(_gaps(tmp_path, base)) > 1e-3
