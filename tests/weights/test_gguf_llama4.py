"""GGUF export of Llama 4 (text): the fused experts split into halves and transposed as llama.cpp's llama4 loads them.

transformers stores each MoE layer's experts fused: ``feed_forward.experts.gate_up_proj`` ``[experts, hidden,
2 * ff]`` with gate in the first ff columns and up in the others (``chunk(2, dim=-1)``), ``down_proj``
``[experts, ff, hidden]``; the router (``feed_forward.router``) and a shared expert (``shared_expert.*``) beside
them; the dense layers' MLP is ``intermediate_size_mlp`` wide. llama.cpp wants ``ffn_{gate,up,down}_exps``
``[experts, out, in]`` (numpy order), ``ffn_gate_inp`` (F32) and ``ffn_*_shexp``. Checked here against an
independent reading (safetensors + numpy slicing), by the audit, and by llama.cpp itself on weights large enough
that attention, routing and the NoPE layer all show in the logits; the configs llama.cpp would run differently
are refused from config.json alone, and the refusals that a short prompt can show are shown to be needed
(bypassed, llama.cpp's logits leave the tolerance).
"""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from safetensors.numpy import load_file, save_file  # noqa: E402

from mathneuro_edit.weights import gguf_arch  # noqa: E402
from mathneuro_edit.weights.gguf_arch import gguf_refusal  # noqa: E402
from mathneuro_edit.weights.gguf_tensors import gguf_plan  # noqa: E402
from mathneuro_edit.weights.gguf_writer import audit_gguf, write_gguf  # noqa: E402
from tests._family_shapes import family_shape  # noqa: E402
from tests._llama_cpp import (  # noqa: E402
    family_base,
    gguf_tensors,
    logit_gap,  # noqa: E402
)
from tests.weights.test_gguf import _llama  # noqa: E402

E, LAYERS, FF = 4, 4, 32
PROMPT = "Question: Tom has 3 apples and buys 4 more."
# Maverick's shape besides the family's (Scout's): experts every other layer (dense MLPs of intermediate_size_mlp
# between), two experts per token; ff (32) != hidden (64), so that an untransposed tensor has the wrong shape
MAVERICK = dict(interleave_moe_layer_step=2, intermediate_size=FF, num_experts_per_tok=2)
# Scout's released rope (llama3, factor 16, low = high frequency factor), scaled to the tiny context
LLAMA3 = {
    "rope_type": "llama3",
    "rope_theta": 500000.0,
    "factor": 16.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 1.0,
    "original_max_position_embeddings": 16,
}


def _base(tmp_path: Path, *, strong: bool = False, **overrides) -> Path:
    """The family's tiny base; ``strong``: q/k/v and the experts scaled up so that attention (the rotary, the NoPE
    layer's temperature, the chunks) and the routing decide the logits, not only the embeddings."""

    def reweigh(k, v):
        if k.endswith(("q_proj.weight", "k_proj.weight")):
            return v * 12
        return v * 4 if k.endswith(("v_proj.weight", "gate_up_proj", "down_proj", "router.weight")) else None

    return family_base(tmp_path / "base", "Llama 4 (text)", reweigh if strong else None, **overrides)


