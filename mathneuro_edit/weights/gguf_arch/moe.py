"""The stacked-expert MoEs (Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE): what llama.cpp hard-codes per architecture, and
the expert keys every MoE family writes. The experts themselves are stacked by :mod:`..gguf_writer`.
"""

from __future__ import annotations

from typing import Any

from .common import expert_count
from .table import GGUF_WRITTEN

__all__ = ["MOE_NORM_TOPK", "refusal", "add_keys"]


# MoE families: whether llama.cpp renormalizes the top-k router weights. It hard-codes this per architecture
# (src/models/{llama,qwen2moe,qwen3moe,olmoe}.cpp), so a config that says otherwise would run differently there.
# Mixtral has no key: transformers always renormalizes, as llama.cpp's llama does.
MOE_NORM_TOPK: dict[str, bool] = {"mixtral": True, "qwen2_moe": False, "qwen3_moe": True, "olmoe": False}


def refusal(cfg: dict[str, Any]) -> str | None:
    """What of an MoE config llama.cpp's architecture cannot run as transformers does (None: nothing)."""
    model_type = str(cfg.get("model_type"))
    if model_type not in MOE_NORM_TOPK:
        return None
    if model_type != "mixtral" and bool(cfg.get("norm_topk_prob", False)) != MOE_NORM_TOPK[model_type]:
        return (
            f"norm_topk_prob is {cfg.get('norm_topk_prob', False)!r} but llama.cpp's {GGUF_WRITTEN[model_type][0]} "
            f"always {'renormalizes' if MOE_NORM_TOPK[model_type] else 'keeps'} the top-k router weights"
        )
    if cfg.get("mlp_only_layers") or int(cfg.get("decoder_sparse_step") or 1) != 1:
        return (
            "some layers have a dense MLP (mlp_only_layers / decoder_sparse_step) but llama.cpp's "
            f"{GGUF_WRITTEN[model_type][0]} has experts in every layer"
        )
    if model_type == "qwen2_moe" and not cfg.get("shared_expert_intermediate_size"):
        return "there is no shared expert (shared_expert_intermediate_size) but llama.cpp's QWEN2MOE needs one"
    return None


def add_keys(writer: Any, cfg: dict[str, Any]) -> None:
    """llama.cpp's expert keys (its converter's TextModel / Qwen2MoeModel): the routed experts' count and how many a
    token uses, the Qwen MoEs' expert and shared-expert widths."""
    if not expert_count(cfg):
        return
    writer.add_expert_count(expert_count(cfg))
    writer.add_expert_used_count(int(cfg["num_experts_per_tok"]))
    if cfg.get("moe_intermediate_size"):  # the Qwen MoEs: experts narrower than intermediate_size
        writer.add_expert_feed_forward_length(int(cfg["moe_intermediate_size"]))
    if cfg.get("shared_expert_intermediate_size"):
        writer.add_expert_shared_feed_forward_length(int(cfg["shared_expert_intermediate_size"]))
