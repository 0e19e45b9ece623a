"""Which families the GGUF export writes (:data:`GGUF_WRITTEN`: llama.cpp's architecture and whether q/k rows are
permuted), which it does not yet (:data:`GGUF_PENDING`) and which llama.cpp cannot run (:data:`NO_LLAMA_CPP`).

A family is only added to :data:`GGUF_WRITTEN` with the test that llama.cpp itself loads its file, tokenizes like
transformers, and its logits and greedy continuation match transformers' (tests/runs/test_families.py).
"""

from __future__ import annotations

__all__ = ["GGUF_WRITTEN", "GGUF_PENDING", "NO_LLAMA_CPP"]


# model_type -> (gguf.MODEL_ARCH member, q/k rows permuted to llama.cpp's interleaved rotary)
GGUF_WRITTEN: dict[str, tuple[str, bool]] = {
    "llama": ("LLAMA", True),
    "mistral": ("LLAMA", True),
    "qwen2": ("QWEN2", False),
    "qwen3": ("QWEN3", False),
    # verified by llama.cpp itself (tests/runs/test_families.py): Granite is llama + its multipliers (add_family_keys);
    # OLMo 2 has NeoX rotary (no permutation) and its own post-attention/post-MLP norm tensor names; Phi-3 keeps
    # its fused qkv/gate_up, NeoX rotary over part of each head (rope_dims) and a sliding-window key
    "granite": ("GRANITE", True),
    "olmo2": ("OLMO2", False),
    "phi3": ("PHI3", False),
    "gemma2": ("GEMMA2", False),
    # Gemma 3 (text): Gemma 2's norms (+1, q/k norms too), NeoX rotary, plus the sliding pattern written per layer
    # (llama.cpp's default is 1-in-6 global) and the local rope base; what llama.cpp fixes: gemma3_refusal
    "gemma3_text": ("GEMMA3", False),
    # MoE: llama.cpp stacks each layer's experts into one 3-D tensor per projection (ffn_{gate,up,down}_exps, expert
    # index outermost), keeps the router (ffn_gate_inp) in F32 and reads the expert counts (add_family_keys).
    # Mixtral is llama (permuted q/k) with experts; the Qwen MoEs and OLMoE have NeoX rotary (HF's order)
    "mixtral": ("LLAMA", True),
    "qwen2_moe": ("QWEN2MOE", False),
    "qwen3_moe": ("QWEN3MOE", False),
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


# model_type -> why no GGUF can be run: llama.cpp has no architecture for the family (gguf-py's MODEL_ARCH and its
# converter know none), so there is nothing to write it for
NO_LLAMA_CPP: dict[str, str] = {
    "jetmoe": "llama.cpp has no JetMoE architecture (neither its mixture of attention heads nor its ParallelExperts "
    "MLP), so no llama.cpp build can run it",
}
