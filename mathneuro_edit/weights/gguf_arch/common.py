"""What several families share: a :class:`View` of a checkpoint tensor (the one-to-many and transposed tensors of
gpt-oss, Llama 4, DeepSeek-V3 and GPT-2), the expert count and keys, and each layer's attention type.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["View", "expert_count", "add_expert_keys", "layer_types", "SLIDING"]


@dataclass(frozen=True)
class View:
    """Part of one checkpoint tensor as llama.cpp stores it: the entries ``start:stop:step`` of its last axis, then
    its last two axes swapped when ``transpose`` (gpt-oss's and Llama 4's fused experts split into gate and up:
    their modules' ``views``). A tensor of 3 or more axes is read and written one index of its first axis (one
    expert) at a time. ``heads`` > 0: a 2-D ``[heads * r, c]`` tensor is viewed as ``[heads, r, c]`` and the slice
    is of each head's ``r`` rows instead, read whole (DeepSeek's ``kv_b_proj`` into ``attn_k_b`` and ``attn_v_b``).

    Example:
        >>> View("gate_up_proj", 1, 2, True).shape((4, 64, 128))
        (4, 64, 64)
        >>> View("kv_b_proj", 0, 1, True, heads=4, stop=8).shape((96, 16))
        (4, 16, 8)
    """

    tensor: str
    start: int = 0
    step: int = 1
    transpose: bool = False
    heads: int = 0
    stop: int | None = None

    def shape(self, hf_shape: tuple[int, ...]) -> tuple[int, ...]:
        """The viewed shape of a checkpoint tensor of shape ``hf_shape``."""
        kept = slice(self.start, self.stop, self.step)
        if self.heads:
            rows, cols = hf_shape
            out: tuple[int, ...] = (self.heads, len(range(rows // self.heads)[kept]), cols)
        else:
            *lead, last = hf_shape
            out = (*lead, len(range(last)[kept]))
        return (*out[:-2], out[-1], out[-2]) if self.transpose else out

    def apply(self, w: Any) -> Any:
        """The view of an array (numpy or torch) holding the checkpoint tensor, or its trailing axes."""
        if self.heads:
            w = w.reshape(self.heads, -1, w.shape[-1])[:, self.start : self.stop : self.step]
        else:
            w = w[..., self.start : self.stop : self.step]
        return w.swapaxes(-1, -2) if self.transpose else w


def expert_count(cfg: dict[str, Any]) -> int:
    """Routed experts per MoE layer (``num_local_experts`` in Mixtral's config, ``num_experts`` in the others);
    0 for a dense model.

    Example:
        >>> expert_count({"num_local_experts": 8}), expert_count({"model_type": "llama"})
        (8, 0)
    """
    return int(cfg.get("num_local_experts") or cfg.get("num_experts") or cfg.get("n_routed_experts") or 0)


def add_expert_keys(writer: Any, cfg: dict[str, Any]) -> None:
    """llama.cpp's expert keys (its converter's TextModel / Qwen2MoeModel), a key writer of every family with routed
    experts: their count and how many a token uses, the Qwen MoEs' expert and shared-expert widths."""
    if not expert_count(cfg):
        return
    writer.add_expert_count(expert_count(cfg))
    writer.add_expert_used_count(int(cfg["num_experts_per_tok"]))
    if cfg.get("moe_intermediate_size"):  # the Qwen MoEs: experts narrower than intermediate_size
        writer.add_expert_feed_forward_length(int(cfg["moe_intermediate_size"]))
    if cfg.get("shared_expert_intermediate_size"):
        writer.add_expert_shared_feed_forward_length(int(cfg["shared_expert_intermediate_size"]))


SLIDING = "sliding_attention"


def layer_types(cfg: dict[str, Any], period: int = 6) -> list[str]:
    """Each layer's attention type: ``layer_types``, or (Hub configs of transformers 4) every
    ``sliding_window_pattern``-th layer global and the others sliding, as transformers derives it (without the
    key: every ``period``-th, the family's default: Gemma's 6, gpt-oss's 2)."""
    if cfg.get("layer_types"):
        return [str(t) for t in cfg["layer_types"]]
    n = int(cfg.get("sliding_window_pattern") or cfg.get("_sliding_window_pattern") or period)
    return [SLIDING if (i + 1) % n else "full_attention" for i in range(int(cfg["num_hidden_layers"]))]
