"""plan's estimate of the edit's survival (the gguf package quantizing the edited matrices in memory) equals what
the run measures from the written files (weights/gguf_survival.py), for the types the gguf package writes."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("gguf")


def test_the_estimate_equals_the_measurement(tmp_path) -> None:
    import transformers as tf
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mathneuro_edit.engine.apply import scale_masked
    from mathneuro_edit.engine.mask import Mask
    from mathneuro_edit.organism import organism_path
    from mathneuro_edit.weights.checkpoint_writer import export_checkpoint
    from mathneuro_edit.weights.gguf_quantize import write_gguf_types
    from mathneuro_edit.weights.gguf_survival import estimate_survival, measure_survival

    tok = AutoTokenizer.from_pretrained(organism_path())
    cfg = tf.LlamaConfig(
        vocab_size=len(tok),
        hidden_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=128,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg).eval()
    model.save_pretrained(tmp_path / "base")
    tok.save_pretrained(tmp_path / "base")
    g = torch.Generator().manual_seed(2)
    layers = {n: p for n, p in model.named_parameters() if p.ndim == 2 and "embed" not in n}
    mask = Mask({n: torch.rand(p.shape, generator=g) < 0.05 for n, p in layers.items()})
    ckpt = export_checkpoint(tmp_path / "base", mask, 1.05, tmp_path / "ckpt")
    files = write_gguf_types(ckpt, ["Q4_0"], source="F32")
    measured = measure_survival(ckpt, tmp_path / "base", mask, files, source="F32")["files"]["model-Q4_0.gguf"]
    with torch.no_grad():
        triples = [(p.numpy(), scale_masked(p.detach(), mask[n], 1.05).numpy(), "Q4_0") for n, p in layers.items()]
    estimated = estimate_survival(triples)
    for key in ("edited", "survived", "collateral"):
        assert estimated[key] == measured["total"][key], key
    assert estimated["delivered"] == pytest.approx(measured["total"]["delivered"], rel=1e-9)
    assert 0 < measured["total"]["survived"] < measured["total"]["edited"]  # x1.05 in 4 bits: some edits are lost
