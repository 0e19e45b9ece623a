"""The dense families: llama and those that are llama with a convention or two (each family's ``doc`` says which):
Llama, Mistral, Qwen2, Qwen3, OLMo 2, SmolLM3, GPT-2, Phi-3 and Granite.
"""

from __future__ import annotations

from typing import Any

from .common import View
from .family import LLAMA_ROPE_SCALINGS, Family, register_family

__all__ = ["smollm3_refusal", "gpt2_llama_names", "gpt2_refusal", "gpt2_views"]


def smollm3_refusal(cfg: dict[str, Any]) -> str | None:
    """What of a SmolLM3 config llama.cpp's smollm3 cannot run as transformers does (None: nothing)."""
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


def gpt2_llama_names(cfg: dict[str, Any]) -> dict[str, Any]:
    """GPT-2's ``config.json`` with the names :mod:`..gguf_writer` reads (``hidden_size``, ``num_hidden_layers``,
    ...) for its ``n_embd``, ``n_layer``, ``n_head``, ``n_positions``, and its MLP width ``n_inner`` (``None``: 4 x
    ``n_embd``, as transformers builds it).

    Example:
        >>> gpt2_llama_names({"n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 256})["intermediate_size"]
        256
    """
    return {
        **cfg,
        "hidden_size": cfg["n_embd"],
        "num_hidden_layers": cfg["n_layer"],
        "num_attention_heads": cfg["n_head"],
        "max_position_embeddings": cfg["n_positions"],
        "intermediate_size": cfg.get("n_inner") or 4 * int(cfg["n_embd"]),
    }


def gpt2_refusal(cfg: dict[str, Any]) -> str | None:
    """What of a GPT-2 config llama.cpp's gpt2 cannot run as transformers does (None: nothing)."""
    if cfg.get("activation_function", "gelu_new") not in ("gelu_new", "gelu_pytorch_tanh"):
        return (
            f"activation_function {cfg['activation_function']!r}: llama.cpp's GPT2 uses the tanh-approximated "
            "GELU (gelu_new)"
        )
    if cfg.get("scale_attn_by_inverse_layer_idx") or cfg.get("scale_attn_weights") is False:
        return "its attention scale is not 1/sqrt(head_dim) (scale_attn_by_inverse_layer_idx / scale_attn_weights)"
    return None


def gpt2_views(cfg: dict[str, Any], hf_name: str) -> list[tuple[str, str | View]] | None:
    """GPT-2's Conv1D weights, stored ``(in, out)``, as llama.cpp's Linear ``(out, in)`` (its GPT2Model transposes
    them)."""
    if hf_name.endswith((".c_attn.weight", ".c_proj.weight", ".c_fc.weight")):
        return [(hf_name, View(hf_name, transpose=True))]
    return None


def _phi3_rope_dims(cfg: dict[str, Any], head_dim: int) -> int:
    """Phi-3/Phi-4-mini rotate ``partial_rotary_factor`` of each head (llama.cpp's converter: ``int(factor *
    hidden) // heads``); without the key, the whole head."""
    params = cfg.get("rope_parameters") or {}
    factor = cfg.get("partial_rotary_factor", params.get("partial_rotary_factor"))
    if factor is None:
        return head_dim
    return int(float(factor) * int(cfg["hidden_size"])) // int(cfg["num_attention_heads"])


def _add_phi3_keys(writer: Any, cfg: dict[str, Any]) -> None:
    """Phi-3's window (0: none, how llama.cpp tells Phi-4 from other Phi-3)."""
    writer.add_sliding_window(int(cfg.get("sliding_window") or 0))


# Granite's multipliers, under llama.cpp's names (its converter's GraniteModel: *_multiplier -> *_scale)
_GRANITE_KEYS = (
    ("attention_multiplier", "add_attention_scale"),
    ("embedding_multiplier", "add_embedding_scale"),
    ("residual_multiplier", "add_residual_scale"),
    ("logits_scaling", "add_logit_scale"),
)


