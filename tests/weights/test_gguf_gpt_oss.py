"""GGUF export of gpt-oss: the fused experts split and transposed as llama.cpp's openai-moe loads them.

transformers stores each layer's experts fused: ``gate_up_proj`` ``[experts, hidden, 2 * ff]`` with gate and up
interleaved (even and odd columns), ``down_proj`` ``[experts, ff, hidden]``, and their biases. llama.cpp wants
``ffn_{gate,up,down}_exps`` ``[experts, out, in]`` (numpy order) and their biases, the attention sinks as
``attn_sinks.weight`` and the router's bias. Checked here against an independent reading (safetensors + numpy
slicing), by the audit, and by llama.cpp itself on weights where the biases, the sinks and the swiglu clamp all
matter; the configs llama.cpp would run differently are refused from config.json alone, and each refusal is shown
to be needed (bypassed, llama.cpp's logits leave the tolerance).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
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

E, LAYERS = 4, 2
PROMPT = "Question: Tom has 3 apples and buys 4 more."


def _base(tmp_path: Path, *, strong: bool = False, **overrides) -> Path:
    """The family's tiny base; ``strong``: random expert biases (zero at init) and expert weights large enough
    that the swiglu clamp (7) is reached, so that every gpt-oss-specific tensor and constant shows in the logits."""
    rng = np.random.default_rng(0)

    def reweigh(k, v):
        if k.endswith("_bias"):
            return rng.normal(0, 0.5, v.shape)
        return v * 40 if k.endswith("gate_up_proj") else v * 5 if k.endswith("down_proj") else None

    return family_base(tmp_path / "base", "gpt-oss", reweigh if strong else None, **overrides)


@pytest.mark.parametrize("qtype", ["F32", "Q8_0"])
def test_experts_are_split_and_transposed_as_numpy_computes_them(qtype, tmp_path) -> None:
    """ff (32) != hidden (64) here, so that a tensor left untransposed would have the wrong shape."""
    base = _base(tmp_path, strong=True, intermediate_size=32)
    path = write_gguf(base, tmp_path / "m.gguf", qtype)
    ckpt, got = load_file(str(base / "model.safetensors")), gguf_tensors(path)
    q = gguf.GGMLQuantizationType[qtype]

    def stored(name: str, want: np.ndarray) -> np.ndarray:
        t = got[name]
        assert [int(s) for s in t.shape] == list(reversed(want.shape)), name
        data = np.asarray(t.data)
        return (data if qtype == "F32" else gguf.quants.dequantize(data, q)).reshape(want.shape)

    for b in range(LAYERS):
        pre = f"model.layers.{b}.mlp.experts."
        gate_up, down = ckpt[pre + "gate_up_proj"], ckpt[pre + "down_proj"]  # (E, H, 2F), (E, F, H)
        assert gate_up.shape == (E, 64, 64) and down.shape == (E, 32, 64)
        for name, want in (
            (f"blk.{b}.ffn_gate_exps.weight", np.transpose(gate_up[:, :, 0::2], (0, 2, 1))),
            (f"blk.{b}.ffn_up_exps.weight", np.transpose(gate_up[:, :, 1::2], (0, 2, 1))),
            (f"blk.{b}.ffn_down_exps.weight", np.transpose(down, (0, 2, 1))),
        ):
            assert got[name].tensor_type.name == qtype
            ref = (
                want
                if qtype == "F32"
                else gguf.quants.dequantize(
                    gguf.quants.quantize(np.ascontiguousarray(want).reshape(-1, want.shape[-1]), q), q
                ).reshape(want.shape)
            )
            np.testing.assert_array_equal(stored(name, want), ref)
        bias = ckpt[pre + "gate_up_proj_bias"]  # (E, 2F)
        for name, want in (
            (f"blk.{b}.ffn_gate_exps.bias", bias[:, 0::2]),
            (f"blk.{b}.ffn_up_exps.bias", bias[:, 1::2]),
            (f"blk.{b}.ffn_down_exps.bias", ckpt[pre + "down_proj_bias"]),
            (f"blk.{b}.attn_sinks.weight", ckpt[f"model.layers.{b}.self_attn.sinks"]),
            (f"blk.{b}.ffn_gate_inp.bias", ckpt[f"model.layers.{b}.mlp.router.bias"]),
            (f"blk.{b}.ffn_gate_inp.weight", ckpt[f"model.layers.{b}.mlp.router.weight"]),
        ):
            assert got[name].tensor_type.name == "F32", name  # biases, sinks and router: F32 in every file type
            np.testing.assert_array_equal(np.asarray(got[name].data).reshape(want.shape), want)
    assert not any("gate_up" in n or n.endswith("sinks") for n in got)
    assert audit_gguf(path, base) == (len(got), [])


def test_the_keys_llama_cpp_reads_for_gpt_oss(tmp_path) -> None:
    base = _base(tmp_path)
    fields = gguf.GGUFReader(str(write_gguf(base, tmp_path / "m.gguf", "F32"))).fields

    def value(key: str):
        return fields[key].contents()

    assert value("general.architecture") == "gpt-oss"
    assert value("gpt-oss.expert_count") == 4 and value("gpt-oss.expert_used_count") == 2
    assert value("gpt-oss.expert_feed_forward_length") == 64 and value("gpt-oss.attention.sliding_window") == 8
    assert value("gpt-oss.attention.sliding_window_pattern") == [True, False]  # layer_types: sliding, full
    assert value("gpt-oss.rope.scaling.type") == "yarn" and value("gpt-oss.rope.scaling.factor") == 4.0
    assert value("gpt-oss.rope.scaling.original_context_length") == 64
    assert value("gpt-oss.rope.scaling.yarn_beta_fast") == 32.0 and value("gpt-oss.rope.scaling.yarn_beta_slow") == 1.0
    assert value("gpt-oss.rope.freq_base") == 150000.0


def test_the_audit_catches_a_corrupted_expert_in_the_half_it_belongs_to(tmp_path) -> None:
    base = _base(tmp_path, strong=True)
    path = write_gguf(base, tmp_path / "m.gguf", "F16")
    weights = load_file(str(base / "model.safetensors"))
    name = "model.layers.1.mlp.experts.gate_up_proj"
    weights[name][2, 5, 7] += 1.0  # column 7: odd, so expert 2's up projection
    save_file(weights, str(base / "model.safetensors"), metadata={"format": "pt"})
    checked, bad = audit_gguf(path, base)
    assert bad == ["blk.1.ffn_up_exps.weight: not the F16 encoding of the checkpoint's tensor"], bad
    assert checked == len(gguf_plan(base, "F16"))


@pytest.mark.parametrize(
    "overrides,why",
    [
        ({"swiglu_alpha": 1.0}, "swiglu_alpha is 1.0 but llama.cpp's GPT_OSS hard-codes 1.702 in its swiglu"),
        ({"swiglu_limit": 10.0}, "swiglu_limit is 10.0 but llama.cpp's GPT_OSS hard-codes 7.0 in its swiglu"),
        (
            {
                "rope_parameters": {
                    "rope_type": "yarn",
                    "rope_theta": 150000.0,
                    "factor": 4.0,
                    "beta_fast": 32.0,
                    "beta_slow": 1.0,
                    "truncate": False,
                    "original_max_position_embeddings": 64,
                    "attention_factor": 2.0,
                }
            },
            (
                "its YaRN scales attention by 2 (attention_factor/mscale) but llama.cpp's GPT_OSS computes "
                "0.1 ln(factor) + 1 = 1.13863"
            ),
        ),
        (
            {
                "rope_parameters": {
                    "rope_type": "yarn",
                    "rope_theta": 150000.0,
                    "factor": 4.0,
                    "mscale": 1.0,
                    "mscale_all_dim": 0.5,
                    "original_max_position_embeddings": 64,
                }
            },
            (
                "its YaRN scales attention by 1.06482 (attention_factor/mscale) but llama.cpp's GPT_OSS computes "
                "0.1 ln(factor) + 1 = 1.13863"
            ),
        ),
        (
            {"rope_parameters": {"rope_type": "linear", "rope_theta": 150000.0, "factor": 4.0}},
            "rope 'linear': only default and YaRN rope are written for gpt-oss (verified against llama.cpp)",
        ),
        ({"sliding_window": None}, "sliding layers but no sliding_window"),
    ],
)
def test_configs_llama_cpp_runs_differently_are_refused_in_one_exact_line(overrides, why) -> None:
    cfg = family_shape("gpt-oss").config().to_dict()
    assert gguf_refusal(cfg) is None  # the released shape is written
    assert gguf_refusal({**cfg, **overrides}) == (
        f"outputs.gguf: this gpt_oss config cannot be run by llama.cpp as transformers runs it: {why}; "
        "set outputs.gguf: null (the checkpoint holds the edit)"
    )


def _logits(tmp_path: Path, base: Path) -> tuple[torch.Tensor, torch.Tensor, list[int], object]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = write_gguf(base, tmp_path / "m.gguf", "F32")
    llm = _llama(path)
    ids = AutoTokenizer.from_pretrained(base)(PROMPT).input_ids
    llm.eval(ids)
    cpp = torch.tensor(np.array(llm.scores[: len(ids)]))
    ref = AutoModelForCausalLM.from_pretrained(base).eval()
    with torch.no_grad():
        hf = ref(torch.tensor([ids])).logits[0]
    return cpp, hf, ids, (llm, ref)


def _need_llama_cpp(tmp_path: Path) -> None:
    if importlib.util.find_spec("llama_cpp") is None:
        _llama(tmp_path / "none.gguf")  # skips, or fails where MATHNEURO_EDIT_REQUIRE_LLAMA_CPP=1 (CI)


def test_llama_cpp_matches_transformers_where_biases_sinks_and_the_clamp_matter(tmp_path) -> None:
    """The families test's base has zero expert biases (transformers' init); here they are random and the
    gate/up values pass the clamp, and llama.cpp still computes transformers' logits and greedy continuation."""
    from tests.runs.test_families import _cpp_greedy, _greedy

    _need_llama_cpp(tmp_path)
    base = _base(tmp_path, strong=True)
    cpp, hf, ids, (llm, ref) = _logits(tmp_path, base)
    assert (cpp - hf).abs().max() < 1e-3 * max(1.0, float(hf.abs().max()))
    assert _cpp_greedy(llm, ids, 8) == _greedy(ref, ids, 8)


