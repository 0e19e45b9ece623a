"""Gemma 2 and Gemma 3 (text): norms stored ``w + 1`` (their families' ``norm_shift``), their keys, and what
llama.cpp's gemma3 computes from fixed rules instead of reading (the query scale, no attention soft-capping, rope
scaling on the global layers only), refused when a config differs (:func:`gemma3_refusal`).
"""

from __future__ import annotations

from typing import Any

from .common import SLIDING, layer_types
from .family import Family, register_family

__all__ = ["rope_by_layer_type", "gemma3_refusal"]

# Gemma 3's refusal line: its config is not written (llama.cpp's gemma3 fixes what transformers reads)
_NOT_WRITTEN = (
    "outputs.gguf: this {model_type} config is not written: {why}; set outputs.gguf: null (the checkpoint holds the "
    "edit)"
)


def rope_by_layer_type(cfg: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Gemma 3's rope per layer type: ``{"full_attention": {...}, "sliding_attention": {...}}``, each with
    ``rope_type`` and ``rope_theta``, from transformers 5's ``rope_parameters`` or transformers 4's ``rope_theta``,
    ``rope_local_base_freq`` and ``rope_scaling`` (which applied to the global layers only), with its defaults.

    Example:
        >>> rope_by_layer_type({"rope_theta": 1e6, "rope_scaling": {"type": "linear", "factor": 8.0}})["full_attention"]
        {'type': 'linear', 'factor': 8.0, 'rope_theta': 1000000.0, 'rope_type': 'linear'}
    """
    params = cfg.get("rope_parameters") or {}
    keyed = "full_attention" in params or SLIDING in params
    full = dict((params.get("full_attention") or {}) if keyed else (cfg.get("rope_scaling") or params))
    local = dict((params.get(SLIDING) or {}) if keyed else {})
    full.setdefault("rope_theta", cfg.get("rope_theta") or 1_000_000.0)  # transformers' Gemma 3 defaults
    local.setdefault("rope_theta", cfg.get("rope_local_base_freq") or 10_000.0)
    for p in (full, local):
        p["rope_theta"] = float(p["rope_theta"])
        p["rope_type"] = str(p.get("rope_type", p.get("type", "default")))
    return {"full_attention": full, SLIDING: local}


def gemma3_refusal(cfg: dict[str, Any]) -> str | None:
    """What of a Gemma 3 (text) config llama.cpp's gemma3 (src/models/gemma3.cpp) cannot represent, in words, or
    None: llama.cpp computes what transformers does.

    Example:
        >>> gemma3_refusal({"hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 3, "head_dim": 32,
        ...                 "query_pre_attn_scalar": 32, "attn_logit_softcapping": 50.0})
        "attn_logit_softcapping: llama.cpp's gemma3 has no attention soft-capping"
    """
    heads = int(cfg["num_attention_heads"])
    head_dim = int(cfg.get("head_dim") or int(cfg["hidden_size"]) // heads)
    # llama.cpp reads no attention scale for gemma3: 1/sqrt(head_dim), or 1/sqrt(hidden/heads) for 62 layers (27B)
    expect = int(cfg["hidden_size"]) // heads if int(cfg["num_hidden_layers"]) == 62 else head_dim
    scalar = cfg.get("query_pre_attn_scalar", 256)
    if float(scalar) != float(expect):
        return (
            f"query_pre_attn_scalar {scalar}: llama.cpp's gemma3 scales queries by 1/sqrt({expect}) "
            f"(head_dim, or hidden/heads for 62 layers) and reads no attention scale"
        )
    if cfg.get("attn_logit_softcapping") is not None:
        return "attn_logit_softcapping: llama.cpp's gemma3 has no attention soft-capping"
    if cfg.get("use_bidirectional_attention"):
        return "use_bidirectional_attention (EmbeddingGemma): llama.cpp's gemma3 is causal"
    if cfg.get("hidden_activation", "gelu_pytorch_tanh") != "gelu_pytorch_tanh":
        return (
            f"hidden_activation {cfg['hidden_activation']!r}: llama.cpp's gemma3 uses the tanh-approximated "
            "GELU (gelu_pytorch_tanh)"
        )
    rope = rope_by_layer_type(cfg)
    full, local = rope["full_attention"]["rope_type"], rope[SLIDING]["rope_type"]
    # llama.cpp's gemma3 gives the sliding layers their own base but never a scaling: scale 1, no YaRN
    if full not in ("default", "linear") or local != "default":
        return (
            f"rope {full!r} on the global and {local!r} on the sliding layers: llama.cpp's gemma3 applies only "
            "linear scaling, and only to the global layers"
        )
    if SLIDING in layer_types(cfg) and not int(cfg.get("sliding_window") or 0):
        return "sliding layers but no sliding_window"
    return None


def _add_gemma3_keys(writer: Any, cfg: dict[str, Any]) -> None:
    """Gemma 3's keys beyond Gemma 2's head length (the family's ``doc`` says each)."""
    kinds = layer_types(cfg)
    if SLIDING in kinds:  # no sliding_window key: llama.cpp runs every layer as a global one, as transformers does
        writer.add_sliding_window(int(cfg["sliding_window"]))
        writer.add_sliding_window_pattern([k == SLIDING for k in kinds])
        writer.add_rope_freq_base_swa(rope_by_layer_type(cfg)[SLIDING]["rope_theta"])
    if cfg.get("final_logit_softcapping") is not None:
        writer.add_final_logit_softcapping(float(cfg["final_logit_softcapping"]))


def _add_head_length(writer: Any, cfg: dict[str, Any]) -> None:
    """Gemma's key/value length (``head_dim``), written even when it is hidden/heads (else the writer adds it)."""
    head_dim = int(cfg.get("head_dim") or int(cfg["hidden_size"]) // int(cfg["num_attention_heads"]))
    if head_dim == int(cfg["hidden_size"]) // int(cfg["num_attention_heads"]):
        writer.add_key_length(head_dim)
        writer.add_value_length(head_dim)


def _add_gemma2_keys(writer: Any, cfg: dict[str, Any]) -> None:
    """Gemma 2's soft-capping (attention and final) and window."""
    writer.add_attn_logit_softcapping(float(cfg["attn_logit_softcapping"]))
    writer.add_final_logit_softcapping(float(cfg["final_logit_softcapping"]))
    writer.add_sliding_window(int(cfg["sliding_window"]))


register_family(
    Family(
        "gemma2",
        "GEMMA2",
        permute_qk=False,
        norm_shift=1.0,  # Gemma's RMSNorm multiplies by 1 + w, llama.cpp's by its weight: the converter stores w + 1
        key_writers=(_add_head_length, _add_gemma2_keys),
        doc="Gemma 2: every `*norm.weight` stored as `w + 1`, as llama.cpp's converter does: Gemma's RMSNorm "
        "multiplies by `1 + w`; `attn_logit_softcapping`, `final_logit_softcapping`, `attention.sliding_window`, "
        "key/value length = `head_dim`; llama.cpp scales the embeddings by `sqrt(hidden)` itself",
    ),
    Family(
        "gemma3_text",
        "GEMMA3",
        permute_qk=False,
        refusal_reason=gemma3_refusal,
        refusal_template=_NOT_WRITTEN,
        norm_shift=1.0,
        key_writers=(_add_head_length, _add_gemma3_keys),
        doc="Gemma 3 text: Gemma 2's `w + 1` norms, `attn_q_norm`/`attn_k_norm` included, and key/value length; "
        "`attention.sliding_window`, `attention.sliding_window_pattern` as one bool per layer from `layer_types` "
        "(true: sliding; llama.cpp's default is every 6th layer global), `rope.freq_base` the global layers' "
        "`rope_theta`, `rope.freq_base_swa` the sliding layers'; a `linear` scaling of the global layers as "
        "`rope.scaling.*` (llama.cpp applies it to the non-sliding layers only, as transformers does); "
        "`final_logit_softcapping` when set. Refused from `config.json`, since llama.cpp's gemma3 fixes them: a "
        "`query_pre_attn_scalar` other than `head_dim` (hidden/heads at 62 layers), `attn_logit_softcapping`, "
        "bidirectional attention, an activation other than `gelu_pytorch_tanh`, and any rope scaling but linear on "
        "the global layers",
    ),
)
