"""GGUF export of MoE families (Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE): the experts as llama.cpp stacks them.

llama.cpp stores each layer's routed experts as one 3-D tensor per projection (``ffn_{gate,up,down}_exps``,
expert index outermost) and keeps the router in F32. Checked here against an independent reading: gguf's own
reader on the file, safetensors on the checkpoint, ``np.stack`` in expert order. llama.cpp itself runs these
files in tests/runs/test_families.py (logits and greedy continuation match transformers'); here, besides, the
configs llama.cpp would run differently are refused from config.json alone, and that refusal is shown to be needed.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import re
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from safetensors.numpy import load_file, save_file  # noqa: E402

import tests._families as fam  # noqa: E402
from mathneuro_edit import InputError  # noqa: E402
from mathneuro_edit.weights import gguf_arch  # noqa: E402
from mathneuro_edit.weights.gguf_arch import gguf_refusal  # noqa: E402
from mathneuro_edit.weights.gguf_tensors import gguf_plan  # noqa: E402
from mathneuro_edit.weights.gguf_writer import audit_gguf, write_gguf  # noqa: E402
from tests._family_shapes import family_shape  # noqa: E402
from tests._llama_cpp import logit_gap  # noqa: E402
from tests.weights.test_gguf import _llama  # noqa: E402

# family -> (GGUF projection -> the per-expert checkpoint name of expert {e} in layer {b})
MOE = {
    "Mixtral": {
        "ffn_gate_exps": "model.layers.{b}.block_sparse_moe.experts.{e}.w1.weight",
        "ffn_down_exps": "model.layers.{b}.block_sparse_moe.experts.{e}.w2.weight",
        "ffn_up_exps": "model.layers.{b}.block_sparse_moe.experts.{e}.w3.weight",
    },
    **{
        name: {
            f"ffn_{p}_exps": "model.layers.{b}.mlp.experts.{e}." + f"{p}_proj.weight" for p in ("gate", "up", "down")
        }
        for name in ("Qwen2-MoE", "Qwen3-MoE", "OLMoE")
    },
}


def _base(tmp_path: Path, name: str, **overrides) -> Path:
    shape = family_shape(name)
    if overrides:
        shape = dataclasses.replace(shape, kwargs={**shape.kwargs, **overrides})
    return fam.save_family_base(tmp_path / "base", shape)


@pytest.mark.parametrize("name", list(MOE))
def test_experts_are_stacked_expert_major_and_the_router_stays_f32(name, tmp_path) -> None:
    base = _base(tmp_path, name)
    path = write_gguf(base, tmp_path / "m.gguf", "Q8_0")
    ckpt = load_file(str(base / "model.safetensors"))
    got = {t.name: t for t in gguf.GGUFReader(str(path)).tensors}
    n_experts = 4
    for b in range(2):
        for proj, member in MOE[name].items():
            t = got[f"blk.{b}.{proj}.weight"]
            want = np.stack([ckpt[member.format(b=b, e=e)] for e in range(n_experts)])  # (experts, rows, cols)
            assert [int(s) for s in t.shape] == list(reversed(want.shape)) and t.tensor_type.name == "Q8_0"
            deq = gguf.quants.dequantize(np.asarray(t.data), gguf.GGMLQuantizationType.Q8_0).reshape(want.shape)
            ref = gguf.quants.dequantize(
                gguf.quants.quantize(want.reshape(-1, want.shape[-1]), gguf.GGMLQuantizationType.Q8_0),
                gguf.GGMLQuantizationType.Q8_0,
            ).reshape(want.shape)
            np.testing.assert_array_equal(deq, ref)
        router = got[f"blk.{b}.ffn_gate_inp.weight"]
        assert router.tensor_type.name == "F32"  # llama.cpp's converter never quantizes the router
    assert not any(re.search(r"\.experts\.\d+\.", n) for n in got)  # no per-expert tensor left over
    assert audit_gguf(path, base) == (len(got), [])


def test_the_audit_catches_two_experts_swapped(tmp_path) -> None:
    base = _base(tmp_path, "Qwen3-MoE")
    path = write_gguf(base, tmp_path / "m.gguf", "F16")
    weights = load_file(str(base / "model.safetensors"))
    a, b = "model.layers.1.mlp.experts.0.up_proj.weight", "model.layers.1.mlp.experts.2.up_proj.weight"
    weights[a], weights[b] = weights[b], weights[a]
    save_file(weights, str(base / "model.safetensors"), metadata={"format": "pt"})
    checked, bad = audit_gguf(path, base)
    assert bad == ["blk.1.ffn_up_exps.weight: not the F16 encoding of the checkpoint's tensor"], bad


def test_a_checkpoint_missing_an_expert_is_refused_naming_it(tmp_path) -> None:
    base = _base(tmp_path, "Mixtral")
    weights = load_file(str(base / "model.safetensors"))
    del weights["model.layers.0.block_sparse_moe.experts.3.w2.weight"]
    save_file(weights, str(base / "model.safetensors"), metadata={"format": "pt"})
    (base / "model.safetensors.index.json").unlink(missing_ok=True)
    with pytest.raises(
        InputError,
        match=r"^outputs\.gguf: model\.layers\.0\.block_sparse_moe\.experts\.\*\.w2 has "
        r"experts \[0, 1, 2\] but config\.json says 4 \(0\.\.3\)",
    ):
        gguf_plan(base, "F32")


@pytest.mark.parametrize(
    "model_type,overrides,why",
    [
        (
            "qwen3_moe",
            {"norm_topk_prob": False},
            "norm_topk_prob is False but llama.cpp's QWEN3MOE always renormalizes the top-k router weights",
        ),
        (
            "qwen2_moe",
            {"norm_topk_prob": True},
            "norm_topk_prob is True but llama.cpp's QWEN2MOE always keeps the top-k router weights",
        ),
        ("olmoe", {"norm_topk_prob": True}, "norm_topk_prob is True but llama.cpp's OLMOE always keeps"),
        ("qwen2_moe", {"mlp_only_layers": [1]}, "some layers have a dense MLP (mlp_only_layers / decoder_sparse_step)"),
        ("qwen3_moe", {"decoder_sparse_step": 2}, "some layers have a dense MLP"),
        ("qwen2_moe", {"shared_expert_intermediate_size": 0}, "there is no shared expert"),
    ],
)
def test_configs_llama_cpp_runs_differently_are_refused_from_config_alone(model_type, overrides, why) -> None:
    name = {"qwen3_moe": "Qwen3-MoE", "qwen2_moe": "Qwen2-MoE", "olmoe": "OLMoE"}[model_type]
    cfg = {**family_shape(name).config().to_dict(), **overrides}
    assert gguf_refusal({**family_shape(name).config().to_dict()}) is None  # the released shape is written
    line = gguf_refusal(cfg)
    assert line.startswith(
        f"outputs.gguf: this {model_type} config cannot be run by llama.cpp as transformers runs it: {why}"
    ) and line.endswith("set outputs.gguf: null (the checkpoint holds the edit)")
    assert "\n" not in line


@pytest.mark.parametrize(
    "name,overrides", [("Qwen3-MoE", {"norm_topk_prob": False}), ("Qwen2-MoE", {"norm_topk_prob": True})]
)
def test_the_norm_topk_refusal_is_needed_llama_cpp_would_differ(name, overrides, tmp_path, monkeypatch) -> None:
    """With the refusal bypassed, llama.cpp's logits leave the tolerance the families test holds the written
    families to: the refused configs really run differently there."""
    if importlib.util.find_spec("llama_cpp") is None:
        _llama(tmp_path / "none.gguf")  # skips, or fails where MATHNEURO_EDIT_REQUIRE_LLAMA_CPP=1 (CI)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base = _base(tmp_path, name, **overrides)
    model_type = family_shape(name).config().model_type
    family = gguf_arch.FAMILIES[model_type]
    monkeypatch.setitem(gguf_arch.FAMILIES, model_type, dataclasses.replace(family, refusal_reason=lambda cfg: None))
    path = write_gguf(base, tmp_path / "m.gguf", "F32")
    llm = _llama(path)
    tok = AutoTokenizer.from_pretrained(base)
    ref = AutoModelForCausalLM.from_pretrained(base).eval()
    ids = tok("Question: Tom has 3 apples and buys 4 more.").input_ids
    assert logit_gap(llm, ref, ids) > 1e-3