@pytest.mark.parametrize(
    "overrides",
    [
        {"swiglu_alpha": 1.0},
        {"swiglu_limit": 0.5},
        {
            "rope_parameters": {
                "rope_type": "yarn",
                "rope_theta": 150000.0,
                "factor": 4.0,
                "truncate": False,
                "original_max_position_embeddings": 64,
                "attention_factor": 2.0,
            }
        },
    ],
)
def test_each_refusal_is_needed_llama_cpp_would_differ(overrides, tmp_path, monkeypatch) -> None:
    """With the refusal bypassed, llama.cpp's logits leave the tolerance the families test holds the written
    families to: the refused configs really run differently there."""
    _need_llama_cpp(tmp_path)
    base = _base(tmp_path, strong=True, **overrides)
    family = gguf_arch.FAMILIES["gpt_oss"]
    monkeypatch.setitem(gguf_arch.FAMILIES, "gpt_oss", dataclasses.replace(family, refusal_reason=lambda cfg: None))
    cpp, hf, _, _ = _logits(tmp_path, base)
    assert (cpp - hf).abs().max() > 1e-3 * max(1.0, float(hf.abs().max()))


def test_the_rounded_yarn_range_is_said_when_written(tmp_path, caplog) -> None:
    """gpt-oss is released with YaRN ``truncate: false``; llama.cpp always rounds the correction range (no key
    can say otherwise), as its own converter's files do: written, with a warning naming both ranges."""
    base = _base(tmp_path)
    with caplog.at_level(logging.WARNING, logger="mathneuro_edit.weights.gguf_keys"):
        write_gguf(base, tmp_path / "m.gguf", "F32")
    assert "llama.cpp rounds YaRN's correction range to [0, 2] where transformers uses [0, 1.558]" in caplog.text
    caplog.clear()
    rope = {**family_shape("gpt-oss").kwargs["rope_parameters"], "truncate": True}
    base = _base(tmp_path / "t", rope_parameters=rope)
    with caplog.at_level(logging.WARNING, logger="mathneuro_edit.weights.gguf_keys"):
        write_gguf(base, tmp_path / "t.gguf", "F32")
    assert "correction range" not in caplog.text