@pytest.mark.parametrize("qtype", ["F32", "Q8_0"])
def test_experts_are_split_in_halves_and_transposed_as_numpy_computes_them(qtype, tmp_path) -> None:
    base = _base(tmp_path, **MAVERICK)
    path = write_gguf(base, tmp_path / "m.gguf", qtype)
    ckpt, got = load_file(str(base / "model.safetensors")), gguf_tensors(path)
    q = gguf.GGMLQuantizationType[qtype]

    def check(name: str, want: np.ndarray) -> None:
        t = got[name]
        assert [int(s) for s in t.shape] == list(reversed(want.shape)), name
        assert t.tensor_type.name == qtype, name
        data = np.asarray(t.data)
        stored = (data if qtype == "F32" else gguf.quants.dequantize(data, q)).reshape(want.shape)
        ref = (
            want
            if qtype == "F32"
            else gguf.quants.dequantize(
                gguf.quants.quantize(np.ascontiguousarray(want).reshape(-1, want.shape[-1]), q), q
            ).reshape(want.shape)
        )
        np.testing.assert_array_equal(stored, ref)

    for b in range(LAYERS):
        pre = f"model.layers.{b}.feed_forward."
        if b % 2 == 0:  # interleave step 2: layers 1 and 3 have the experts, 0 and 2 a dense MLP
            for p in ("gate", "up", "down"):
                check(f"blk.{b}.ffn_{p}.weight", ckpt[f"{pre}{p}_proj.weight"])
            assert ckpt[pre + "gate_proj.weight"].shape == (128, 64)  # intermediate_size_mlp
            assert not any(n.startswith(f"blk.{b}.ffn_") and "exps" in n for n in got)
            continue
        gate_up, down = ckpt[pre + "experts.gate_up_proj"], ckpt[pre + "experts.down_proj"]  # (E, H, 2F), (E, F, H)
        assert gate_up.shape == (E, 64, 2 * FF) and down.shape == (E, FF, 64)
        check(f"blk.{b}.ffn_gate_exps.weight", np.transpose(gate_up[:, :, :FF], (0, 2, 1)))
        check(f"blk.{b}.ffn_up_exps.weight", np.transpose(gate_up[:, :, FF:], (0, 2, 1)))
        check(f"blk.{b}.ffn_down_exps.weight", np.transpose(down, (0, 2, 1)))
        for p in ("gate", "up", "down"):
            check(f"blk.{b}.ffn_{p}_shexp.weight", ckpt[f"{pre}shared_expert.{p}_proj.weight"])
        router = got[f"blk.{b}.ffn_gate_inp.weight"]
        assert router.tensor_type.name == "F32"  # in every file type
        np.testing.assert_array_equal(np.asarray(router.data).reshape(E, 64), ckpt[pre + "router.weight"])
    for b in range(LAYERS):  # q/k as stored: transformers' complex rotary is llama.cpp's interleaved one
        check(f"blk.{b}.attn_q.weight", ckpt[f"model.layers.{b}.self_attn.q_proj.weight"])
        check(f"blk.{b}.attn_k.weight", ckpt[f"model.layers.{b}.self_attn.k_proj.weight"])
    assert not any("gate_up" in n for n in got)
    assert audit_gguf(path, base) == (len(got), [])


def test_the_keys_llama_cpp_reads_for_llama4(tmp_path) -> None:
    base = _base(tmp_path, **MAVERICK)
    fields = gguf.GGUFReader(str(write_gguf(base, tmp_path / "m.gguf", "F32"))).fields

    def value(key: str):
        return fields[key].contents()

    assert value("general.architecture") == "llama4"
    assert value("llama4.expert_count") == E and value("llama4.expert_used_count") == 2
    assert value("llama4.expert_feed_forward_length") == FF  # the routed and the shared experts' width
    assert value("llama4.feed_forward_length") == 128  # intermediate_size_mlp: the dense layers'
    assert value("llama4.interleave_moe_layer_step") == 2
    assert value("llama4.block_count") == LAYERS and value("llama4.rope.dimension_count") == 16
    # no sliding_window key: llama.cpp's llama4 then chunks every layer but each 4th by 8192 (0 would disable it)
    assert "llama4.attention.sliding_window" not in fields


def test_the_audit_catches_a_corrupted_expert_in_the_half_it_belongs_to(tmp_path) -> None:
    base = _base(tmp_path, strong=True)
    path = write_gguf(base, tmp_path / "m.gguf", "F16")
    weights = load_file(str(base / "model.safetensors"))
    name = "model.layers.1.feed_forward.experts.gate_up_proj"  # (E, 64, 128): gate 0..63, up 64..127
    weights[name][2, 5, 70] += 1.0  # column 70: the second half, so expert 2's up projection
    save_file(weights, str(base / "model.safetensors"), metadata={"format": "pt"})
    checked, bad = audit_gguf(path, base)
    assert bad == ["blk.1.ffn_up_exps.weight: not the F16 encoding of the checkpoint's tensor"], bad
    assert checked == len(gguf_plan(base, "F16"))


