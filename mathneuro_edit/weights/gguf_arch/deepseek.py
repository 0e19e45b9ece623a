"""DeepSeek-V3 for llama.cpp's deepseek2, which runs MLA absorbed: each ``kv_b_proj`` split per head (:func:`views`),
MLA's keys (:func:`add_keys`; the family's ``mla``: the writer leaves its own KV head count and lengths to these),
and what deepseek2 hard-codes refused otherwise (:func:`refusal`); the family's ``doc`` says each in full.
"""

from __future__ import annotations

from typing import Any

from .common import View, add_expert_keys
from .family import Family, register_family
from .rope import rope_scaling

__all__ = ["refusal", "views", "add_keys"]


def refusal(cfg: dict[str, Any]) -> str | None:
    """What of a DeepSeek-V3 config llama.cpp's deepseek2 (src/models/deepseek2.cpp) cannot run as transformers
    does (None: nothing)."""
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
    """llama.cpp's deepseek2 keys (its converter's DeepseekV2Model.set_gguf_parameters; the family's ``doc`` says
    each)."""
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


register_family(
    Family(
        "deepseek_v3",
        "DEEPSEEK2",
        permute_qk=False,
        doc="DeepSeek-V3; llama.cpp runs MLA absorbed, as MQA: `attn_q_a`, `attn_q_a_norm`, `attn_q_b`, "
        "`attn_kv_a_mqa`, `attn_kv_a_norm` as transformers stores them; each layer's `kv_b_proj` (HF `[heads * "
        "(nope + v), kv_lora]`, per head the `qk_nope_head_dim` key rows then the `v_head_dim` value rows) split per "
        "head as llama.cpp's converter does: `attn_k_b.weight` of HF shape `[heads, kv_lora, nope]` (the key rows, "
        "transposed) and `attn_v_b.weight` `[heads, v, kv_lora]` (a `gguf_arch.View` with `heads`: one checkpoint "
        "tensor, two GGUF tensors); no rotary permutation (transformers' `rope_interleave: true` weights already "
        "rotate interleaved pairs, llama.cpp's `NORM` rotary, over the `qk_rope_head_dim` part: "
        "`rope.dimension_count`); the first `first_k_dense_replace` layers' dense `ffn_{gate,up,down}`, then the "
        "routed experts stacked as for the MoEs, the shared experts as `ffn_{gate,up,down}_shexp`, the router "
        "`ffn_gate_inp.weight` and its selection bias (`e_score_correction_bias`) `exp_probs_b.bias`, both F32; keys "
        "`attention.head_count_kv` 1, `attention.key_length` `kv_lora_rank + qk_rope_head_dim`, `value_length` "
        "`kv_lora_rank`, `key_length_mla` `qk_nope_head_dim + qk_rope_head_dim`, `value_length_mla` `v_head_dim`, "
        "`q_lora_rank`, `kv_lora_rank`, `leading_dense_block_count`, `expert_count` (`n_routed_experts`), "
        "`expert_used_count`, `expert_feed_forward_length` (`moe_intermediate_size`), `expert_shared_count` "
        "(`n_shared_experts`), `expert_weights_scale` (`routed_scaling_factor`), `expert_weights_norm` "
        "(`norm_topk_prob`), `expert_gating_func` sigmoid, `expert_group_count`/`expert_group_used_count` "
        "(`n_group`/`topk_group`, only when fewer groups are kept than there are: llama.cpp asserts it, and keeping "
        "all is no grouping), and with YaRN `rope.scaling.yarn_log_multiplier` = 0.1 `mscale_all_dim` (the "
        "converter's convention). Refused from `config.json`, since llama.cpp's deepseek2 fixes them: a "
        "`hidden_act` other than silu, `attention_bias`, `rope_interleave: false` (rotate-half), no `q_lora_rank` (a "
        "full `q_proj`), 26/27 layers (or 48 with vocab 128256: llama.cpp takes those for a Lite model and would not "
        "load `q_a`/`q_b`), a rope scaling other than YaRN, and a YaRN whose `mscale` is not its `mscale_all_dim` or "
        "that gives an `attention_factor` (llama.cpp scales q.k by `mscale(factor, mscale_all_dim)^2` and the rotary "
        "by 1; released: both 1.0) (`tests/weights/test_gguf_deepseek.py`: llama.cpp matches transformers on weights "
        "where MLA, the grouped biased routing and the experts all move the logits, with default rope and YaRN; "
        "dropping the group keys, and each of rotate-half, gelu and the two YaRN refusals bypassed, leaves the "
        "tolerance)",
        refusal_reason=refusal,
        tensor_views=views,
        rope_dims=lambda cfg, head_dim: int(cfg["qk_rope_head_dim"]),  # only this part of each query/key rotates
        mla=True,
        key_writers=(add_expert_keys, add_keys),
    ),
)
