"""Llama 4 (text), written as llama.cpp's converter writes it: its fused experts split in halves and transposed
(:func:`views`), the dense layers' width (:func:`feed_forward_length`), its keys (:func:`add_keys`), and what
llama.cpp's llama4 hard-codes (:data:`LLAMA4_NOPE_PERIOD`, :data:`LLAMA4_FIXED`) refused otherwise (:func:`refusal`).
"""

from __future__ import annotations

from typing import Any

from .common import View, add_expert_keys, expert_count
from .family import Family, register_family
from .rope import rope_scaling

__all__ = ["LLAMA4_FIXED", "LLAMA4_NOPE_PERIOD", "refusal", "views", "add_keys", "feed_forward_length"]


# what llama.cpp's llama4 (src/models/llama4.cpp) fixes rather than reads: the rotary is skipped in every 4th layer
# (n_no_rope_layer_step 4), the other layers attend in chunks of 8192 (load_swa_pattern(4): 3 chunked, 1 full),
# and the NoPE layers' queries are scaled by log(floor((pos + 1) / 8192) + 1) * 0.1 + 1 (temperature tuning)
LLAMA4_FIXED = {"attention_chunk_size": 8192, "floor_scale": 8192, "attn_scale": 0.1}


LLAMA4_NOPE_PERIOD = 4


def refusal(cfg: dict[str, Any]) -> str | None:
    """What of a Llama 4 (text) config llama.cpp's llama4 cannot run as transformers does (None: nothing)."""
    n, period = int(cfg["num_hidden_layers"]), LLAMA4_NOPE_PERIOD
    rope = [int((i + 1) % period != 0) for i in range(n)]  # llama.cpp's use_rope; transformers' no_rope_layers
    interval = int(cfg.get("no_rope_layer_interval") or 4)
    got = [int(x) for x in cfg.get("no_rope_layers") or [int((i + 1) % interval != 0) for i in range(n)]]
    if got != rope:
        return (
            f"its NoPE layers are {[i for i, x in enumerate(got) if not x][:8]} but llama.cpp's LLAMA4 skips the "
            f"rotary in every {period}th layer ({[i for i, x in enumerate(rope) if not x][:8]})"
        )
    for key, fixed in LLAMA4_FIXED.items():
        if key in cfg and (cfg[key] is None or float(cfg[key]) != fixed):
            return f"{key} is {cfg[key]} but llama.cpp's LLAMA4 hard-codes {fixed}"
    chunked = ["chunked_attention" if r else "full_attention" for r in rope]
    if cfg.get("layer_types") and list(cfg["layer_types"]) != chunked:
        return (
            f"its layer_types are {list(cfg['layer_types'])[:8]} but llama.cpp's LLAMA4 attends in chunks in "
            f"every layer but each {period}th ({chunked[:8]})"
        )
    if not cfg.get("attn_temperature_tuning", True) and 0 in rope:
        return "attn_temperature_tuning is false but llama.cpp's LLAMA4 always scales its NoPE layers' queries"
    step = int(cfg.get("interleave_moe_layer_step") or 1)
    moe = list(range(step - 1, n, step))  # llama.cpp: layer i has experts when (i + 1) % step == 0
    if cfg.get("moe_layers") is not None and [int(i) for i in cfg["moe_layers"]] != moe:
        return (
            f"its moe_layers are {list(cfg['moe_layers'])[:8]} but llama.cpp's LLAMA4 puts the experts in "
            f"every interleave_moe_layer_step-th layer ({moe[:8]})"
        )
    if bool(cfg.get("use_qk_norm", True)) != (expert_count(cfg) != 128):
        return (
            f"use_qk_norm is {cfg.get('use_qk_norm', True)} but llama.cpp's LLAMA4 normalizes q and k exactly "
            f"when there are not 128 experts (here {expert_count(cfg)})"
        )
    if cfg.get("attention_bias"):
        return "attention_bias is set but llama.cpp's LLAMA4 has no attention biases"
    if cfg.get("hidden_act", "silu") != "silu":
        return f"hidden_act is {cfg['hidden_act']!r} but llama.cpp's LLAMA4 uses silu"
    kind, params = rope_scaling(cfg)
    if kind not in ("default", "llama3"):
        return f"rope {kind!r}: only default and llama3 rope are written for llama4_text (verified against llama.cpp)"
    return None


