"""GGUF export of GPT-2: Conv1D weights transposed to llama.cpp's Linear layout, learned positions, LayerNorm.

transformers' GPT-2 stores ``c_attn``, ``c_proj`` and ``c_fc`` as Conv1D, ``(in, out)``; llama.cpp's gpt2 reads
them as every other family's Linear, ``(out, in)`` (its converter transposes them), keeps ``attn_qkv`` fused and
the learned positions ``position_embd`` in F32, and has no rotary. Checked here against safetensors and gguf's
reader; llama.cpp itself runs the file in tests/runs/test_families.py. Configs llama.cpp's gpt2 runs differently
are refused from config.json alone, and one refusal is shown to be needed.
"""

from __future__ import annotations

import dataclasses
import importlib.util

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from safetensors.numpy import load_file  # noqa: E402

import tests._families as fam  # noqa: E402
from mathneuro_edit.weights import gguf_arch  # noqa: E402
from mathneuro_edit.weights.gguf_arch import gguf_refusal  # noqa: E402
from mathneuro_edit.weights.gguf_writer import audit_gguf, write_gguf  # noqa: E402
from tests._family_shapes import family_shape  # noqa: E402
from tests._llama_cpp import logit_gap  # noqa: E402
from tests.weights.test_gguf import _llama  # noqa: E402

GPT2 = family_shape("GPT-2")


def test_conv1d_weights_are_transposed_and_positions_stay_f32(tmp_path) -> None:
    base = fam.save_family_base(tmp_path / "base", GPT2)
    path = write_gguf(base, tmp_path / "m.gguf", "Q8_0", name="gpt2-test")
    r = gguf.GGUFReader(str(path))
    got = {t.name: t for t in r.tensors}
    ckpt = load_file(str(base / "model.safetensors"))
    for b in range(2):
        for gname, hf in (
            ("attn_qkv", "attn.c_attn"),
            ("attn_output", "attn.c_proj"),
            ("ffn_up", "mlp.c_fc"),
            ("ffn_down", "mlp.c_proj"),
        ):
            w = ckpt[f"transformer.h.{b}.{hf}.weight"].T  # Conv1D (in, out) -> (out, in)
            t = got[f"blk.{b}.{gname}.weight"]
            assert [int(s) for s in t.shape] == list(reversed(w.shape)) and t.tensor_type.name == "Q8_0"
            want = gguf.quants.quantize(np.ascontiguousarray(w), gguf.GGMLQuantizationType.Q8_0)
            assert np.asarray(t.data).tobytes() == want.tobytes()
            assert got[f"blk.{b}.{gname}.bias"].tensor_type.name == "F32"
    pos = got["position_embd.weight"]
    assert pos.tensor_type.name == "F32"  # llama.cpp's converter never quantizes the learned positions
    np.testing.assert_array_equal(np.asarray(pos.data), ckpt["transformer.wpe.weight"])
    assert "output.weight" not in got  # tied: llama.cpp reuses token_embd
    keys = set(r.fields)
    assert "gpt2.attention.layer_norm_epsilon" in keys and "gpt2.feed_forward_length" in keys
    assert not any(k.startswith("gpt2.rope") or k.endswith("rms_epsilon") for k in keys)
    assert r.fields["gpt2.feed_forward_length"].contents() == 4 * 64  # n_inner None: 4 x n_embd
    assert audit_gguf(path, base) == (len(got), [])


@pytest.mark.parametrize(
    "overrides,why",
    [
        (
            {"activation_function": "relu"},
            "activation_function 'relu': llama.cpp's GPT2 uses the tanh-approximated GELU",
        ),
        ({"scale_attn_by_inverse_layer_idx": True}, "its attention scale is not 1/sqrt(head_dim)"),
        ({"scale_attn_weights": False}, "its attention scale is not 1/sqrt(head_dim)"),
    ],
)
def test_gpt2_configs_llama_cpp_runs_differently_are_refused(overrides, why) -> None:
    assert gguf_refusal(GPT2.config().to_dict()) is None
    line = gguf_refusal({**GPT2.config().to_dict(), **overrides})
    assert line.startswith(f"outputs.gguf: this gpt2 config cannot be run by llama.cpp as transformers runs it: {why}")
    assert line.endswith("set outputs.gguf: null (the checkpoint holds the edit)") and "\n" not in line


def test_the_activation_refusal_is_needed_llama_cpp_would_differ(tmp_path, monkeypatch) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if importlib.util.find_spec("llama_cpp") is None:
        _llama(tmp_path / "none.gguf")  # skips, or fails where MATHNEURO_EDIT_REQUIRE_LLAMA_CPP=1 (CI)
    shape = dataclasses.replace(GPT2, kwargs={**GPT2.kwargs, "activation_function": "relu"})
    base = fam.save_family_base(tmp_path / "base", shape)
    family = gguf_arch.FAMILIES["gpt2"]
    monkeypatch.setitem(gguf_arch.FAMILIES, "gpt2", dataclasses.replace(family, refusal_reason=lambda cfg: None))
    llm = _llama(write_gguf(base, tmp_path / "m.gguf", "F32", name="gpt2-test"))
    ref = AutoModelForCausalLM.from_pretrained(base).eval()
    ids = AutoTokenizer.from_pretrained(base)("Question: Tom has 3 apples and buys 4 more.").input_ids
    assert logit_gap(llm, ref, ids) > 1e-3
