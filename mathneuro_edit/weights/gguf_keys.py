"""What a GGUF says about its model: the ``config.json`` it is written from (read once, refused or looked up as its
:class:`~.gguf_arch.Family`), the metadata keys written from it in a fixed order (docs/formats.md lists them), and
the rope factors that are tensors (Llama 3's ``rope_freqs``, Phi-3's longrope factors).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError
from ..util.config_sizes import check_config_file_sizes
from .gguf_arch import FAMILIES, Family, gguf_refusal, yarn_ramp_bounds

__all__ = [
    "gguf_package",
    "read_config",
    "head_dim",
    "rope_settings",
    "llama3_freqs",
    "longrope_factors",
    "add_model_keys",
    "add_general",
]

log = logging.getLogger(__name__)


def gguf_package() -> Any:
    """llama.cpp's ``gguf`` package, or the one line saying how to install it (it is an extra)."""
    try:
        import gguf
    except ImportError:
        raise InputError("outputs.gguf needs the gguf package: pip install 'gguf>=0.17' (the gguf extra)") from None
    return gguf


def read_config(folder: Path) -> tuple[dict[str, Any], Family]:
    """A checkpoint folder's ``config.json`` under the names the writer reads (:attr:`~.gguf_arch.Family.llama_names`)
    and its family; :func:`~.gguf_arch.gguf_refusal`'s line for a family not written or a config of it llama.cpp
    would run otherwise."""
    check_config_file_sizes(folder)  # a layer count of 10**9 would loop here: sizes a model has, first
    cfg = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    refusal = gguf_refusal(cfg)
    if refusal is not None:
        raise InputError(refusal)
    family = FAMILIES[cfg["model_type"]]  # registered: gguf_refusal refuses every other model_type
    return family.llama_names(cfg), family


