"""Per family, from ``config.json`` alone: whether the GGUF export writes it, and what the writer asks of a family.

:func:`gguf_refusal` is the one line ``plan`` and a run's validation print before any weight is read (None: the
family is written); :func:`add_family_keys`, :func:`tensor_views`, :func:`rope_dims` and
:func:`feed_forward_length` are what :mod:`..gguf_writer` asks each family. Each family's own rules live in its
module (:mod:`.moe`, :mod:`.gemma`, :mod:`.gpt_oss`, :mod:`.deepseek`, :mod:`.llama4`, :mod:`.dense`); the
tables in :mod:`.table`.
"""

from __future__ import annotations

from typing import Any

from . import deepseek, dense, gemma, gpt_oss, llama4, moe
from .common import View
from .table import GGUF_PENDING, GGUF_WRITTEN, NO_LLAMA_CPP

__all__ = ["gguf_refusal", "add_family_keys", "tensor_views", "rope_dims", "feed_forward_length"]


def _family_refusal(cfg: dict[str, Any]) -> str | None:
    """What of a written family's config llama.cpp would run otherwise than transformers (None: nothing)."""
    model_type = cfg.get("model_type")
    if model_type in moe.MOE_NORM_TOPK:
        return moe.refusal(cfg)
    rules = {
        "smollm3": dense.smollm3_refusal,
        "gpt2": dense.gpt2_refusal,
        "gpt_oss": gpt_oss.refusal,
        "deepseek_v3": deepseek.refusal,
        "llama4_text": llama4.refusal,
    }
    return rules[model_type](cfg) if model_type in rules else None


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
    model_type = cfg.get("model_type")
    if model_type == "gemma3_text":
        return gemma.gemma3_refusal(cfg)
    if model_type in GGUF_WRITTEN:
        why = _family_refusal(cfg)
        return (
            None
            if why is None
            else (
                f"outputs.gguf: this {model_type} config cannot be run by llama.cpp as "
                f"transformers runs it: {why}; set outputs.gguf: null (the checkpoint "
                "holds the edit)"
            )
        )
    if model_type in NO_LLAMA_CPP:
        return (
            f"outputs.gguf: model_type {model_type!r} has no GGUF: {NO_LLAMA_CPP[model_type]}; set outputs.gguf: "
            "null (the checkpoint holds the edit)"
        )
    written = ", ".join(sorted(GGUF_WRITTEN))
    why = GGUF_PENDING.get(str(model_type))
    detail = (
        f"{why}, not written yet (not verified against llama.cpp)"
        if why
        else "no GGUF conventions are known to mathneuro-edit for it"
    )
    return (
        f"outputs.gguf: model_type {model_type!r} is not supported: {detail}; GGUF export supports {written}; "
        "set outputs.gguf: null (the checkpoint holds the edit; llama.cpp's convert_hf_to_gguf.py can convert it)"
    )


def tensor_views(cfg: dict[str, Any], hf_name: str) -> list[tuple[str, str | View]] | None:
    """How a family's checkpoint tensor becomes llama.cpp's tensors, when not one to one: ``[(HF-style name that
    gguf's name map knows, source)]``, the source a checkpoint name or a :class:`~.common.View`; None: the tensor
    as it is (GPT-2, gpt-oss, DeepSeek-V3 and Llama 4 have such tensors).

    Example:
        >>> [n.split(".")[-2] for n, _ in tensor_views({"model_type": "gpt_oss"}, "m.experts.gate_up_proj")]
        ['gate_proj', 'up_proj']
    """
    views = {
        "gpt2": dense.gpt2_views,
        "gpt_oss": gpt_oss.views,
        "deepseek_v3": deepseek.views,
        "llama4_text": llama4.views,
    }.get(str(cfg.get("model_type")))
    return views(cfg, hf_name) if views else None


def rope_dims(cfg: dict[str, Any], head_dim: int) -> int:
    """Rotary dimensions per head: DeepSeek's ``qk_rope_head_dim``; Phi-3/Phi-4-mini rotate
    ``partial_rotary_factor`` of each head (llama.cpp's converter: ``int(factor * hidden) // heads``); the others
    the whole head."""
    if cfg.get("model_type") in deepseek.MLA:  # only the qk_rope_head_dim part of each query/key rotates
        return int(cfg["qk_rope_head_dim"])
    params = cfg.get("rope_parameters") or {}
    factor = cfg.get("partial_rotary_factor", params.get("partial_rotary_factor"))
    if cfg.get("model_type") == "phi3" and factor is not None:
        return int(float(factor) * int(cfg["hidden_size"])) // int(cfg["num_attention_heads"])
    return head_dim


def feed_forward_length(cfg: dict[str, Any]) -> int:
    """The dense MLP's width (``feed_forward_length``): ``intermediate_size``, Llama 4's ``intermediate_size_mlp``."""
    if cfg.get("model_type") == "llama4_text":
        return llama4.feed_forward_length(cfg)
    return int(cfg["intermediate_size"])


def add_family_keys(writer: Any, cfg: dict[str, Any]) -> None:
    """The hyperparameters a family has beyond the llama set that :mod:`..gguf_writer` writes for all (in a fixed
    order: the same config always gives the same file)."""
    model_type = cfg.get("model_type")
    gemma.add_keys(writer, cfg)
    if model_type == "phi3":
        dense.add_keys(writer, cfg)
    moe.add_keys(writer, cfg)
    if model_type == "llama4_text":
        llama4.add_keys(writer, cfg)
    if model_type == "deepseek_v3":
        deepseek.add_keys(writer, cfg)
    if model_type == "gpt_oss":
        gpt_oss.add_keys(writer, cfg)
    if model_type == "granite":
        dense.add_keys(writer, cfg)
