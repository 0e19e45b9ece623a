"""llama.cpp against transformers on the same prompt: the measure the GGUF tests hold every written family to."""

from __future__ import annotations

import numpy as np
import torch


def logit_gap(llm, model, ids: list[int]) -> float:
    """Largest |llama.cpp logit - transformers logit| over the prompt's positions, relative to the largest
    transformers logit (at least 1): the families test asks < 1e-3; a refused config shows it would exceed it."""
    llm.reset()
    llm.eval(ids)
    cpp = torch.tensor(np.array(llm.scores[: len(ids)]))
    with torch.no_grad():
        hf = model(torch.tensor([ids])).logits[0]
    return float((cpp - hf).abs().max()) / max(1.0, float(hf.abs().max()))


def family_base(folder, name: str, reweigh=None, **overrides):
    """The family matrix's tiny base of ``name`` (docs/families.md) with config ``overrides``, saved in ``folder``;
    ``reweigh(tensor_name, array) -> array or None`` rewrites its weights (None: unchanged), e.g. larger matrices
    so that every family-specific tensor moves the logits llama.cpp is compared on."""
    import dataclasses

    from safetensors.numpy import load_file, save_file

    from tests._families import save_family_base
    from tests._family_shapes import family_shape

    shape = family_shape(name)
    if overrides:
        shape = dataclasses.replace(shape, kwargs={**shape.kwargs, **overrides})
    base = save_family_base(folder, shape)
    if reweigh is not None:
        path = base / "model.safetensors"
        weights = load_file(str(path))
        for key, value in weights.items():
            new = reweigh(key, value)
            if new is not None:
                weights[key] = np.asarray(new, dtype=np.float32)
        save_file(weights, str(path), metadata={"format": "pt"})
    return base


def gguf_tensors(path) -> dict:
    """``{name: tensor}`` of a GGUF file, read with gguf's own reader."""
    import gguf

    return {t.name: t for t in gguf.GGUFReader(str(path)).tensors}


def llama_cpp_or_skip():
    """``llama_cpp``, else a skip that says how to get it (a failure where ``MATHNEURO_EDIT_REQUIRE_LLAMA_CPP=1``:
    CI's llama.cpp tier must not pass by skipping)."""
    import os

    import pytest

    try:
        import llama_cpp
    except ImportError:
        if os.environ.get("MATHNEURO_EDIT_REQUIRE_LLAMA_CPP") == "1":
            pytest.fail(
                "MATHNEURO_EDIT_REQUIRE_LLAMA_CPP=1 but llama_cpp does not import: pip install -e '.[gguf-test]'"
            )
        pytest.skip("llama.cpp: pip install -e '.[gguf-test]' (builds llama-cpp-python from source)")
    return llama_cpp
