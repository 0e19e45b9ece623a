"""Which model families the GGUF export writes, and the precise reason for each one it refuses (config only).

:mod:`.gguf_writer` writes the families of :data:`GGUF_WRITTEN`; for the others llama.cpp has an architecture,
but its conventions (read in llama.cpp's ``convert_hf_to_gguf.py``) are not implemented here, or not yet
verified against llama.cpp itself (llama-cpp-python loads the file, tokenizes like transformers, and its greedy
continuation and logits match transformers' on the same weights). A family is only added to
:data:`GGUF_WRITTEN` with that test. :func:`gguf_refusal` names what is missing, per family, from
``config.json`` alone (no weights read), so ``plan`` and a run's validation say it before any forward pass.
"""

from __future__ import annotations

from typing import Any

__all__ = ["GGUF_WRITTEN", "GGUF_PENDING", "gguf_refusal", "add_family_keys", "rope_dims",
           "tensor_shift"]

# model_type -> (gguf.MODEL_ARCH member, q/k rows permuted to llama.cpp's interleaved rotary)
GGUF_WRITTEN: dict[str, tuple[str, bool]] = {
    "llama": ("LLAMA", True), "mistral": ("LLAMA", True), "qwen2": ("QWEN2", False), "qwen3": ("QWEN3", False),
    # verified by llama.cpp itself (tests/runs/test_families.py): Granite is llama + its multipliers (add_family_keys);
    # OLMo 2 has NeoX rotary (no permutation) and its own post-attention/post-MLP norm tensor names; Phi-3 keeps
    # its fused qkv/gate_up, NeoX rotary over part of each head (rope_dims) and a sliding-window key
    "granite": ("GRANITE", True), "olmo2": ("OLMO2", False), "phi3": ("PHI3", False),
    "gemma2": ("GEMMA2", False),
}

# model_type -> what llama.cpp's converter does for it that this writer does not (yet, verified) do
GGUF_PENDING: dict[str, str] = {
    "gemma3_text": "llama.cpp's gemma3 needs norm weights stored +1, q/k norms, local/global rope bases and "
                   "sliding-window keys",
    "mixtral": "llama.cpp's MoE layout needs the experts stacked as ffn_{gate,up,down}_exps and expert-count keys",
    "qwen2_moe": "llama.cpp's qwen2moe needs the experts stacked as ffn_*_exps plus the shared expert and its gate",
    "qwen3_moe": "llama.cpp's qwen3moe needs the experts stacked as ffn_*_exps and expert-count keys",
    "olmoe": "llama.cpp's olmoe needs the experts stacked as ffn_*_exps and expert-count keys",
    "deepseek_v3": "llama.cpp's deepseek2 needs the MLA tensors, kv_b split and the grouped router's keys",
    "gpt_oss": "llama.cpp's gpt-oss needs the attention sinks, interleaved gate/up experts and MXFP4-aware layout",
    "llama4_text": "llama.cpp's llama4 needs the stacked experts, shared expert, NoPE layer pattern and "
                   "temperature tuning keys",
    "smollm3": "llama.cpp's smollm3 needs its NoPE layer pattern (no_rope_layers)",
    "gpt2": "llama.cpp's gpt2 needs the transposed Conv1D weights split into q/k/v and learned positions",
}


def gguf_refusal(cfg: dict[str, Any]) -> str | None:
    """None when :mod:`.gguf_writer` writes this config's family, else one line: what, why, how to proceed.

    Example:
        >>> gguf_refusal({"model_type": "qwen2"}) is None
        True
        >>> gguf_refusal({"model_type": "mixtral"}).startswith("outputs.gguf: model_type 'mixtral'")
        True
    """
    model_type = cfg.get("model_type")
    if model_type in GGUF_WRITTEN:
        return None
    written = ", ".join(sorted(GGUF_WRITTEN))
    why = GGUF_PENDING.get(str(model_type))
    detail = (f"{why}, not written yet (not verified against llama.cpp)" if why
              else "no GGUF conventions are known to mathneuro-edit for it")
    return (f"outputs.gguf: model_type {model_type!r} is not supported: {detail}; GGUF export supports {written}; "
            "set outputs.gguf: null (the checkpoint holds the edit; llama.cpp's convert_hf_to_gguf.py can convert it)")


# Granite's multipliers, under llama.cpp's names (its converter's GraniteModel: *_multiplier -> *_scale)
_GRANITE_KEYS = (("attention_multiplier", "add_attention_scale"), ("embedding_multiplier", "add_embedding_scale"),
                 ("residual_multiplier", "add_residual_scale"), ("logits_scaling", "add_logit_scale"))


def rope_dims(cfg: dict[str, Any], head_dim: int) -> int:
    """Rotary dimensions per head: Phi-3/Phi-4-mini rotate ``partial_rotary_factor`` of each head (llama.cpp's
    converter: ``int(factor * hidden) // heads``); the others the whole head."""
    params = cfg.get("rope_parameters") or {}
    factor = cfg.get("partial_rotary_factor", params.get("partial_rotary_factor"))
    if cfg.get("model_type") == "phi3" and factor is not None:
        return int(float(factor) * int(cfg["hidden_size"])) // int(cfg["num_attention_heads"])
    return head_dim


def tensor_shift(cfg: dict[str, Any], hf_name: str) -> float:
    """What llama.cpp adds to a tensor's values: Gemma's RMSNorm multiplies by ``1 + w``, llama.cpp by its stored
    weight, so its converter stores ``w + 1`` for every ``*norm.weight``."""
    return 1.0 if cfg.get("model_type") == "gemma2" and hf_name.endswith("norm.weight") else 0.0


def add_family_keys(writer: Any, cfg: dict[str, Any]) -> None:
    """The hyperparameters a family has beyond the llama set that :mod:`.gguf_writer` writes for all."""
    if cfg.get("model_type") == "gemma2":
        head_dim = int(cfg.get("head_dim") or int(cfg["hidden_size"]) // int(cfg["num_attention_heads"]))
        if head_dim == int(cfg["hidden_size"]) // int(cfg["num_attention_heads"]):  # else the writer adds them
            writer.add_key_length(head_dim)
            writer.add_value_length(head_dim)
        writer.add_attn_logit_softcapping(float(cfg["attn_logit_softcapping"]))
        writer.add_final_logit_softcapping(float(cfg["final_logit_softcapping"]))
        writer.add_sliding_window(int(cfg["sliding_window"]))
    if cfg.get("model_type") == "phi3":  # 0: no sliding window (how llama.cpp tells Phi-4 from other Phi-3)
        writer.add_sliding_window(int(cfg.get("sliding_window") or 0))
    if cfg.get("model_type") == "granite":
        for key, add in _GRANITE_KEYS:
            if cfg.get(key) is not None:
                getattr(writer, add)(float(cfg[key]))