@pytest.mark.parametrize(
    "overrides,why",
    [
        (
            {"no_rope_layers": [1, 1, 0, 1]},
            "its NoPE layers are [2] but llama.cpp's LLAMA4 skips the rotary in every 4th layer ([3])",
        ),
        (
            {"no_rope_layers": None, "no_rope_layer_interval": 2},
            "its NoPE layers are [1, 3] but llama.cpp's LLAMA4 skips the rotary in every 4th layer ([3])",
        ),
        ({"attention_chunk_size": 4}, "attention_chunk_size is 4 but llama.cpp's LLAMA4 hard-codes 8192"),
        ({"attention_chunk_size": None}, "attention_chunk_size is None but llama.cpp's LLAMA4 hard-codes 8192"),
        ({"floor_scale": 2}, "floor_scale is 2 but llama.cpp's LLAMA4 hard-codes 8192"),
        ({"attn_scale": 0.5}, "attn_scale is 0.5 but llama.cpp's LLAMA4 hard-codes 0.1"),
        (
            {"layer_types": ["full_attention"] * 4},
            (
                "its layer_types are ['full_attention', 'full_attention', 'full_attention', 'full_attention'] but llama.cpp's "
                "LLAMA4 attends in chunks in every layer but each 4th (['chunked_attention', 'chunked_attention', "
                "'chunked_attention', 'full_attention'])"
            ),
        ),
        (
            {"attn_temperature_tuning": False},
            "attn_temperature_tuning is false but llama.cpp's LLAMA4 always scales its NoPE layers' queries",
        ),
        (
            {"moe_layers": [0, 2]},
            (
                "its moe_layers are [0, 2] but llama.cpp's LLAMA4 puts the experts in every interleave_moe_layer_step-th "
                "layer ([0, 1, 2, 3])"
            ),
        ),
        (
            {"use_qk_norm": False},
            "use_qk_norm is False but llama.cpp's LLAMA4 normalizes q and k exactly when there are not 128 experts (here 4)",
        ),
        ({"attention_bias": True}, "attention_bias is set but llama.cpp's LLAMA4 has no attention biases"),
        ({"hidden_act": "gelu"}, "hidden_act is 'gelu' but llama.cpp's LLAMA4 uses silu"),
        (
            {"rope_parameters": {"rope_type": "linear", "rope_theta": 500000.0, "factor": 2.0}},
            "rope 'linear': only default and llama3 rope are written for llama4_text (verified against llama.cpp)",
        ),
    ],
)
def test_configs_llama_cpp_runs_differently_are_refused_in_one_exact_line(overrides, why) -> None:
    cfg = family_shape("Llama 4 (text)").config().to_dict()
    assert gguf_refusal(cfg) is None  # the released shape is written
    cfg = {**cfg, **overrides}
    if "no_rope_layer_interval" in overrides:
        del cfg["no_rope_layers"]  # as a Hub config that gives the interval only
    assert gguf_refusal(cfg) == (
        f"outputs.gguf: this llama4_text config cannot be run by llama.cpp as transformers runs it: {why}; "
        "set outputs.gguf: null (the checkpoint holds the edit)"
    )


def test_the_released_scout_and_maverick_shapes_are_written() -> None:
    shape = family_shape("Llama 4 (text)")
    for extra in (
        {"rope_parameters": LLAMA3},
        MAVERICK,
        {"num_local_experts": 128, "use_qk_norm": False, "interleave_moe_layer_step": 2},
    ):
        cfg = dataclasses.replace(shape, kwargs={**shape.kwargs, **extra}).config().to_dict()
        assert gguf_refusal(cfg) is None, extra


