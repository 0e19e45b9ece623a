"""The dense families that are llama with a convention or two: SmolLM3 (NoPE every 4th layer, hard-coded by
llama.cpp), GPT-2 (other config names, Conv1D weights transposed, no rotary), Phi-3 (its window key) and Granite
(its multipliers).
"""

from __future__ import annotations

from typing import Any

from .common import View

__all__ = ["smollm3_refusal", "llama_names", "has_rotary", "gpt2_refusal", "gpt2_views", "add_keys"]


def smollm3_refusal(cfg: dict[str, Any]) -> str | None:
    """What of a SmolLM3 config llama.cpp's smollm3 cannot run as transformers does (None: nothing)."""
    if cfg.get("model_type") != "smollm3":
        return None
    n = int(cfg["num_hidden_layers"])
    every_4th = [int((i + 1) % 4 != 0) for i in range(n)]  # transformers' no_rope_layers: 1 = rotary, 0 = NoPE
    got = [int(x) for x in (cfg.get("no_rope_layers") or every_4th)]
    if got != every_4th:
        nope = [i for i, x in enumerate(got) if not x]
        return (
            f"its NoPE layers are {nope[:8]} but llama.cpp's SMOLLM3 skips the rotary in every 4th layer "
            f"({[i for i, x in enumerate(every_4th) if not x][:8]})"
        )
    if cfg.get("use_sliding_window"):
        return "use_sliding_window is set but llama.cpp's SMOLLM3 attends over the whole context"
    return None


def llama_names(cfg: dict[str, Any]) -> dict[str, Any]:
    """``config.json`` with the names :mod:`.gguf_writer` reads (``hidden_size``, ``num_hidden_layers``, ...) for a
    family that spells them otherwise: GPT-2's ``n_embd``, ``n_layer``, ``n_head``, ``n_positions``, and its MLP
    width ``n_inner`` (``None``: 4 x ``n_embd``, as transformers builds it).

    Example:
        >>> llama_names({"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 256})["intermediate_size"]
        256
    """
    if cfg.get("model_type") != "gpt2":
        return cfg
    return {
        **cfg,
        "hidden_size": cfg["n_embd"],
        "num_hidden_layers": cfg["n_layer"],
        "num_attention_heads": cfg["n_head"],
        "max_position_embeddings": cfg["n_positions"],
        "intermediate_size": cfg.get("n_inner") or 4 * int(cfg["n_embd"]),
    }


def has_rotary(cfg: dict[str, Any]) -> bool:
    """Whether the family rotates q/k (every written family but GPT-2, whose positions are learned)."""
    return cfg.get("model_type") != "gpt2"


def gpt2_refusal(cfg: dict[str, Any]) -> str | None:
    """What of a GPT-2 config llama.cpp's gpt2 cannot run as transformers does (None: nothing)."""
    if cfg.get("model_type") != "gpt2":
        return None
    if cfg.get("activation_function", "gelu_new") not in ("gelu_new", "gelu_pytorch_tanh"):
        return (
            f"activation_function {cfg['activation_function']!r}: llama.cpp's GPT2 uses the tanh-approximated "
            "GELU (gelu_new)"
        )
    if cfg.get("scale_attn_by_inverse_layer_idx") or cfg.get("scale_attn_weights") is False:
        return "its attention scale is not 1/sqrt(head_dim) (scale_attn_by_inverse_layer_idx / scale_attn_weights)"
    return None


# Granite's multipliers, under llama.cpp's names (its converter's GraniteModel: *_multiplier -> *_scale)
_GRANITE_KEYS = (
    ("attention_multiplier", "add_attention_scale"),
    ("embedding_multiplier", "add_embedding_scale"),
    ("residual_multiplier", "add_residual_scale"),
    ("logits_scaling", "add_logit_scale"),
)


def gpt2_views(cfg: dict[str, Any], hf_name: str) -> list[tuple[str, str | View]] | None:
    """GPT-2's Conv1D weights, stored ``(in, out)``, as llama.cpp's Linear ``(out, in)`` (its GPT2Model transposes
    them)."""
    if hf_name.endswith((".c_attn.weight", ".c_proj.weight", ".c_fc.weight")):
        return [(hf_name, View(hf_name, transpose=True))]
    return None


def add_keys(writer: Any, cfg: dict[str, Any]) -> None:
    """Phi-3's window (0: none, how llama.cpp tells Phi-4 from other Phi-3) and Granite's multipliers."""
    if cfg.get("model_type") == "phi3":
        writer.add_sliding_window(int(cfg.get("sliding_window") or 0))
    if cfg.get("model_type") == "granite":
        for key, add in _GRANITE_KEYS:
            if cfg.get(key) is not None:
                getattr(writer, add)(float(cfg[key]))