def test_the_rounded_yarn_range_is_llama_cpp_s_only_difference(tmp_path) -> None:
    """With ``truncate: true`` (llama.cpp's own rounding) llama.cpp computes transformers' logits up to float32
    rounding; with the released ``truncate: false`` they differ, by the rounded range alone, within the families
    test's tolerance on this model (on gpt-oss-20b, whose range [8.09, 17.40] becomes [8, 18], one rotary
    frequency differs by 43%: a deviation of llama.cpp's that no GGUF key can remove)."""
    _need_llama_cpp(tmp_path)
    diffs = {}
    for truncate in (True, False):
        rope = {**family_shape("gpt-oss").kwargs["rope_parameters"], "truncate": truncate}
        cpp, hf, _, _ = _logits(
            tmp_path / str(truncate), _base(tmp_path / str(truncate), strong=True, rope_parameters=rope)
        )
        diffs[truncate] = float((cpp - hf).abs().max()) / max(1.0, float(hf.abs().max()))
    assert diffs[True] < 1e-5 < diffs[False] < 1e-3, diffs


def test_a_yarn_attention_factor_equal_to_llama_cpp_s_is_written() -> None:
    cfg = family_shape("gpt-oss").config().to_dict()
    rope = {**cfg["rope_parameters"], "attention_factor": 0.1 * np.log(4.0) + 1}
    assert gguf_refusal({**cfg, "rope_parameters": rope}) is None


def test_a_bf16_checkpoint_is_split_one_expert_at_a_time_and_audited(tmp_path) -> None:
    """The released weights are bf16 (the MXFP4 experts dequantized): each expert is read by its own byte range."""
    from safetensors.torch import load_file as load_torch
    from safetensors.torch import save_file as save_torch

    base = _base(tmp_path, strong=True)
    path = base / "model.safetensors"
    save_torch(
        {k: v.to(torch.bfloat16) for k, v in load_torch(str(path)).items()}, str(path), metadata={"format": "pt"}
    )
    out = write_gguf(base, tmp_path / "m.gguf", "F32")
    gate_up = load_torch(str(path))["model.layers.0.mlp.experts.gate_up_proj"].float().numpy()
    got = gguf_tensors(out)["blk.0.ffn_up_exps.weight"]
    np.testing.assert_array_equal(np.asarray(got.data).reshape(E, 64, 64), np.transpose(gate_up[:, :, 1::2], (0, 2, 1)))
    assert audit_gguf(out, base)[1] == []
