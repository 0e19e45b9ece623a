"""YaRN as transformers and llama.cpp compute it: the correction range (:func:`yarn_ramp_bounds`, which llama.cpp
always rounds) and the cos/sin scale (:func:`yarn_attention_factor`, which llama.cpp recomputes from the factor).
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["rope_scaling", "yarn_ramp_bounds", "yarn_mscale", "yarn_attention_factor"]


def rope_scaling(cfg: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """``(rope type, its parameters)`` of a transformers 5 (``rope_parameters``) or 4 (``rope_scaling``) config;
    ``"default"`` when it has no scaling.

    Example:
        >>> rope_scaling({"rope_scaling": {"type": "yarn", "factor": 4.0}})
        ('yarn', {'type': 'yarn', 'factor': 4.0})
    """
    params = dict(cfg.get("rope_parameters") or cfg.get("rope_scaling") or {})
    return str(params.get("rope_type", params.get("type", "default"))), params


def yarn_ramp_bounds(cfg: dict[str, Any]) -> tuple[tuple[float, float], tuple[float, float]] | None:
    """YaRN's correction range (the rotary dimensions where it blends interpolation and extrapolation) as
    transformers computes it for this config, and as llama.cpp does: ``((low, high) of transformers, (low, high)
    of llama.cpp)``; None without YaRN. llama.cpp always rounds the range outwards (transformers' ``truncate:
    true``), gpt-oss is released with ``truncate: false`` (OpenAI's reference, vLLM and SGLang do not round).

    Example:
        >>> yarn_ramp_bounds({"head_dim": 64, "rope_parameters": {"rope_type": "yarn", "rope_theta": 150000.0,
        ...     "factor": 32.0, "original_max_position_embeddings": 4096, "truncate": False}})  # gpt-oss-20b
        ((8.092779115512402, 17.39802450158856), (8.0, 18.0))
    """
    kind, params = rope_scaling(cfg)
    if kind != "yarn":
        return None
    dim = int(
        cfg.get("qk_rope_head_dim") or cfg.get("head_dim") or int(cfg["hidden_size"]) // int(cfg["num_attention_heads"])
    )
    base = float(params.get("rope_theta") or cfg.get("rope_theta") or 10000.0)
    ctx = float(params["original_max_position_embeddings"])

    def corr(rotations: float) -> float:
        return dim * math.log(ctx / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = corr(float(params.get("beta_fast") or 32.0)), corr(float(params.get("beta_slow") or 1.0))
    rounded = (float(max(0, math.floor(low))), float(min(dim - 1, math.ceil(high))))
    exact = rounded if params.get("truncate", True) else (max(low, 0.0), min(high, dim - 1.0))
    return exact, rounded


def yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    """YaRN's magnitude scale of a context ``factor``: ``0.1 mscale ln(factor) + 1`` (1 without extension)."""
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def yarn_attention_factor(params: dict[str, Any]) -> float:
    """transformers' YaRN cos/sin scale: ``attention_factor``, else from ``mscale``/``mscale_all_dim`` when both
    are set, else ``0.1 ln(factor) + 1`` (what llama.cpp always uses without a yarn_log_multiplier key)."""
    factor = float(params["factor"])
    if params.get("attention_factor") is not None:
        return float(params["attention_factor"])
    if params.get("mscale") and params.get("mscale_all_dim"):
        return yarn_mscale(factor, float(params["mscale"])) / yarn_mscale(factor, float(params["mscale_all_dim"]))
    return yarn_mscale(factor)
