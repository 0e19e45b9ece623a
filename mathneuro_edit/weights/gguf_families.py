"""Which model families the GGUF export writes, and the precise reason for each one it refuses (config only).

:mod:`.gguf_writer` writes the families of :data:`GGUF_WRITTEN`; for the others llama.cpp has an architecture,
but its conventions (read in llama.cpp's ``convert_hf_to_gguf.py``) are not implemented here, or not yet
verified against llama.cpp itself (llama-cpp-python loads the file, tokenizes like transformers, and its greedy
continuation and logits match transformers' on the same weights). A family is only added to
:data:`GGUF_WRITTEN` with that test. :func:`gguf_refusal` names what is missing, per family, from
``config.json`` alone (no weights read), so ``plan`` and a run's validation say it before any forward pass.

Gemma 3 (text) is written with its own keys (:func:`add_family_keys`): the per-layer sliding pattern (from
``layer_types``), the local layers' rope base (``rope.freq_base_swa``) and final soft-capping; what llama.cpp's
gemma3 computes from fixed rules instead of reading (the query scale, no attention soft-capping, scaling on the
global layers only) is refused when a config differs (:func:`gemma3_refusal`).

gpt-oss is written as llama.cpp's converter writes it: :func:`tensor_views` says how each fused expert tensor
becomes llama.cpp's (gate/up de-interleaved, transposed: a :class:`View`), the sinks and biases keep F32, and
:func:`add_family_keys` writes the per-layer sliding pattern. llama.cpp's openai-moe hard-codes the swiglu
(:data:`GPT_OSS_SWIGLU`) and YaRN's attention factor, so other values are refused; it also always rounds YaRN's
correction range (:func:`yarn_ramp_bounds`), which the released ``truncate: false`` does not: written, with a
warning, since no GGUF key can express it and llama.cpp's own conversion differs from transformers the same way.

DeepSeek-V3 is written for llama.cpp's deepseek2, which runs MLA absorbed: :func:`tensor_views` splits each
``kv_b_proj`` per head into ``k_b`` (transposed) and ``v_b`` (a :class:`View` with ``heads``), and
:func:`add_family_keys` writes MLA as one KV head of ``kv_lora + rope`` keys (:data:`MLA`: the writer leaves its
own KV head count and lengths to these), the real head lengths as ``*_mla``, the leading dense layers and the
router (sigmoid, selection bias, groups, normalization, routed scaling). transformers' interleaved rotary
(``rope_interleave``) is llama.cpp's: no permutation. What llama.cpp's deepseek2 hard-codes (silu, no attention
biases, interleaved rotary, the low-rank q, its Lite layer counts, YaRN with ``mscale == mscale_all_dim``) is
refused otherwise (:func:`_deepseek_refusal`).

Llama 4 (text) is written as llama.cpp's converter writes it: its fused experts split in halves (gate, up) and
transposed (:func:`tensor_views`), the dense layers' width from ``intermediate_size_mlp``
(:func:`feed_forward_length`), the interleave step and expert width keys (:func:`add_family_keys`). llama.cpp's
llama4 hard-codes the NoPE period (:data:`LLAMA4_NOPE_PERIOD`), the chunk size and temperature tuning
(:data:`LLAMA4_FIXED`), q/k norm unless 128 experts, and experts every ``interleave_moe_layer_step``-th layer, so
other values are refused (:func:`_llama4_refusal`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

__all__ = ["GGUF_WRITTEN", "GGUF_PENDING", "MOE_NORM_TOPK", "gguf_refusal", "add_family_keys",
           "rope_dims", "tensor_shift", "expert_count", "gemma3_refusal", "layer_types", "rope_by_layer_type",
           "View", "tensor_views", "GPT_OSS_SWIGLU", "yarn_ramp_bounds", "llama_names", "has_rotary", "NO_LLAMA_CPP", "MLA",
           "LLAMA4_FIXED", "LLAMA4_NOPE_PERIOD", "feed_forward_length"]

# model_type -> (gguf.MODEL_ARCH member, q/k rows permuted to llama.cpp's interleaved rotary)
GGUF_WRITTEN: dict[str, tuple[str, bool]] = {
    "llama": ("LLAMA", True), "mistral": ("LLAMA", True), "qwen2": ("QWEN2", False), "qwen3": ("QWEN3", False),
    # verified by llama.cpp itself (tests/runs/test_families.py): Granite is llama + its multipliers (add_family_keys);
    # OLMo 2 has NeoX rotary (no permutation) and its own post-attention/post-MLP norm tensor names; Phi-3 keeps
    # its fused qkv/gate_up, NeoX rotary over part of each head (rope_dims) and a sliding-window key
    "granite": ("GRANITE", True), "olmo2": ("OLMO2", False), "phi3": ("PHI3", False),
    "gemma2": ("GEMMA2", False),
    # Gemma 3 (text): Gemma 2's norms (+1, q/k norms too), NeoX rotary, plus the sliding pattern written per layer
    # (llama.cpp's default is 1-in-6 global) and the local rope base; what llama.cpp fixes: gemma3_refusal
    "gemma3_text": ("GEMMA3", False),
    # MoE: llama.cpp stacks each layer's experts into one 3-D tensor per projection (ffn_{gate,up,down}_exps, expert
    # index outermost), keeps the router (ffn_gate_inp) in F32 and reads the expert counts (add_family_keys).
    # Mixtral is llama (permuted q/k) with experts; the Qwen MoEs and OLMoE have NeoX rotary (HF's order)
    "mixtral": ("LLAMA", True), "qwen2_moe": ("QWEN2MOE", False), "qwen3_moe": ("QWEN3MOE", False),
    "olmoe": ("OLMOE", False),
    # SmolLM3: llama's tensors and permutation; llama.cpp skips the rotary in every 4th layer (hard-coded: the
    # released no_rope_layer_interval), so another NoPE pattern is refused (_smollm3_refusal)
    "smollm3": ("SMOLLM3", True),
    # GPT-2: Conv1D weights stored (in, out), llama.cpp's as Linear (out, in): transposed (tensor_views); fused
    # attn_qkv kept fused, learned positions (position_embd, F32), LayerNorm with biases, no rotary
    "gpt2": ("GPT2", False),
    # gpt-oss (verified by llama.cpp itself): its fused experts are split and transposed to llama.cpp's stacks
    # (tensor_views: gate/up de-interleaved, [experts, in, out] -> [experts, out, in]), their biases and the router's
    # kept F32, the attention sinks as attn_sinks.weight, NeoX rotary with YaRN, the sliding pattern per layer;
    # what llama.cpp's openai-moe hard-codes (the swiglu clamp and slope, YaRN's attention factor): _gpt_oss_refusal
    "gpt_oss": ("GPT_OSS", False),
    # DeepSeek-V3 (verified by llama.cpp itself): MLA as llama.cpp's deepseek2 runs it absorbed, kv_b_proj split per
    # head into k_b (transposed) and v_b (tensor_views), one KV head (MQA) of kv_lora + rope lengths, the first
    # layers dense, sigmoid routing with the selection bias, groups and routed scaling as keys; transformers'
    # rope_interleave weights are already llama.cpp's interleaved (NORM) rotary: no permutation; what llama.cpp
    # hard-codes (silu, no attention biases, interleaved rotary, q_lora, YaRN mscale == mscale_all_dim, the Lite
    # layer counts): _deepseek_refusal
    "deepseek_v3": ("DEEPSEEK2", False),
    # Llama 4 (text; verified by llama.cpp itself): HF's complex rotary is llama.cpp's interleaved one (no
    # permutation); the fused experts are split into halves (gate, up) and transposed (tensor_views), the router kept
    # F32, the shared expert as *_shexp; the keys: interleave step, expert width (add_family_keys). What llama4
    # hard-codes (NoPE every 4th layer, chunked attention of 8192 elsewhere, the temperature tuning's 8192 and 0.1,
    # q/k norm unless 128 experts): _llama4_refusal
    "llama4_text": ("LLAMA4", False),
}

# model_type -> what llama.cpp's converter does for it that this writer does not (yet, verified) do
GGUF_PENDING: dict[str, str] = {}  # empty: every family of docs/families.md that llama.cpp runs is written


# MoE families: whether llama.cpp renormalizes the top-k router weights. It hard-codes this per architecture
# (src/models/{llama,qwen2moe,qwen3moe,olmoe}.cpp), so a config that says otherwise would run differently there.
# Mixtral has no key: transformers always renormalizes, as llama.cpp's llama does.
MOE_NORM_TOPK: dict[str, bool] = {"mixtral": True, "qwen2_moe": False, "qwen3_moe": True, "olmoe": False}


def expert_count(cfg: dict[str, Any]) -> int:
    """Routed experts per MoE layer (``num_local_experts`` in Mixtral's config, ``num_experts`` in the others);
    0 for a dense model.

    Example:
        >>> expert_count({"num_local_experts": 8}), expert_count({"model_type": "llama"})
        (8, 0)
    """
    return int(cfg.get("num_local_experts") or cfg.get("num_experts") or cfg.get("n_routed_experts") or 0)


def _moe_refusal(cfg: dict[str, Any]) -> str | None:
    """What of an MoE config llama.cpp's architecture cannot run as transformers does (None: nothing)."""
    model_type = str(cfg.get("model_type"))
    if model_type not in MOE_NORM_TOPK:
        return None
    if model_type != "mixtral" and bool(cfg.get("norm_topk_prob", False)) != MOE_NORM_TOPK[model_type]:
        return (f"norm_topk_prob is {cfg.get('norm_topk_prob', False)!r} but llama.cpp's {GGUF_WRITTEN[model_type][0]} "
                f"always {'renormalizes' if MOE_NORM_TOPK[model_type] else 'keeps'} the top-k router weights")
    if cfg.get("mlp_only_layers") or int(cfg.get("decoder_sparse_step") or 1) != 1:
        return ("some layers have a dense MLP (mlp_only_layers / decoder_sparse_step) but llama.cpp's "
                f"{GGUF_WRITTEN[model_type][0]} has experts in every layer")
    if model_type == "qwen2_moe" and not cfg.get("shared_expert_intermediate_size"):
        return "there is no shared expert (shared_expert_intermediate_size) but llama.cpp's QWEN2MOE needs one"
    return None


def _smollm3_refusal(cfg: dict[str, Any]) -> str | None:
    """What of a SmolLM3 config llama.cpp's smollm3 cannot run as transformers does (None: nothing)."""
    if cfg.get("model_type") != "smollm3":
        return None
    n = int(cfg["num_hidden_layers"])
    every_4th = [int((i + 1) % 4 != 0) for i in range(n)]  # transformers' no_rope_layers: 1 = rotary, 0 = NoPE
    got = [int(x) for x in (cfg.get("no_rope_layers") or every_4th)]
    if got != every_4th:
        nope = [i for i, x in enumerate(got) if not x]
        return (f"its NoPE layers are {nope[:8]} but llama.cpp's SMOLLM3 skips the rotary in every 4th layer "
                f"({[i for i, x in enumerate(every_4th) if not x][:8]})")
    if cfg.get("use_sliding_window"):
        return "use_sliding_window is set but llama.cpp's SMOLLM3 attends over the whole context"
    return None


# llama.cpp's gpt-oss activation (src/llama-graph.cpp, LLM_FFN_SWIGLU_OAI_MOE) is a constant, not a key:
# (min(gate, limit) * sigmoid(alpha * min(gate, limit))) * (clamp(up, -limit, limit) + 1) with these two values
GPT_OSS_SWIGLU = {"swiglu_alpha": 1.702, "swiglu_limit": 7.0}


def yarn_ramp_bounds(cfg: dict[str, Any]) -> tuple[tuple[float, float], tuple[float, float]] | None:
    """YaRN's correction range (the rotary dimensions where it blends interpolation and extrapolation) as
    transformers computes it for this config, and as llama.cpp does: ``((low, high) of transformers, (low, high)
    of llama.cpp)``; None without YaRN. llama.cpp always rounds the range outwards (floor/ceil: transformers'
    ``truncate: true``); gpt-oss is released with ``truncate: false`` (OpenAI's reference, vLLM and SGLang do
    not round), so llama.cpp's rotary frequencies differ there in the dimensions of the range.

    Example:
        >>> yarn_ramp_bounds({"head_dim": 64, "rope_parameters": {"rope_type": "yarn", "rope_theta": 150000.0,
        ...     "factor": 32.0, "original_max_position_embeddings": 4096, "truncate": False}})  # gpt-oss-20b
        ((8.092779115512402, 17.39802450158856), (8.0, 18.0))
    """
    params = dict(cfg.get("rope_parameters") or cfg.get("rope_scaling") or {})
    if params.get("rope_type", params.get("type")) != "yarn":
        return None
    dim = int(cfg.get("qk_rope_head_dim") or cfg.get("head_dim")
              or int(cfg["hidden_size"]) // int(cfg["num_attention_heads"]))
    base = float(params.get("rope_theta") or cfg.get("rope_theta") or 10000.0)
    ctx = float(params["original_max_position_embeddings"])

    def corr(rotations: float) -> float:
        return dim * math.log(ctx / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = corr(float(params.get("beta_fast") or 32.0)), corr(float(params.get("beta_slow") or 1.0))
    rounded = (float(max(0, math.floor(low))), float(min(dim - 1, math.ceil(high))))
    exact = rounded if params.get("truncate", True) else (max(low, 0.0), min(high, dim - 1.0))
    return exact, rounded


def _mscale(factor: float, mscale: float = 1.0) -> float:
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def _yarn_attention_factor(params: dict[str, Any]) -> float:
    """transformers' YaRN cos/sin scale: ``attention_factor``, else from ``mscale``/``mscale_all_dim`` when both
    are set, else ``0.1 ln(factor) + 1`` (what llama.cpp always uses without a yarn_log_multiplier key)."""
    factor = float(params["factor"])
    if params.get("attention_factor") is not None:
        return float(params["attention_factor"])
    if params.get("mscale") and params.get("mscale_all_dim"):
        return _mscale(factor, float(params["mscale"])) / _mscale(factor, float(params["mscale_all_dim"]))
    return _mscale(factor)


def _gpt_oss_refusal(cfg: dict[str, Any]) -> str | None:
    """What of a gpt-oss config llama.cpp's openai-moe (src/models/openai-moe.cpp) cannot run as transformers does."""
    if cfg.get("model_type") != "gpt_oss":
        return None
    for key, fixed in GPT_OSS_SWIGLU.items():
        if float(cfg.get(key, fixed)) != fixed:
            return f"{key} is {cfg[key]} but llama.cpp's GPT_OSS hard-codes {fixed} in its swiglu"
    params = dict(cfg.get("rope_parameters") or cfg.get("rope_scaling") or {})
    kind = params.get("rope_type", params.get("type", "default"))
    if kind not in ("default", "yarn"):
        return f"rope {kind!r}: only default and YaRN rope are written for gpt-oss (verified against llama.cpp)"
    if kind == "yarn" and not math.isclose(_yarn_attention_factor(params), _mscale(float(params["factor"])),
                                           rel_tol=1e-6):
        # llama.cpp recomputes YaRN's cos/sin scale from the factor alone and ignores a given one
        return (f"its YaRN scales attention by {_yarn_attention_factor(params):.6g} (attention_factor/mscale) but "
                f"llama.cpp's GPT_OSS computes 0.1 ln(factor) + 1 = {_mscale(float(params['factor'])):.6g}")
    if cfg.get("sliding_window") is None and "sliding_attention" in layer_types(cfg):
        return "sliding layers but no sliding_window"
    return None


def llama_names(cfg: dict[str, Any]) -> dict[str, Any]:
    """``config.json`` with the names :mod:`.gguf_writer` reads (``hidden_size``, ``num_hidden_layers``, ...) for a
    family that spells them otherwise: GPT-2's ``n_embd``, ``n_layer``, ``n_head``, ``n_positions``, and its MLP
    width ``n_inner`` (``None``: 4 x ``n_embd``, as transformers builds it).

    Example:
        >>> llama_names({"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 256})["intermediate_size"]
        256
    """
    if cfg.get("model_type") != "gpt2":
        return cfg
    return {**cfg, "hidden_size": cfg["n_embd"], "num_hidden_layers": cfg["n_layer"],
            "num_attention_heads": cfg["n_head"], "max_position_embeddings": cfg["n_positions"],
            "intermediate_size": cfg.get("n_inner") or 4 * int(cfg["n_embd"])}


def has_rotary(cfg: dict[str, Any]) -> bool:
    """Whether the family rotates q/k (every written family but GPT-2, whose positions are learned)."""
    return cfg.get("model_type") != "gpt2"


def _gpt2_refusal(cfg: dict[str, Any]) -> str | None:
    """What of a GPT-2 config llama.cpp's gpt2 cannot run as transformers does (None: nothing)."""
    if cfg.get("model_type") != "gpt2":
        return None
    if cfg.get("activation_function", "gelu_new") not in ("gelu_new", "gelu_pytorch_tanh"):
        return (f"activation_function {cfg['activation_function']!r}: llama.cpp's GPT2 uses the tanh-approximated "
                "GELU (gelu_new)")
    if cfg.get("scale_attn_by_inverse_layer_idx") or cfg.get("scale_attn_weights") is False:
        return "its attention scale is not 1/sqrt(head_dim) (scale_attn_by_inverse_layer_idx / scale_attn_weights)"
    return None


# model_type -> why no GGUF can be run: llama.cpp has no architecture for the family (gguf-py's MODEL_ARCH and its
# converter know none), so there is nothing to write it for
NO_LLAMA_CPP: dict[str, str] = {
    "jetmoe": "llama.cpp has no JetMoE architecture (neither its mixture of attention heads nor its ParallelExperts "
              "MLP), so no llama.cpp build can run it",
}


def _deepseek_refusal(cfg: dict[str, Any]) -> str | None:
    """What of a DeepSeek-V3 config llama.cpp's deepseek2 (src/models/deepseek2.cpp) cannot run as transformers
    does (None: nothing)."""
    if cfg.get("model_type") != "deepseek_v3":
        return None
    if cfg.get("hidden_act", "silu") != "silu":
        return f"hidden_act {cfg['hidden_act']!r}: llama.cpp's DEEPSEEK2 hard-codes silu in every MLP and expert"
    if cfg.get("attention_bias"):
        return "attention_bias is set but llama.cpp's DEEPSEEK2 has no attention biases"
    if not cfg.get("rope_interleave", True):
        return ("rope_interleave is false (rotate-half rotary) but llama.cpp's DEEPSEEK2 rotates interleaved pairs "
                "(the released weights' order)")
    if not cfg.get("q_lora_rank"):
        return "q_lora_rank is null (a full q_proj): only the low-rank q (q_a/q_b) is written for DEEPSEEK2"
    n, vocab = int(cfg["num_hidden_layers"]), int(cfg.get("vocab_size") or 0)
    if n in (26, 27) or (n == 48 and vocab == 128256):
        return (f"{n} layers (vocab {vocab}): llama.cpp's DEEPSEEK2 takes a 26/27-layer model (48 with vocab 128256) "
                "for a Lite one without q_lora_rank and would not load its q_a/q_b")
    params = dict(cfg.get("rope_parameters") or cfg.get("rope_scaling") or {})
    kind = params.get("rope_type", params.get("type", "default"))
    if kind not in ("default", "yarn"):
        return f"rope {kind!r}: only default and YaRN rope are written for deepseek_v3 (verified against llama.cpp)"
    if kind == "yarn":
        m, mad = params.get("mscale"), params.get("mscale_all_dim")
        # llama.cpp scales q.k by mscale(factor, mscale_all_dim)^2 and the rotary by 1 (its mscale := mscale_all_dim);
        # transformers scales the rotary by mscale(factor, mscale) / mscale(factor, mscale_all_dim)
        if not mad or not m or float(m) != float(mad) or params.get("attention_factor") not in (None, 1, 1.0):
            return (f"its YaRN has mscale {m} and mscale_all_dim {mad} (attention_factor "
                    f"{params.get('attention_factor')}) but llama.cpp's DEEPSEEK2 assumes mscale == mscale_all_dim "
                    "(released: 1.0 and 1.0) and no attention_factor")
    return None


# what llama.cpp's llama4 (src/models/llama4.cpp) fixes rather than reads: the rotary is skipped in every 4th layer
# (n_no_rope_layer_step 4), the other layers attend in chunks of 8192 (load_swa_pattern(4): 3 chunked, 1 full),
# and the NoPE layers' queries are scaled by log(floor((pos + 1) / 8192) + 1) * 0.1 + 1 (temperature tuning)
LLAMA4_FIXED = {"attention_chunk_size": 8192, "floor_scale": 8192, "attn_scale": 0.1}
LLAMA4_NOPE_PERIOD = 4


def _llama4_refusal(cfg: dict[str, Any]) -> str | None:
    """What of a Llama 4 (text) config llama.cpp's llama4 cannot run as transformers does (None: nothing)."""
    if cfg.get("model_type") != "llama4_text":
        return None
    n, period = int(cfg["num_hidden_layers"]), LLAMA4_NOPE_PERIOD
    rope = [int((i + 1) % period != 0) for i in range(n)]  # llama.cpp's use_rope; transformers' no_rope_layers
    got = [int(x) for x in (cfg.get("no_rope_layers") or
                            [int((i + 1) % int(cfg.get("no_rope_layer_interval") or 4) != 0) for i in range(n)])]
    if got != rope:
        return (f"its NoPE layers are {[i for i, x in enumerate(got) if not x][:8]} but llama.cpp's LLAMA4 skips the "
                f"rotary in every {period}th layer ({[i for i, x in enumerate(rope) if not x][:8]})")
    for key, fixed in LLAMA4_FIXED.items():
        if key in cfg and (cfg[key] is None or float(cfg[key]) != fixed):
            return f"{key} is {cfg[key]} but llama.cpp's LLAMA4 hard-codes {fixed}"
    chunked = ["chunked_attention" if r else "full_attention" for r in rope]
    if cfg.get("layer_types") and list(cfg["layer_types"]) != chunked:
        return (f"its layer_types are {list(cfg['layer_types'])[:8]} but llama.cpp's LLAMA4 attends in chunks in "
                f"every layer but each {period}th ({chunked[:8]})")
    if not cfg.get("attn_temperature_tuning", True) and 0 in rope:
        return "attn_temperature_tuning is false but llama.cpp's LLAMA4 always scales its NoPE layers' queries"
    step = int(cfg.get("interleave_moe_layer_step") or 1)
    moe = list(range(step - 1, n, step))  # llama.cpp: layer i has experts when (i + 1) % step == 0
    if cfg.get("moe_layers") is not None and [int(i) for i in cfg["moe_layers"]] != moe:
        return (f"its moe_layers are {list(cfg['moe_layers'])[:8]} but llama.cpp's LLAMA4 puts the experts in "
                f"every interleave_moe_layer_step-th layer ({moe[:8]})")
    if bool(cfg.get("use_qk_norm", True)) != (expert_count(cfg) != 128):
        return (f"use_qk_norm is {cfg.get('use_qk_norm', True)} but llama.cpp's LLAMA4 normalizes q and k exactly "
                f"when there are not 128 experts (here {expert_count(cfg)})")
    if cfg.get("attention_bias"):
        return "attention_bias is set but llama.cpp's LLAMA4 has no attention biases"
    if cfg.get("hidden_act", "silu") != "silu":
        return f"hidden_act is {cfg['hidden_act']!r} but llama.cpp's LLAMA4 uses silu"
    params = dict(cfg.get("rope_parameters") or cfg.get("rope_scaling") or {})
    kind = params.get("rope_type", params.get("type", "default"))
    if kind not in ("default", "llama3"):
        return f"rope {kind!r}: only default and llama3 rope are written for llama4_text (verified against llama.cpp)"
    return None


def gguf_refusal(cfg: dict[str, Any]) -> str | None:
    """None when :mod:`.gguf_writer` writes this config's family, else one line: what, why, how to proceed.

    Example:
        >>> gguf_refusal({"model_type": "qwen2"}) is None
        True
        >>> gguf_refusal({"model_type": "jetmoe"}).startswith("outputs.gguf: model_type 'jetmoe' has no GGUF")
        True
        >>> gguf_refusal({"model_type": "qwen3_moe", "norm_topk_prob": False})[:62]
        'outputs.gguf: this qwen3_moe config cannot be run by llama.cpp'
    """
    model_type = cfg.get("model_type")
    if model_type == "gemma3_text":
        return gemma3_refusal(cfg)
    if model_type in GGUF_WRITTEN:
        moe = (_moe_refusal(cfg) or _smollm3_refusal(cfg) or _gpt2_refusal(cfg) or _gpt_oss_refusal(cfg)
               or _deepseek_refusal(cfg) or _llama4_refusal(cfg))
        return None if moe is None else (f"outputs.gguf: this {model_type} config cannot be run by llama.cpp as "
                                         f"transformers runs it: {moe}; set outputs.gguf: null (the checkpoint "
                                         "holds the edit)")
    if model_type in NO_LLAMA_CPP:
        return (f"outputs.gguf: model_type {model_type!r} has no GGUF: {NO_LLAMA_CPP[model_type]}; set outputs.gguf: "
                "null (the checkpoint holds the edit)")
    written = ", ".join(sorted(GGUF_WRITTEN))
    why = GGUF_PENDING.get(str(model_type))
    detail = (f"{why}, not written yet (not verified against llama.cpp)" if why
              else "no GGUF conventions are known to mathneuro-edit for it")
    return (f"outputs.gguf: model_type {model_type!r} is not supported: {detail}; GGUF export supports {written}; "
            "set outputs.gguf: null (the checkpoint holds the edit; llama.cpp's convert_hf_to_gguf.py can convert it)")



_GEMMA = ("gemma2", "gemma3_text")  # (1 + w) RMSNorms everywhere, q_norm/k_norm included (Gemma 3)
_SLIDING = "sliding_attention"


def layer_types(cfg: dict[str, Any]) -> list[str]:
    """Each layer's attention type: ``layer_types``, or (Hub configs of transformers 4) every
    ``sliding_window_pattern``-th layer global and the others sliding, as transformers derives it (default 6;
    gpt-oss: 2)."""
    if cfg.get("layer_types"):
        return [str(t) for t in cfg["layer_types"]]
    default = 2 if cfg.get("model_type") == "gpt_oss" else 6  # gpt-oss: every other layer (transformers, llama.cpp)
    n = int(cfg.get("sliding_window_pattern") or cfg.get("_sliding_window_pattern") or default)
    return [_SLIDING if (i + 1) % n else "full_attention" for i in range(int(cfg["num_hidden_layers"]))]


def rope_by_layer_type(cfg: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Gemma 3's rope per layer type: ``{"full_attention": {...}, "sliding_attention": {...}}``, each with
    ``rope_type`` and ``rope_theta``, from transformers 5's ``rope_parameters`` or transformers 4's ``rope_theta``,
    ``rope_local_base_freq`` and ``rope_scaling`` (which applied to the global layers only), with its defaults.

    Example:
        >>> rope_by_layer_type({"rope_theta": 1e6, "rope_scaling": {"type": "linear", "factor": 8.0}})["full_attention"]
        {'type': 'linear', 'factor': 8.0, 'rope_theta': 1000000.0, 'rope_type': 'linear'}
    """
    params = cfg.get("rope_parameters") or {}
    keyed = "full_attention" in params or _SLIDING in params
    full = dict((params.get("full_attention") or {}) if keyed else (cfg.get("rope_scaling") or params))
    local = dict((params.get(_SLIDING) or {}) if keyed else {})
    full.setdefault("rope_theta", cfg.get("rope_theta") or 1_000_000.0)  # transformers' Gemma 3 defaults
    local.setdefault("rope_theta", cfg.get("rope_local_base_freq") or 10_000.0)
    for p in (full, local):
        p["rope_theta"] = float(p["rope_theta"])
        p["rope_type"] = str(p.get("rope_type", p.get("type", "default")))
    return {"full_attention": full, _SLIDING: local}


def _gemma3_mismatch(cfg: dict[str, Any]) -> str | None:
    """What of a Gemma 3 config llama.cpp's gemma3 (src/models/gemma3.cpp) cannot represent, in words, or None."""
    heads = int(cfg["num_attention_heads"])
    head_dim = int(cfg.get("head_dim") or int(cfg["hidden_size"]) // heads)
    # llama.cpp reads no attention scale for gemma3: 1/sqrt(head_dim), or 1/sqrt(hidden/heads) for 62 layers (27B)
    expect = int(cfg["hidden_size"]) // heads if int(cfg["num_hidden_layers"]) == 62 else head_dim
    scalar = cfg.get("query_pre_attn_scalar", 256)
    if float(scalar) != float(expect):
        return (f"query_pre_attn_scalar {scalar}: llama.cpp's gemma3 scales queries by 1/sqrt({expect}) "
                f"(head_dim, or hidden/heads for 62 layers) and reads no attention scale")
    if cfg.get("attn_logit_softcapping") is not None:
        return "attn_logit_softcapping: llama.cpp's gemma3 has no attention soft-capping"
    if cfg.get("use_bidirectional_attention"):
        return "use_bidirectional_attention (EmbeddingGemma): llama.cpp's gemma3 is causal"
    if cfg.get("hidden_activation", "gelu_pytorch_tanh") != "gelu_pytorch_tanh":
        return (f"hidden_activation {cfg['hidden_activation']!r}: llama.cpp's gemma3 uses the tanh-approximated "
                "GELU (gelu_pytorch_tanh)")
    rope = rope_by_layer_type(cfg)
    full, local = rope["full_attention"]["rope_type"], rope[_SLIDING]["rope_type"]
    # llama.cpp's gemma3 gives the sliding layers their own base but never a scaling: scale 1, no YaRN
    if full not in ("default", "linear") or local != "default":
        return (f"rope {full!r} on the global and {local!r} on the sliding layers: llama.cpp's gemma3 applies only "
                "linear scaling, and only to the global layers")
    if _SLIDING in layer_types(cfg) and not int(cfg.get("sliding_window") or 0):
        return "sliding layers but no sliding_window"
    return None


def gemma3_refusal(cfg: dict[str, Any]) -> str | None:
    """None when llama.cpp's gemma3 computes what transformers does for this Gemma 3 (text) config, else one line.

    Example:
        >>> print(gemma3_refusal({"model_type": "gemma3_text", "hidden_size": 64, "num_attention_heads": 4,
        ...                       "num_hidden_layers": 3, "head_dim": 32, "query_pre_attn_scalar": 32,
        ...                       "attn_logit_softcapping": 50.0}))  # doctest: +NORMALIZE_WHITESPACE
        outputs.gguf: this gemma3_text config is not written: attn_logit_softcapping: llama.cpp's gemma3 has no
        attention soft-capping; set outputs.gguf: null (the checkpoint holds the edit)
    """
    why = _gemma3_mismatch(cfg)
    if why is None:
        return None
    return (f"outputs.gguf: this gemma3_text config is not written: {why}; "
            "set outputs.gguf: null (the checkpoint holds the edit)")


def _add_gemma3_keys(writer: Any, cfg: dict[str, Any]) -> None:
    """Gemma 3's keys beyond Gemma 2's head length: which layers slide (an array, since llama.cpp's default is
    every 6th layer global), their window and rope base, and the final soft-capping when the config has one."""
    kinds = layer_types(cfg)
    if _SLIDING in kinds:  # no sliding_window key: llama.cpp runs every layer as a global one, as transformers does
        writer.add_sliding_window(int(cfg["sliding_window"]))
        writer.add_sliding_window_pattern([k == _SLIDING for k in kinds])
        writer.add_rope_freq_base_swa(rope_by_layer_type(cfg)[_SLIDING]["rope_theta"])
    if cfg.get("final_logit_softcapping") is not None:
        writer.add_final_logit_softcapping(float(cfg["final_logit_softcapping"]))


@dataclass(frozen=True)
class View:
    """Part of one checkpoint tensor as llama.cpp stores it: the entries ``start:stop:step`` of its last axis, then
    its last two axes swapped when ``transpose``. gpt-oss's fused ``gate_up_proj`` ``[experts, hidden, 2 * ff]``
    interleaves gate (even columns) and up (odd): llama.cpp's ``ffn_gate_exps`` is ``View(t, 0, 2, True)``
    (``[experts, ff, hidden]``), ``ffn_up_exps`` ``View(t, 1, 2, True)``; Llama 4's puts gate and up in halves:
    ``View(t, 0, 1, True, stop=ff)`` and ``View(t, ff, 1, True)``. A tensor of 3 or more axes is read and
    written one index of its first axis (one expert) at a time.

    ``heads`` > 0: a 2-D ``[heads * r, c]`` tensor is viewed as ``[heads, r, c]`` and the slice is of each head's
    ``r`` rows instead (read whole). DeepSeek's ``kv_b_proj`` ``[heads * (nope + v), kv_lora]``: llama.cpp's
    ``attn_k_b`` is ``View(t, 0, 1, True, heads, nope)`` (``[heads, kv_lora, nope]``), ``attn_v_b``
    ``View(t, nope, heads=heads)`` (``[heads, v, kv_lora]``).

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
        if self.heads:
            rows, cols = hf_shape
            out: tuple[int, ...] = (self.heads, len(range(rows // self.heads)[self.start:self.stop:self.step]), cols)
        else:
            *lead, last = hf_shape
            out = (*lead, len(range(last)[self.start:self.stop:self.step]))
        return (*out[:-2], out[-1], out[-2]) if self.transpose else out

    def apply(self, w: Any) -> Any:
        """The view of an array (numpy or torch) holding the checkpoint tensor, or its trailing axes."""
        if self.heads:
            w = w.reshape(self.heads, -1, w.shape[-1])[:, self.start:self.stop:self.step]
        else:
            w = w[..., self.start:self.stop:self.step]
        return w.swapaxes(-1, -2) if self.transpose else w


def tensor_views(cfg: dict[str, Any], hf_name: str) -> list[tuple[str, str | View]] | None:
    """How a family's checkpoint tensor becomes llama.cpp's tensors, when not one to one: ``[(HF-style name that
    gguf's name map knows, source)]``, the source a checkpoint name or a :class:`View`; None: the tensor as it is.

    gpt-oss (llama.cpp's converter, GptOssModel.modify_tensors): ``gate_up_proj`` -> ``gate_proj.weight`` (even
    columns) and ``up_proj.weight`` (odd), transposed; ``gate_up_proj_bias`` -> their biases; ``down_proj`` ->
    ``down_proj.weight`` transposed; ``down_proj_bias`` -> ``down_proj.bias``; ``sinks`` -> ``sinks.weight``.

    DeepSeek-V3 (DeepseekV2Model.modify_tensors): ``kv_b_proj.weight`` -> ``k_b_proj.weight`` (each head's first
    ``qk_nope_head_dim`` rows, transposed) and ``v_b_proj.weight`` (its last ``v_head_dim`` rows), for llama.cpp's
    absorbed MLA; ``gate.e_score_correction_bias`` -> ``gate.e_score_correction.bias`` (``exp_probs_b.bias``).

    Example:
        >>> [n.split(".")[-2] for n, _ in tensor_views({"model_type": "gpt_oss"}, "m.experts.gate_up_proj")]
        ['gate_proj', 'up_proj']
    """
    if cfg.get("model_type") == "gpt2":  # Conv1D (in, out) -> Linear (out, in), as llama.cpp's GPT2Model does
        if hf_name.endswith((".c_attn.weight", ".c_proj.weight", ".c_fc.weight")):
            return [(hf_name, View(hf_name, transpose=True))]
        return None
    if cfg.get("model_type") == "deepseek_v3":
        return _deepseek_views(cfg, hf_name)
    stem, _, last = hf_name.rpartition(".")
    if cfg.get("model_type") == "llama4_text":  # llama.cpp's converter, Llama4Model.modify_tensors
        ff = int(cfg["intermediate_size"])  # transformers' Llama4TextExperts: gate_up.chunk(2, dim=-1)
        if last == "gate_up_proj":
            return [(f"{stem}.gate_proj.weight", View(hf_name, 0, 1, True, stop=ff)),
                    (f"{stem}.up_proj.weight", View(hf_name, ff, 1, True))]
        if last == "down_proj" and stem.endswith(".experts"):
            return [(f"{stem}.down_proj.weight", View(hf_name, transpose=True))]
        return None
    if cfg.get("model_type") != "gpt_oss":
        return None
    if last == "gate_up_proj":
        return [(f"{stem}.gate_proj.weight", View(hf_name, 0, 2, True)),
                (f"{stem}.up_proj.weight", View(hf_name, 1, 2, True))]
    if last == "gate_up_proj_bias":
        return [(f"{stem}.gate_proj.bias", View(hf_name, 0, 2)), (f"{stem}.up_proj.bias", View(hf_name, 1, 2))]
    if last == "down_proj":
        return [(f"{stem}.down_proj.weight", View(hf_name, transpose=True))]
    if last == "down_proj_bias":
        return [(f"{stem}.down_proj.bias", hf_name)]
    if last == "sinks":
        return [(f"{hf_name}.weight", hf_name)]
    return None


def _deepseek_views(cfg: dict[str, Any], hf_name: str) -> list[tuple[str, str | View]] | None:
    stem, _, last = hf_name.rpartition(".")
    if hf_name.endswith("self_attn.kv_b_proj.weight"):
        heads, nope = int(cfg["num_attention_heads"]), int(cfg["qk_nope_head_dim"])
        attn = stem.rpartition(".")[0]
        return [(f"{attn}.k_b_proj.weight", View(hf_name, 0, 1, True, heads, nope)),
                (f"{attn}.v_b_proj.weight", View(hf_name, nope, heads=heads))]
    if last == "e_score_correction_bias":
        return [(f"{stem}.e_score_correction.bias", hf_name)]
    return None


# model_types whose attention is DeepSeek's MLA: llama.cpp's own head count and lengths (add_family_keys), not
# the writer's num_key_value_heads / head_dim
MLA = ("deepseek_v3",)


def _add_deepseek_keys(writer: Any, cfg: dict[str, Any]) -> None:
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
    params = dict(cfg.get("rope_parameters") or cfg.get("rope_scaling") or {})
    if params.get("rope_type", params.get("type")) == "yarn" and params.get("mscale_all_dim"):
        writer.add_rope_scaling_yarn_log_mul(0.1 * float(params["mscale_all_dim"]))


# Granite's multipliers, under llama.cpp's names (its converter's GraniteModel: *_multiplier -> *_scale)
_GRANITE_KEYS = (("attention_multiplier", "add_attention_scale"), ("embedding_multiplier", "add_embedding_scale"),
                 ("residual_multiplier", "add_residual_scale"), ("logits_scaling", "add_logit_scale"))


def rope_dims(cfg: dict[str, Any], head_dim: int) -> int:
    """Rotary dimensions per head: Phi-3/Phi-4-mini rotate ``partial_rotary_factor`` of each head (llama.cpp's
    converter: ``int(factor * hidden) // heads``); the others the whole head."""
    if cfg.get("model_type") in MLA:  # DeepSeek: only the qk_rope_head_dim part of each query/key rotates
        return int(cfg["qk_rope_head_dim"])
    params = cfg.get("rope_parameters") or {}
    factor = cfg.get("partial_rotary_factor", params.get("partial_rotary_factor"))
    if cfg.get("model_type") == "phi3" and factor is not None:
        return int(float(factor) * int(cfg["hidden_size"])) // int(cfg["num_attention_heads"])
    return head_dim


def feed_forward_length(cfg: dict[str, Any]) -> int:
    """The dense MLP's width (``feed_forward_length``): ``intermediate_size``, but Llama 4's ``intermediate_size_mlp``
    (its ``intermediate_size`` is the experts'; llama.cpp's converter swaps them back the same way)."""
    if cfg.get("model_type") == "llama4_text":
        return int(cfg.get("intermediate_size_mlp") or cfg["intermediate_size"])
    return int(cfg["intermediate_size"])


def tensor_shift(cfg: dict[str, Any], hf_name: str) -> float:
    """What llama.cpp adds to a tensor's values: Gemma's RMSNorm multiplies by ``1 + w``, llama.cpp by its stored
    weight, so its converter stores ``w + 1`` for every ``*norm.weight``."""
    return 1.0 if cfg.get("model_type") in _GEMMA and hf_name.endswith("norm.weight") else 0.0


def add_family_keys(writer: Any, cfg: dict[str, Any]) -> None:
    """The hyperparameters a family has beyond the llama set that :mod:`.gguf_writer` writes for all."""
    if cfg.get("model_type") in _GEMMA:
        head_dim = int(cfg.get("head_dim") or int(cfg["hidden_size"]) // int(cfg["num_attention_heads"]))
        if head_dim == int(cfg["hidden_size"]) // int(cfg["num_attention_heads"]):  # else the writer adds them
            writer.add_key_length(head_dim)
            writer.add_value_length(head_dim)
    if cfg.get("model_type") == "gemma3_text":
        _add_gemma3_keys(writer, cfg)
    if cfg.get("model_type") == "gemma2":
        writer.add_attn_logit_softcapping(float(cfg["attn_logit_softcapping"]))
        writer.add_final_logit_softcapping(float(cfg["final_logit_softcapping"]))
        writer.add_sliding_window(int(cfg["sliding_window"]))
    if cfg.get("model_type") == "phi3":  # 0: no sliding window (how llama.cpp tells Phi-4 from other Phi-3)
        writer.add_sliding_window(int(cfg.get("sliding_window") or 0))
    if expert_count(cfg):  # MoE: llama.cpp's expert keys (its converter's TextModel / Qwen2MoeModel)
        writer.add_expert_count(expert_count(cfg))
        writer.add_expert_used_count(int(cfg["num_experts_per_tok"]))
        if cfg.get("moe_intermediate_size"):  # the Qwen MoEs: experts narrower than intermediate_size
            writer.add_expert_feed_forward_length(int(cfg["moe_intermediate_size"]))
        if cfg.get("model_type") in ("gpt_oss", "llama4_text"):  # experts of intermediate_size (Llama 4's shared
            writer.add_expert_feed_forward_length(int(cfg["intermediate_size"]))  # expert too; dense: *_mlp)
        if cfg.get("model_type") == "llama4_text":  # llama.cpp: layer i has experts when (i + 1) % step == 0
            writer.add_interleave_moe_layer_step(int(cfg.get("interleave_moe_layer_step") or 1))
        if cfg.get("shared_expert_intermediate_size"):
            writer.add_expert_shared_feed_forward_length(int(cfg["shared_expert_intermediate_size"]))
    if cfg.get("model_type") == "deepseek_v3":
        _add_deepseek_keys(writer, cfg)
    if cfg.get("model_type") == "gpt_oss":  # the window (llama.cpp needs the key) and which layers slide
        writer.add_sliding_window(int(cfg.get("sliding_window") or 0))
        writer.add_sliding_window_pattern([k == _SLIDING for k in layer_types(cfg)])
    if cfg.get("model_type") == "granite":
        for key, add in _GRANITE_KEYS:
            if cfg.get(key) is not None:
                getattr(writer, add)(float(cfg[key]))
