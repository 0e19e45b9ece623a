"""DeepSeek-V3 for llama.cpp's deepseek2, which runs MLA absorbed: :func:`views` splits each ``kv_b_proj`` per head
into ``k_b`` (transposed) and ``v_b`` (a :class:`~.common.View` with ``heads``), and :func:`add_keys` writes MLA
as one KV head of ``kv_lora + rope`` keys (:data:`MLA`: the writer leaves its own KV head count and lengths to
these), the real head lengths as ``*_mla``, the leading dense layers and the router (sigmoid, selection bias,
groups, normalization, routed scaling). transformers' interleaved rotary (``rope_interleave``) is llama.cpp's:
no permutation. What llama.cpp's deepseek2 hard-codes (silu, no attention biases, interleaved rotary, the
low-rank q, its Lite layer counts, YaRN with ``mscale == mscale_all_dim``) is refused otherwise (:func:`refusal`).
"""

from __future__ import annotations

from typing import Any

from .common import View
from .rope import rope_scaling

__all__ = ["MLA", "refusal", "views", "add_keys"]


# model_types whose attention is DeepSeek's MLA: llama.cpp's own head count and lengths (add_family_keys), not
# the writer's num_key_value_heads / head_dim
MLA = ("deepseek_v3",)


def refusal(cfg: dict[str, Any]) -> str | None:
    """What of a DeepSeek-V3 config llama.cpp's deepseek2 (src/models/deepseek2.cpp) cannot run as transformers
    does (None: nothing)."""
    if cfg.get("model_type") != "deepseek_v3":
        return None
    if cfg.get("hidden_act", "silu") != "silu":
        return f"hidden_act {cfg['hidden_act']!r}: llama.cpp's DEEPSEEK2 hard-codes silu in every MLP and expert"
    if cfg.get("attention_bias"):
        return "attention_bias is set but llama.cpp's DEEPSEEK2 has no attention biases"
    if not cfg.get("rope_interleave", True):
        return (
            "rope_interleave is false (rotate-half rotary) but llama.cpp's DEEPSEEK2 rotates interleaved pairs "
            "(the released weights' order)"
        )
    if not cfg.get("q_lora_rank"):
        return "q_lora_rank is null (a full q_proj): only the low-rank q (q_a/q_b) is written for DEEPSEEK2"
    n, vocab = int(cfg["num_hidden_layers"]), int(cfg.get("vocab_size") or 0)
    if n in (26, 27) or (n == 48 and vocab == 128256):
        return (
            f"{n} layers (vocab {vocab}): llama.cpp's DEEPSEEK2 takes a 26/27-layer model (48 with vocab 128256) "
            "for a Lite one without q_lora_rank and would not load its q_a/q_b"
        )
    kind, params = rope_scaling(cfg)
    if kind not in ("default", "yarn"):
        return f"rope {kind!r}: only default and YaRN rope are written for deepseek_v3 (verified against llama.cpp)"
    if kind == "yarn":
        m, mad = params.get("mscale"), params.get("mscale_all_dim")
        # llama.cpp scales q.k by mscale(factor, mscale_all_dim)^2 and the rotary by 1 (its mscale := mscale_all_dim);
        # transformers scales the rotary by mscale(factor, mscale) / mscale(factor, mscale_all_dim)
        if not mad or not m or float(m) != float(mad) or params.get("attention_factor") not in (None, 1, 1.0):
            return (
                f"its YaRN has mscale {m} and mscale_all_dim {mad} (attention_factor "
                f"{params.get('attention_factor')}) but llama.cpp's DEEPSEEK2 assumes mscale == mscale_all_dim "
                "(released: 1.0 and 1.0) and no attention_factor"
            )
    return None


def views(cfg: dict[str, Any], hf_name: str) -> list[tuple[str, str | View]] | None:
    """``kv_b_proj`` split per head into ``k_b`` (the key rows, transposed) and ``v_b``; the router's selection bias
    under the name gguf's map knows."""
    stem, _, last = hf_name.rpartition(".")
    if hf_name.endswith("self_attn.kv_b_proj.weight"):
        heads, nope = int(cfg["num_attention_heads"]), int(cfg["qk_nope_head_dim"])
        attn = stem.rpartition(".")[0]
        return [
            (f"{attn}.k_b_proj.weight", View(hf_name, 0, 1, True, heads, nope)),
            (f"{attn}.v_b_proj.weight", View(hf_name, nope, heads=heads)),
        ]
    if last == "e_score_correction_bias":
        return [(f"{stem}.e_score_correction.bias", hf_name)]
    return None


def add_keys(writer: Any, cfg: dict[str, Any]) -> None:
    """llama.cpp's deepseek2 keys (its converter's DeepseekV2Model.set_gguf_parameters): MLA as MQA of
    ``kv_lora + rope`` keys and ``kv_lora`` values, the real head lengths as ``*_mla``, the leading dense layers,
    the shared experts, the router (sigmoid, selection bias, groups, normalization, routed scaling) and YaRN's
    mscale_all_dim (as llama.cpp's converter writes it: times 0.1)."""
    import gguf

    kv, rope = int(cfg["kv_lora_rank"]), int(cfg["qk_rope_head_dim"])
    writer.add_leading_dense_block_count(int(cfg.get("first_k_dense_replace") or 0))
    writer.add_q_lora_rank(int(cfg["q_lora_rank"]))
    writer.add_kv_lora_rank(kv)
    writer.add_key_length(kv + rope)
    writer.add_value_length(kv)
    writer.add_key_length_mla(int(cfg["qk_nope_head_dim"]) + rope)
    writer.add_value_length_mla(int(cfg["v_head_dim"]))
    writer.add_expert_shared_count(int(cfg.get("n_shared_experts") or 0))
    writer.add_expert_weights_scale(float(cfg.get("routed_scaling_factor", 1.0)))
    writer.add_expert_weights_norm(bool(cfg.get("norm_topk_prob", False)))
    writer.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)  # transformers' DeepseekV3TopkRouter
    groups, used = int(cfg.get("n_group") or 1), int(cfg.get("topk_group") or 1)
    if 1 < groups and used < groups:  # else every group is kept: no grouping (llama.cpp asserts used < groups)
        writer.add_expert_group_count(groups)
        writer.add_expert_group_used_count(used)
    kind, params = rope_scaling(cfg)
    if kind == "yarn" and params.get("mscale_all_dim"):
        writer.add_rope_scaling_yarn_log_mul(0.1 * float(params["mscale_all_dim"]))
