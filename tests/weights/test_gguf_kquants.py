"""K-quants made by llama.cpp's own quantizer (weights/gguf_quantize.py) and the edit's survival in them.

A tiny random Llama whose matrices have 256-column rows (K-quant blocks are 256 entries, so no tensor falls back
to another type), edited x1.1 on a random 2% of its weights:

- the Q4_K_M file equals llama.cpp's own quantization of the same float GGUF, byte for byte, and its bytes do not
  depend on the thread count;
- llama.cpp loads it and the gguf package reads it back (file type Q4_K_M, Q4_K tensors);
- the survival figure equals an independent count: both quantized files dequantized with the gguf package, the
  edited entries taken from the mask.

llama.cpp tier: skips without llama-cpp-python (the ``gguf-test`` extra), fails instead where
``MATHNEURO_EDIT_REQUIRE_LLAMA_CPP=1``.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np
import pytest
import torch

gguf = pytest.importorskip("gguf")


def _llama_cpp():
    from tests._llama_cpp import llama_cpp_or_skip

    return llama_cpp_or_skip()


@pytest.fixture(scope="module")
def edited(tmp_path_factory):
    """(base folder, mask, edited checkpoint) of a tiny Llama with 256-wide rows."""
    import transformers as tf
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mathneuro_edit.engine.mask import Mask
    from mathneuro_edit.organism import organism_path
    from mathneuro_edit.weights.checkpoint_writer import export_checkpoint

    root = tmp_path_factory.mktemp("kquant")
    tok = AutoTokenizer.from_pretrained(organism_path())
    cfg = tf.LlamaConfig(
        vocab_size=len(tok),
        hidden_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=512,
        max_position_embeddings=256,
        bos_token_id=1,
        eos_token_id=2,
    )
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg).eval()
    model.save_pretrained(root / "base")
    tok.save_pretrained(root / "base")
    g = torch.Generator().manual_seed(1)
    mask = Mask({n: torch.rand(p.shape, generator=g) < 0.02 for n, p in model.named_parameters() if p.ndim == 2})
    return root / "base", mask, export_checkpoint(root / "base", mask, 1.1, root / "ckpt")


def _llama_cpp_own(llama_cpp, src: Path, dst: Path, ftype: int) -> bytes:
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype, params.nthread = ftype, 1
    assert llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params)) == 0
    return dst.read_bytes()


def test_the_k_quant_is_llama_cpp_s_own_quantization(edited, tmp_path) -> None:
    from mathneuro_edit.weights.gguf_quantize import llama_quantize, write_gguf_types
    from mathneuro_edit.weights.gguf_writer import write_gguf

    llama_cpp = _llama_cpp()
    _, _, ckpt = edited
    files = write_gguf_types(ckpt, ["Q8_0", "Q4_K_M"], source="F32")
    assert [p.name for p in files.values()] == ["model-Q8_0.gguf", "model-Q4_K_M.gguf"]
    assert not list(ckpt.glob(".*"))  # the float source written for llama.cpp is gone
    src = write_gguf(ckpt, tmp_path / "src-F32.gguf", "F32")
    assert files["Q4_K_M"].read_bytes() == _llama_cpp_own(llama_cpp, src, tmp_path / "own.gguf", 15)
    two = llama_quantize(src, tmp_path / "two-threads.gguf", "Q4_K_M", how="llama_cpp", nthread=2)
    assert two.read_bytes() == files["Q4_K_M"].read_bytes()  # reproducible whatever the thread count
    q8 = write_gguf(ckpt, tmp_path / "q8.gguf", "Q8_0")
    assert files["Q8_0"].read_bytes() == q8.read_bytes()  # the gguf package's types: written as a single type is


def test_llama_cpp_and_gguf_read_it_back(edited) -> None:
    from mathneuro_edit.weights.gguf_writer import gguf_file_type

    llama_cpp = _llama_cpp()
    _, _, ckpt = edited
    path = ckpt / "model-Q4_K_M.gguf"
    if not path.is_file():
        from mathneuro_edit.weights.gguf_quantize import write_gguf_types

        write_gguf_types(ckpt, ["Q4_K_M"], source="F32")
    assert gguf_file_type(path) == "Q4_K_M"
    types = {t.tensor_type.name for t in gguf.GGUFReader(str(path)).tensors}
    assert "Q4_K" in types and "Q6_K" in types  # Q4_K_M: most matrices Q4_K, some Q6_K
    # logits_all: every position's row of scores is filled (without it only the last one; the others are
    # uninitialized memory); an F32 KV cache, as test_gguf.py's llama.cpp loads
    llm = llama_cpp.Llama(
        model_path=str(path), n_ctx=32, n_threads=1, logits_all=True, verbose=False, seed=0, type_k=0, type_v=0
    )
    llm.eval([1, 5, 9])
    scores = np.array(llm.scores[:3])
    assert np.isfinite(scores).all() and (scores.std(axis=1) > 0).all()


def test_survival_equals_an_independent_count(edited) -> None:
    from mathneuro_edit.weights.gguf_quantize import write_gguf_types
    from mathneuro_edit.weights.gguf_survival import measure_survival

    _llama_cpp()
    base, mask, ckpt = edited
    files = write_gguf_types(ckpt, ["Q4_K_M", "Q4_0"], source="F32")
    found = measure_survival(ckpt, base, mask, files, source="F32")
    assert not list(ckpt.parent.glob(".gguf-survival-*"))  # the base's files were temporary
    for qtype in ("Q4_K_M", "Q4_0"):
        entry = found["files"][f"model-{qtype}.gguf"]
        assert entry["type"] == qtype
        # independently: the base quantized by hand the same way, both dequantized, counted at the mask's entries
        base_q = write_gguf_types(base, [qtype], source="F32")[qtype]
        try:
            got, ref = ({t.name: t for t in gguf.GGUFReader(str(p)).tensors} for p in (files[qtype], base_q))
            for hf, gname in (
                ("model.layers.0.mlp.down_proj.weight", "blk.0.ffn_down.weight"),
                ("model.layers.1.self_attn.o_proj.weight", "blk.1.attn_output.weight"),
            ):
                m = mask[hf].numpy()
                deq = [gguf.quants.dequantize(np.asarray(t[gname].data), t[gname].tensor_type) for t in (got, ref)]
                a, b = (d.reshape(m.shape) for d in deq)
                mine = entry["tensors"][gname]
                assert mine["edited"] == int(m.sum())  # every masked weight (none is 0) changes x1.1
                assert mine["survived"] == int((a[m] != b[m]).sum())
                assert mine["collateral"] == int((a[~m] != b[~m]).sum())
        finally:
            base_q.unlink()
        assert 0 < entry["total"]["survived_share"] <= 1


def test_verify_audits_the_k_quant_and_reports_survival(edited) -> None:
    from mathneuro_edit.weights.audit import verify
    from mathneuro_edit.weights.gguf_quantize import write_gguf_types

    _llama_cpp()
    base, mask, ckpt = edited
    write_gguf_types(ckpt, ["Q4_K_M"], source="F32")
    report = verify(ckpt, base, mask, 1.1, device="cpu")
    assert report.ok, report.summary()
    measured = report.gguf_survival["files"]["model-Q4_K_M.gguf"]["total"]
    assert measured["edited"] == sum(int(mask[n].sum()) for n in mask)  # every edited weight, counted once
    path = ckpt / "model-Q4_K_M.gguf"
    data = bytearray(path.read_bytes())
    t = next(t for t in gguf.GGUFReader(str(path)).tensors if t.name == "blk.0.ffn_up.weight")
    data[int(t.data_offset) + 100] ^= 0xFF  # one byte of one tensor
    path.write_bytes(bytes(data))
    try:
        bad = verify(ckpt, base, mask, 1.1, device="cpu")
        assert any("blk.0.ffn_up.weight: not llama-cpp-python" in m for m in bad.mismatches), bad.mismatches
    finally:
        path.unlink()


def test_a_run_writes_every_type_into_one_gguf_output(tmp_path) -> None:
    """``run --set 'outputs.gguf=[Q8_0, Q4_K_M, Q4_0]'`` on the quickstart (x1.01: a 1% change): the three files in
    checkpoint/, each loaded by llama.cpp; gguf_survival.json; the one line for Q4_0, where most of the edit is
    gone; the GGUF card's table."""
    import json

    from mathneuro_edit.publish.card import card_for_folder
    from tests._gguf_e2e import cli

    llama_cpp = _llama_cpp()
    recipe = Path(__file__).resolve().parents[2] / "recipes" / "quickstart.yaml"
    sets = ["evaluation=null", "outputs.adapter=false", "edit.prune=false", "edit.scale=1.01"]
    sets.append("outputs.gguf=[Q8_0, Q4_K_M, Q4_0]")
    code, out = cli("run", str(recipe), "--out", str(tmp_path / "run"), *[a for s in sets for a in ("--set", s)])
    assert code == 0, out
    assert "model-Q4_0.gguf: most of the edit is gone in Q4_0: " in out
    assert "gone in Q8_0" not in out and "gone in Q4_K_M" not in out
    ckpt = tmp_path / "run" / "checkpoint"
    assert sorted(p.name for p in ckpt.glob("*.gguf")) == ["model-Q4_0.gguf", "model-Q4_K_M.gguf", "model-Q8_0.gguf"]
    for p in ckpt.glob("*.gguf"):
        llama_cpp.Llama(model_path=str(p), n_ctx=32, n_threads=1, verbose=False)
    found = json.loads((ckpt / "gguf_survival.json").read_text())
    assert sorted(found["files"]) == ["model-Q4_0.gguf", "model-Q4_K_M.gguf", "model-Q8_0.gguf"]
    assert found["quantizer"].startswith("llama-cpp-python ") and not list((tmp_path / "run").glob(".gguf-*"))
    card = card_for_folder(ckpt, kind="gguf", repo_id="me/organism-GGUF").content
    assert "| `Organism-1.1M-MathNeuro-Scale1.01-Q4_K_M.gguf` | Q4_K_M |" in card
    assert "**most of the edit is gone in Q4_0: " in card