def _need_llama_cpp(tmp_path: Path) -> None:
    if importlib.util.find_spec("llama_cpp") is None:
        _llama(tmp_path / "none.gguf")  # skips, or fails where MATHNEURO_EDIT_REQUIRE_LLAMA_CPP=1 (CI)


def _gap(tmp_path: Path, base: Path) -> tuple[float, object, object, list[int]]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    llm = _llama(write_gguf(base, tmp_path / "m.gguf", "F32"))
    ids = AutoTokenizer.from_pretrained(base)(PROMPT).input_ids
    ref = AutoModelForCausalLM.from_pretrained(base).eval()
    return logit_gap(llm, ref, ids), llm, ref, ids


@pytest.mark.parametrize("extra", [{}, {**MAVERICK, "rope_parameters": LLAMA3}], ids=["scout", "maverick-llama3"])
def test_llama_cpp_matches_transformers_where_attention_and_routing_matter(extra, tmp_path) -> None:
    """The families test's base, with its weights scaled so that attention and routing decide the logits (and in
    Maverick's shape with Scout's llama3 rope: dense layers between the MoE ones, two experts per token,
    ``rope_freqs``): llama.cpp computes transformers' logits and greedy continuation."""
    from tests.runs.test_families import _cpp_greedy, _greedy

    _need_llama_cpp(tmp_path)
    gap, llm, ref, ids = _gap(tmp_path, _base(tmp_path, strong=True, **extra))
    assert gap < 1e-3
    assert _cpp_greedy(llm, ids, 8) == _greedy(ref, ids, 8)


@pytest.mark.parametrize(
    "overrides",
    [{"no_rope_layers": [1, 1, 0, 1]}, {"attention_chunk_size": 4}, {"floor_scale": 2}, {"use_qk_norm": False}],
    ids=["nope-layer", "chunk", "floor-scale", "qk-norm"],
)
def test_each_refusal_is_needed_llama_cpp_would_differ(overrides, tmp_path, monkeypatch) -> None:
    """With the refusal bypassed, llama.cpp's logits leave the tolerance the families test holds the written
    families to: the refused configs really run differently there. (attn_temperature_tuning false, another
    attn_scale, or a chunk size beyond the prompt only differ past 8191 tokens, where the scale leaves 1; other
    moe_layers or attention biases give tensors llama.cpp does not load.)"""
    _need_llama_cpp(tmp_path)
    base = _base(tmp_path, strong=True, **overrides)
    family = gguf_arch.FAMILIES["llama4_text"]
    monkeypatch.setitem(gguf_arch.FAMILIES, "llama4_text", dataclasses.replace(family, refusal_reason=lambda cfg: None))
    gap, *_ = _gap(tmp_path, base)
    assert gap > 1e-3


def test_plan_prints_the_refusal_from_config_json_alone(tmp_path) -> None:
    import yaml
    from click.testing import CliRunner

    from mathneuro_edit.cli.main import main

    shape = family_shape("Llama 4 (text)")
    folder = tmp_path / "base"
    dataclasses.replace(shape, kwargs={**shape.kwargs, "floor_scale": 2}).config().save_pretrained(folder)
    recipe = tmp_path / "r.yaml"  # config.json only: no weights to read
    recipe.write_text(
        yaml.safe_dump(
            {
                "base": {"model": str(folder), "dtype": "float32"},
                "data": {"math": "organism:math", "general": ["organism:general"]},
                "edit": {"scale": 1.1},
                "outputs": {"adapter": False, "gguf": "Q8_0"},
            }
        )
    )
    res = CliRunner().invoke(main, ["plan", str(recipe)])
    assert res.exit_code == 0, res.output
    assert (
        "  gguf: no (outputs.gguf: this llama4_text config cannot be run by llama.cpp as transformers runs it: "
        "floor_scale is 2 but llama.cpp's LLAMA4 hard-codes 8192; set outputs.gguf: null"
    ) in res.output
