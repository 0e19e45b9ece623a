"""The registry's lookups from ``config.json`` alone: whether the GGUF export writes a config's family
(:func:`gguf_refusal`: the one line ``plan`` and a run's validation print before any weight is read), what llama.cpp
adds to a tensor (:func:`tensor_shift`), and the written families (:data:`GGUF_WRITTEN`).

Importing this module imports every family module, each registering its families; the families not written are
in :mod:`.table`.
"""

from __future__ import annotations

from typing import Any

# imported for their registrations: each fills FAMILIES with its families (a new family module is imported here)
from . import deepseek, dense, gemma, gpt_oss, llama4, moe  # noqa: F401
from .family import FAMILIES, family_for
from .table import GGUF_PENDING, NO_LLAMA_CPP

__all__ = ["GGUF_WRITTEN", "gguf_refusal", "tensor_shift"]

# model_type -> (gguf.MODEL_ARCH member, q/k rows permuted to llama.cpp's interleaved rotary): what the export writes
GGUF_WRITTEN: dict[str, tuple[str, bool]] = {t: (f.arch, f.permute_qk) for t, f in FAMILIES.items()}


def gguf_refusal(cfg: dict[str, Any]) -> str | None:
    """None when :mod:`..gguf_writer` writes this config's family, else one line: what, why, how to proceed.

    Example:
        >>> gguf_refusal({"model_type": "qwen2"}) is None
        True
        >>> gguf_refusal({"model_type": "jetmoe"}).startswith("outputs.gguf: model_type 'jetmoe' has no GGUF")
        True
        >>> gguf_refusal({"model_type": "qwen3_moe", "norm_topk_prob": False})[:62]
        'outputs.gguf: this qwen3_moe config cannot be run by llama.cpp'
    """
    family = family_for(cfg)
    if family is not None:
        return family.refusal(cfg)
    model_type = cfg.get("model_type")
    if model_type in NO_LLAMA_CPP:
        return (
            f"outputs.gguf: model_type {model_type!r} has no GGUF: {NO_LLAMA_CPP[model_type]}; set outputs.gguf: "
            "null (the checkpoint holds the edit)"
        )
    written = ", ".join(sorted(FAMILIES))
    detail = "no GGUF conventions are known to mathneuro-edit for it"
    if why := GGUF_PENDING.get(str(model_type)):
        detail = f"{why}, not written yet (not verified against llama.cpp)"
    return (
        f"outputs.gguf: model_type {model_type!r} is not supported: {detail}; GGUF export supports {written}; "
        "set outputs.gguf: null (the checkpoint holds the edit; llama.cpp's convert_hf_to_gguf.py can convert it)"
    )


def tensor_shift(cfg: dict[str, Any], hf_name: str) -> float:
    """What llama.cpp adds to a checkpoint tensor's values in this config's family (Gemma's norms: 1), else 0.

    Example:
        >>> tensor_shift({"model_type": "gemma2"}, "model.norm.weight"), tensor_shift({"model_type": "llama"}, "model.norm.weight")
        (1.0, 0.0)
    """
    family = family_for(cfg)
    return family.tensor_shift(hf_name) if family is not None else 0.0