def head_dim(cfg: dict[str, Any]) -> int:
    """Each attention head's length: ``head_dim``, else hidden / heads."""
    return int(cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"])


def rope_settings(cfg: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    """(rope theta, scaling dict or {}) of a transformers 4 (rope_theta, rope_scaling) or 5 (rope_parameters) config."""
    params = dict(cfg.get("rope_parameters") or {})
    params = dict(params.get("full_attention", params))  # Gemma 3: the global layers' (the local: gguf_arch.gemma)
    scaling = dict(cfg.get("rope_scaling") or params)
    theta = float(cfg.get("rope_theta") or params.get("rope_theta") or 10000.0)
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    return theta, ({} if kind == "default" else {**scaling, "rope_type": kind})


def llama3_freqs(cfg: dict[str, Any]) -> np.ndarray:
    """Llama 3's per-frequency rope factors (llama.cpp's ``rope_freqs``: it divides each frequency by its factor)."""
    (theta, s), dim = rope_settings(cfg), head_dim(cfg)
    freqs = 1.0 / theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    factor, low, high = float(s["factor"]), float(s.get("low_freq_factor", 1.0)), float(s.get("high_freq_factor", 4.0))
    ctx = float(s["original_max_position_embeddings"])
    wavelen = 2 * math.pi / freqs
    with np.errstate(divide="ignore", invalid="ignore"):  # low == high (Llama 4 Scout): no band between, unused
        smooth = np.clip((ctx / wavelen - low) / (high - low), 0.0, 1.0)
    mid = 1.0 / ((1 - smooth) / factor + smooth)  # between the two wavelengths: interpolated
    out = np.where(wavelen < ctx / high, 1.0, np.where(wavelen > ctx / low, factor, mid))
    return out.astype(np.float32)


def longrope_factors(cfg: dict[str, Any], family: Family) -> tuple[np.ndarray, np.ndarray, float]:
    """Phi-3's longrope: (long factors, short factors, attention factor), as transformers computes them (how each
    side uses them: the phi3 family's ``doc``). Refused: factors missing, or not one per rotary frequency."""
    s = rope_settings(cfg)[1]
    original = int(s.get("original_max_position_embeddings") or cfg.get("original_max_position_embeddings") or 0)
    half = family.rope_dims(cfg, head_dim(cfg)) // 2
    long, short = s.get("long_factor"), s.get("short_factor")
    if not original or not isinstance(long, list) or not isinstance(short, list) or not len(long) == len(short) == half:
        raise InputError(
            f"outputs.gguf: longrope needs original_max_position_embeddings and {half} long_factor and "
            "short_factor values (one per rotary frequency) in config.json; set outputs.gguf: null"
        )
    factor = float(s.get("factor") or int(cfg["max_position_embeddings"]) / original)
    attn = s.get("attention_factor")
    if attn is None:
        attn = math.sqrt(1 + math.log(factor) / math.log(original)) if factor > 1.0 else 1.0
    return np.asarray(long, dtype=np.float32), np.asarray(short, dtype=np.float32), float(attn)


def add_model_keys(w: Any, gguf: Any, cfg: dict[str, Any], family: Family) -> None:
    """The model's keys, in llama.cpp's converter's order: llama's hyperparameters (LayerNorm's epsilon instead of
    the rope keys for a family without rotary), the key/value length when it is not hidden/heads, the rope
    scaling, then the family's own keys (:attr:`~.gguf_arch.Family.key_writers`)."""
    n_head, head = int(cfg["num_attention_heads"]), head_dim(cfg)
    theta, scaling = rope_settings(cfg)
    w.add_context_length(int(cfg["max_position_embeddings"]))
    w.add_embedding_length(int(cfg["hidden_size"]))
    w.add_block_count(int(cfg["num_hidden_layers"]))
    w.add_feed_forward_length(family.feed_forward_length(cfg))
    w.add_head_count(n_head)
    # MLA (DeepSeek): one KV head (MQA) and MLA's lengths, from the family's keys
    w.add_head_count_kv(1 if family.mla else int(cfg.get("num_key_value_heads") or n_head))
    w.add_vocab_size(int(cfg["vocab_size"]))
    if family.rotary:  # GPT-2 has learned positions (position_embd) and LayerNorm
        w.add_rope_freq_base(theta)
        w.add_layer_norm_rms_eps(float(cfg["rms_norm_eps"]))
        w.add_rope_dimension_count(family.rope_dims(cfg, head))
    else:
        w.add_layer_norm_eps(float(cfg["layer_norm_epsilon"]))
    if head != int(cfg["hidden_size"]) // n_head and not family.mla:  # Qwen3: head_dim is not hidden/heads
        w.add_key_length(head)
        w.add_value_length(head)
    if scaling.get("rope_type") in ("linear", "yarn"):
        w.add_rope_scaling_type(gguf.RopeScalingType[scaling["rope_type"].upper()])
        w.add_rope_scaling_factor(float(scaling["factor"]))
        if "original_max_position_embeddings" in scaling:
            w.add_rope_scaling_orig_ctx_len(int(scaling["original_max_position_embeddings"]))
        if scaling["rope_type"] == "yarn":  # the ramp's bounds, when given (llama.cpp's defaults: 32 and 1)
            for key in ("beta_fast", "beta_slow"):
                if scaling.get(key) is not None:
                    getattr(w, f"add_rope_scaling_yarn_{key}")(float(scaling[key]))
            exact, rounded = yarn_ramp_bounds(cfg) or ((0.0, 0.0), (0.0, 0.0))
            if exact != rounded:  # gpt-oss's truncate: false; no GGUF key can say it (gguf_arch.yarn_ramp_bounds)
                log.warning(
                    "gguf: llama.cpp rounds YaRN's correction range to [%g, %g] where transformers uses "
                    "[%.4g, %.4g] (rope truncate: false): llama.cpp's rotary frequencies differ in those "
                    "dimensions, as in llama.cpp's own conversion",
                    *rounded,
                    *exact,
                )
    if scaling.get("rope_type") == "longrope":  # the factors themselves are tensors (gguf_tensors.gguf_plan)
        w.add_rope_scaling_attn_factors(longrope_factors(cfg, family)[2])
        w.add_rope_scaling_orig_ctx_len(
            int(scaling.get("original_max_position_embeddings") or cfg["original_max_position_embeddings"])
        )
    for add in family.key_writers:  # a family's own keys (Granite's multipliers): weights/gguf_arch/
        add(w, cfg)


def add_general(w: Any, meta: Mapping[str, Any]) -> None:
    """The ``general.*`` keys llama.cpp's converter (convert_hf_to_gguf.py) writes, from ``meta``: ``basename``,
    ``size_label``, ``finetune``, ``organization``, ``license``, ``license_name``, ``license_link``, ``tags``,
    ``languages`` and ``base_models`` (``[{"name", "organization", "repo_url"}]``); absent keys are not written."""
    for key in ("basename", "size_label", "finetune", "organization", "license", "license_name", "license_link"):
        if meta.get(key):
            getattr(w, f"add_{key}")(str(meta[key]))
    bases = list(meta.get("base_models") or [])
    if bases:
        w.add_base_model_count(len(bases))
        for i, b in enumerate(bases):
            for key in ("name", "organization", "repo_url"):
                if b.get(key):
                    getattr(w, f"add_base_model_{key}")(i, str(b[key]))
    for key in ("tags", "languages"):
        if meta.get(key):
            getattr(w, f"add_{key}")([str(t) for t in meta[key]])