def views(cfg: dict[str, Any], hf_name: str) -> list[tuple[str, str | View]] | None:
    """Llama 4's fused experts as llama.cpp's converter writes them (Llama4Model.modify_tensors): split in halves
    (transformers' ``chunk(2, dim=-1)``) and transposed, as the family's ``doc`` says."""
    stem, _, last = hf_name.rpartition(".")
    ff = int(cfg["intermediate_size"])
    if last == "gate_up_proj":
        return [
            (f"{stem}.gate_proj.weight", View(hf_name, 0, 1, True, stop=ff)),
            (f"{stem}.up_proj.weight", View(hf_name, ff, 1, True)),
        ]
    if last == "down_proj" and stem.endswith(".experts"):
        return [(f"{stem}.down_proj.weight", View(hf_name, transpose=True))]
    return None


def add_keys(writer: Any, cfg: dict[str, Any]) -> None:
    """Llama 4's keys beyond the experts': their width (the shared expert's too) and the interleave step."""
    writer.add_expert_feed_forward_length(int(cfg["intermediate_size"]))
    writer.add_interleave_moe_layer_step(int(cfg.get("interleave_moe_layer_step") or 1))


def feed_forward_length(cfg: dict[str, Any]) -> int:
    """The dense layers' MLP width: ``intermediate_size_mlp`` (Llama 4's ``intermediate_size`` is the experts';
    llama.cpp's converter swaps them back the same way)."""
    return int(cfg.get("intermediate_size_mlp") or cfg["intermediate_size"])


register_family(
    Family(
        "llama4_text",
        "LLAMA4",
        permute_qk=False,
        doc="Llama 4 text: transformers' complex (pairwise) rotary is llama.cpp's interleaved one, so q/k are not "
        "permuted; each MoE layer's fused experts split in halves and transposed as llama.cpp's converter does: "
        "`feed_forward.experts.gate_up_proj` (HF `[experts, hidden, 2 * ff]`, gate the first `ff` columns, up the "
        "others) gives `ffn_gate_exps.weight` and `ffn_up_exps.weight` `[experts, ff, hidden]`, `down_proj` "
        "`[experts, ff, hidden]` gives `ffn_down_exps.weight` `[experts, hidden, ff]`; the router "
        "`ffn_gate_inp.weight` (F32); the shared expert as `ffn_{gate,up,down}_shexp`; the dense layers' MLP as "
        "`ffn_{gate,up,down}`; keys `expert_count`, `expert_used_count`, `expert_feed_forward_length` "
        "(`intermediate_size`: routed and shared experts), `feed_forward_length` (`intermediate_size_mlp`: the dense "
        "layers), `interleave_moe_layer_step`, `rope_freqs` for Scout's llama3 rope; no `attention.sliding_window` "
        "key (0 would turn llama.cpp's chunking and NoPE layers off). llama.cpp's llama4 fixes, rather than reads: "
        "the rotary skipped in every 4th layer, chunked attention of 8192 in the others, the NoPE layers' "
        "temperature tuning (`floor_scale` 8192, `attn_scale` 0.1), q/k L2 norm unless there are 128 experts, "
        "experts in every `interleave_moe_layer_step`-th layer, silu, no attention biases; a config with other "
        "`no_rope_layers`, `layer_types`, `attention_chunk_size`, `floor_scale`, `attn_scale`, "
        "`attn_temperature_tuning` false, `moe_layers`, `use_qk_norm`, `attention_bias`, `hidden_act`, or a rope "
        "other than default / llama3 is refused (`tests/weights/test_gguf_llama4.py`: the NoPE pattern, chunk size, "
        "floor scale and q/k norm refusals shown needed; the others only differ past 8191 tokens or do not load)",
        refusal_reason=refusal,
        tensor_views=views,
        feed_forward_length=feed_forward_length,
        key_writers=(add_expert_keys, add_keys),
    ),
)