def _add_granite_keys(writer: Any, cfg: dict[str, Any]) -> None:
    """Granite's multipliers, those its config sets."""
    for key, add in _GRANITE_KEYS:
        if cfg.get(key) is not None:
            getattr(writer, add)(float(cfg[key]))


register_family(
    Family("llama", "LLAMA", permute_qk=True, doc="Llama and SmolLM2 (the permutation: arch `llama`, below)"),
    Family(
        "mistral",
        "LLAMA",
        permute_qk=True,
        doc="Mistral: Llama's tensors and permutation; its `sliding_window` is not written (llama.cpp's `llama` arch "
        "has none): the same as transformers up to that many tokens of context",
    ),
    Family("qwen2", "QWEN2", permute_qk=False, doc="Qwen2: NeoX rotary, transformers' order"),
    Family("qwen3", "QWEN3", permute_qk=False, doc="Qwen3: NeoX rotary, transformers' order; its q/k norms"),
    Family(
        "granite",
        "GRANITE",
        permute_qk=True,
        key_writers=(_add_granite_keys,),
        doc="Granite: Llama's tensors and permutation, plus `granite.attention.scale`, `.embedding_scale`, "
        "`.residual_scale`, `.logit_scale` from its `attention_multiplier`, `embedding_multiplier`, "
        "`residual_multiplier`, `logits_scaling`",
    ),
    Family(
        "olmo2",
        "OLMO2",
        permute_qk=False,
        doc="OLMo 2: NeoX rotary, no permutation; `attn_q_norm`/`attn_k_norm` over the whole projection, "
        "`post_attention_norm`, `post_ffw_norm`",
    ),
    Family(
        "phi3",
        "PHI3",
        permute_qk=False,
        rope_dims=_phi3_rope_dims,
        rope_scalings=(*LLAMA_ROPE_SCALINGS, "longrope"),
        key_writers=(_add_phi3_keys,),
        doc="Phi-3, Phi-4: fused `attn_qkv` and `ffn_up` (gate and up) as transformers stores them, NeoX rotary over "
        "`partial_rotary_factor` of each head (`rope.dimension_count`), `phi3.attention.sliding_window` 0 when the "
        "config has none; longrope (Phi-3 128k, Phi-3.5, Phi-4-mini) as the F32 tensors "
        "`rope_factors_long`/`rope_factors_short` plus `rope.scaling.attn_factor` (transformers' `sqrt(1 + "
        "ln(max/original) / ln(original))` unless the config gives `attention_factor`) and "
        "`rope.scaling.original_context_length`: llama.cpp uses the long factors for the whole context when its "
        "context (padded to 256) exceeds the original one, transformers from that many tokens on, so the two agree "
        "on prompts shorter than the original context in a short one and beyond it in a long one "
        "(`tests/weights/test_gguf_rope.py`)",
    ),
    Family(
        "smollm3",
        "SMOLLM3",
        permute_qk=True,
        refusal_reason=smollm3_refusal,
        doc="SmolLM3: Llama's tensors and q/k permutation; llama.cpp skips the rotary in every 4th layer, the "
        "released `no_rope_layer_interval`, so another `no_rope_layers` pattern or `use_sliding_window` is refused",
    ),
    Family(
        "gpt2",
        "GPT2",
        permute_qk=False,
        refusal_reason=gpt2_refusal,
        llama_names=gpt2_llama_names,
        tensor_views=gpt2_views,
        rotary=False,
        doc="GPT-2: its Conv1D `c_attn`, `c_proj`, `c_fc` weights, stored `(in, out)`, transposed to the Linear "
        "layout llama.cpp reads, `attn_qkv` kept fused, learned positions `position_embd` always F32, LayerNorm with "
        "biases: `attention.layer_norm_epsilon` instead of the RMS key, no rope keys, `feed_forward_length` "
        "`n_inner` or 4 x `n_embd`; refused: an activation other than `gelu_new`, an attention scale other than "
        "1/sqrt(head_dim)",
    ),
)
