"""The stacked-expert MoEs (Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE): what llama.cpp hard-codes per architecture. The
experts themselves are stacked by :mod:`..gguf_writer`; their keys: :func:`~.common.add_expert_keys`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .common import add_expert_keys
from .family import Family, register_family

__all__ = ["moe_refusal"]


def moe_refusal(arch: str, renormalizes: bool | None, shared_expert: bool = False) -> Callable[[dict], str | None]:
    """The refusal reason of an MoE family whose llama.cpp architecture ``arch`` hard-codes (src/models/{llama,
    qwen2moe,qwen3moe,olmoe}.cpp) whether the top-k router weights are renormalized (``renormalizes``; None:
    Mixtral's config has no key, and transformers always renormalizes, as llama.cpp's llama does), experts in every
    layer, and, with ``shared_expert``, a shared expert: a config that says otherwise would run differently there.

    Example:
        >>> moe_refusal("QWEN3MOE", renormalizes=True)({"norm_topk_prob": False})
        "norm_topk_prob is False but llama.cpp's QWEN3MOE always renormalizes the top-k router weights"
    """

    def refusal(cfg: dict[str, Any]) -> str | None:
        if renormalizes is not None and bool(cfg.get("norm_topk_prob", False)) != renormalizes:
            return (
                f"norm_topk_prob is {cfg.get('norm_topk_prob', False)!r} but llama.cpp's {arch} "
                f"always {'renormalizes' if renormalizes else 'keeps'} the top-k router weights"
            )
        if cfg.get("mlp_only_layers") or int(cfg.get("decoder_sparse_step") or 1) != 1:
            return (
                "some layers have a dense MLP (mlp_only_layers / decoder_sparse_step) but llama.cpp's "
                f"{arch} has experts in every layer"
            )
        if shared_expert and not cfg.get("shared_expert_intermediate_size"):
            return f"there is no shared expert (shared_expert_intermediate_size) but llama.cpp's {arch} needs one"
        return None

    return refusal


# what every stacked-expert family's entry of docs/formats.md ends with: the refusal all four share
_EVERY_LAYER = (
    "; llama.cpp has experts in every layer, so `mlp_only_layers` or `decoder_sparse_step` != 1 is refused "
    "(`tests/weights/test_gguf_moe.py`)"
)

# model_type -> (llama.cpp arch, q/k permuted, top-k renormalized (None: no key, always), shared expert): Mixtral is
# llama (permuted q/k) with experts; the Qwen MoEs and OLMoE have NeoX rotary (HF's order)
_STACKED = {
    "mixtral": ("LLAMA", True, None, False),
    "qwen2_moe": ("QWEN2MOE", False, False, True),
    "qwen3_moe": ("QWEN3MOE", False, True, False),
    "olmoe": ("OLMOE", False, False, False),
}
# each family's entry of docs/formats.md (the refusal all four share appended)
_DOCS = {
    "mixtral": "Mixtral: Llama's tensors and permutation, the experts stacked; llama.cpp's `llama` renormalizes the "
    "top-k router weights, as transformers always does",
    "qwen2_moe": "Qwen2-MoE: NeoX rotary, the experts stacked; its shared expert as `ffn_{gate,up,down}_shexp` and its "
    "gate `ffn_gate_inp_shexp` (always F32); keys `expert_feed_forward_length` (`moe_intermediate_size`) and "
    "`expert_shared_feed_forward_length`; llama.cpp never renormalizes the top-k router weights and needs the "
    "shared expert, so `norm_topk_prob: true` or no `shared_expert_intermediate_size` is refused",
    "qwen3_moe": "Qwen3-MoE: NeoX rotary, Qwen3's q/k norms, the experts stacked; key `expert_feed_forward_length` "
    "(`moe_intermediate_size`); llama.cpp always renormalizes the top-k router weights, so `norm_topk_prob: "
    "false` is refused",
    "olmoe": "OLMoE: NeoX rotary, the experts stacked; llama.cpp never renormalizes the top-k router weights, so "
    "`norm_topk_prob: true` is refused",
}
register_family(
    *(
        Family(
            model_type,
            arch,
            permute_qk=permute_qk,
            refusal_reason=moe_refusal(arch, renormalizes, shared_expert),
            key_writers=(add_expert_keys,),
            doc=_DOCS[model_type] + _EVERY_LAYER,
        )
        for model_type, (arch, permute_qk, renormalizes, shared_expert) in _STACKED.items()
    )
)
