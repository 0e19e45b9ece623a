"""gpt-oss, written as llama.cpp's converter writes it: the fused experts split and transposed (:func:`views`), the
sliding pattern (:func:`add_keys`), and what llama.cpp's openai-moe hard-codes refused otherwise (:func:`refusal`;
YaRN's rounded correction range is warned about, :func:`~.rope.yarn_ramp_bounds`); the family's ``doc`` says why.
"""

from __future__ import annotations

import math
from typing import Any

from .common import SLIDING, View, add_expert_keys, layer_types
from .family import Family, register_family
from .rope import rope_scaling, yarn_attention_factor, yarn_mscale

__all__ = ["GPT_OSS_SWIGLU", "refusal", "views", "add_keys"]

_SLIDING_PERIOD = 2  # without layer_types: every other layer slides (transformers' default, and llama.cpp's)


# llama.cpp's gpt-oss activation (src/llama-graph.cpp, LLM_FFN_SWIGLU_OAI_MOE) is a constant, not a key:
# (min(gate, limit) * sigmoid(alpha * min(gate, limit))) * (clamp(up, -limit, limit) + 1) with these two values
GPT_OSS_SWIGLU = {"swiglu_alpha": 1.702, "swiglu_limit": 7.0}


def refusal(cfg: dict[str, Any]) -> str | None:
    """What of a gpt-oss config llama.cpp's openai-moe (src/models/openai-moe.cpp) cannot run as transformers does."""
    for key, fixed in GPT_OSS_SWIGLU.items():
        if float(cfg.get(key, fixed)) != fixed:
            return f"{key} is {cfg[key]} but llama.cpp's GPT_OSS hard-codes {fixed} in its swiglu"
    kind, params = rope_scaling(cfg)
    if kind not in ("default", "yarn"):
        return f"rope {kind!r}: only default and YaRN rope are written for gpt-oss (verified against llama.cpp)"
    if kind == "yarn" and not math.isclose(
        yarn_attention_factor(params), yarn_mscale(float(params["factor"])), rel_tol=1e-6
    ):
        # llama.cpp recomputes YaRN's cos/sin scale from the factor alone and ignores a given one
        return (
            f"its YaRN scales attention by {yarn_attention_factor(params):.6g} (attention_factor/mscale) but "
            f"llama.cpp's GPT_OSS computes 0.1 ln(factor) + 1 = {yarn_mscale(float(params['factor'])):.6g}"
        )
    if cfg.get("sliding_window") is None and SLIDING in layer_types(cfg, _SLIDING_PERIOD):
        return "sliding layers but no sliding_window"
    return None


def views(cfg: dict[str, Any], hf_name: str) -> list[tuple[str, str | View]] | None:
    """gpt-oss's tensors as llama.cpp's converter writes them (GptOssModel.modify_tensors; the family's ``doc``
    says each).

    Example:
        >>> [n.split(".")[-2] for n, _ in views({}, "m.experts.gate_up_proj")]
        ['gate_proj', 'up_proj']
    """
    stem, _, last = hf_name.rpartition(".")
    if last == "gate_up_proj":
        return [
            (f"{stem}.gate_proj.weight", View(hf_name, 0, 2, True)),
            (f"{stem}.up_proj.weight", View(hf_name, 1, 2, True)),
        ]
    if last == "gate_up_proj_bias":
        return [(f"{stem}.gate_proj.bias", View(hf_name, 0, 2)), (f"{stem}.up_proj.bias", View(hf_name, 1, 2))]
    if last == "down_proj":
        return [(f"{stem}.down_proj.weight", View(hf_name, transpose=True))]
    if last == "down_proj_bias":
        return [(f"{stem}.down_proj.bias", hf_name)]
    if last == "sinks":
        return [(f"{hf_name}.weight", hf_name)]
    return None


def add_keys(writer: Any, cfg: dict[str, Any]) -> None:
    """gpt-oss's keys beyond the experts': their width (``intermediate_size``), the window (llama.cpp needs the
    key) and which layers slide."""
    writer.add_expert_feed_forward_length(int(cfg["intermediate_size"]))
    writer.add_sliding_window(int(cfg.get("sliding_window") or 0))
    writer.add_sliding_window_pattern([k == SLIDING for k in layer_types(cfg, _SLIDING_PERIOD)])


register_family(
    Family(
        "gpt_oss",
        "GPT_OSS",
        permute_qk=False,
        doc="gpt-oss, llama.cpp's `openai-moe`: NeoX rotary (no permutation), q/k/v/o biases, `post_attention_norm`; "
        "the attention sinks as `attn_sinks.weight` (F32); the router as `ffn_gate_inp.weight` and `.bias` (F32); "
        "each layer's fused experts split and transposed as llama.cpp's converter does: `gate_up_proj` (HF "
        "`[experts, hidden, 2 * ff]`, gate and up interleaved) gives `ffn_gate_exps.weight` (even columns) and "
        "`ffn_up_exps.weight` (odd columns), each of HF shape `[experts, ff, hidden]`; `down_proj` `[experts, ff, "
        "hidden]` gives `ffn_down_exps.weight` `[experts, hidden, ff]`; `gate_up_proj_bias` gives "
        "`ffn_gate_exps.bias` / `ffn_up_exps.bias` `[experts, ff]` (even/odd) and `down_proj_bias` "
        "`ffn_down_exps.bias`, all biases F32 (llama.cpp's converter quantizes only `.weight` tensors); keys "
        "`expert_count`, `expert_used_count`, `expert_feed_forward_length` (`intermediate_size`), "
        "`attention.sliding_window` and `attention.sliding_window_pattern` (one bool per layer from `layer_types`, "
        "default every other layer), YaRN as `rope.scaling.type/factor/original_context_length/yarn_beta_fast/"
        "yarn_beta_slow`. llama.cpp hard-codes the swiglu (`swiglu_alpha` 1.702, `swiglu_limit` 7.0) and YaRN's "
        "attention factor (`0.1 ln(factor) + 1`), so a config with other values (an `attention_factor`, or "
        "`mscale`/`mscale_all_dim`, giving another) or a rope scaling other than YaRN is refused "
        "(`tests/weights/test_gguf_gpt_oss.py`: each refusal shown needed). Not refused, but warned at write time: "
        "llama.cpp always rounds YaRN's correction range outwards (floor/ceil, transformers' `truncate: true`) and "
        "no key can say otherwise; gpt-oss is released with `truncate: false`, so llama.cpp's rotary frequencies "
        "differ in the dimensions of that range (gpt-oss-20b: [8.09, 17.40] becomes [8, 18]), as in files from "
        "llama.cpp's own converter (on the family's tiny model: 4e-4 of the logits, 3e-7 with `truncate: true`)",
        refusal_reason=refusal,
        tensor_views=views,
        key_writers=(add_expert_keys, add_keys),
    ),
)
