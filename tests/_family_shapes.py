"""Tiny configs of the model families math releases are built on: each released config's shape, scaled down.

Every entry keeps what decides how mathneuro-edit handles a family (layer types, tied embeddings, fused
projections, the MoE layout, rope settings, multipliers, soft-capping) and shrinks the sizes (hidden 64, 2-4
layers, a few experts, the organism's 703-token byte-level BPE vocabulary) so that a whole run takes seconds on
a CPU. :mod:`.families` builds and runs them (``python scripts/families.py`` writes docs/families.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["FamilyShape", "FAMILY_SHAPES", "family_shape"]

VOCAB = 703  # the organism's tokenizer (byte-level BPE), so that every family's GGUF has a real vocabulary
_COMMON: dict[str, Any] = dict(
    vocab_size=VOCAB,
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    max_position_embeddings=256,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=0,
)


@dataclass(frozen=True)
class FamilyShape:
    """One family: the released model whose config it follows, the transformers config class and its kwargs.

    Attributes:
        name: the family as the matrix names it (``"Qwen2.5"``).
        released: the Hub id whose ``config.json`` the shape follows.
        config_class: the transformers config class (``"Qwen2Config"``).
        kwargs: the scaled-down config (``_COMMON`` plus the family's own keys).
        kept: what of the released config's shape is kept, in words (the matrix prints it).
    """

    name: str
    released: str
    config_class: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    kept: str = ""

    def config(self) -> Any:
        """The transformers config object."""
        import transformers

        return getattr(transformers, self.config_class)(**{**_COMMON, **self.kwargs})


_GQA = dict(num_key_value_heads=2)

FAMILY_SHAPES: tuple[FamilyShape, ...] = (
    FamilyShape(
        "Llama 3.x",
        "meta-llama/Llama-3.2-1B-Instruct",
        "LlamaConfig",
        dict(
            _GQA,
            intermediate_size=128,
            head_dim=16,
            tie_word_embeddings=True,
            rms_norm_eps=1e-5,
            rope_parameters={
                "rope_type": "llama3",
                "rope_theta": 500000.0,
                "factor": 32.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64,
            },
        ),
        "GQA, tied embeddings, llama3 rope scaling",
    ),
    FamilyShape(
        "Mistral",
        "mistralai/Mistral-7B-Instruct-v0.3",
        "MistralConfig",
        dict(
            _GQA,
            intermediate_size=128,
            tie_word_embeddings=False,
            sliding_window=None,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        ),
        "GQA, untied, no sliding window",
    ),
    FamilyShape(
        "Qwen2.5",
        "Qwen/Qwen2.5-Math-1.5B",
        "Qwen2Config",
        dict(
            _GQA,
            intermediate_size=128,
            tie_word_embeddings=True,
            use_sliding_window=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        ),
        "q/k/v biases, GQA, tied",
    ),
    FamilyShape(
        "Qwen3",
        "Qwen/Qwen3-1.7B",
        "Qwen3Config",
        dict(
            _GQA,
            intermediate_size=128,
            head_dim=128,
            tie_word_embeddings=True,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        ),
        "q/k norms, head_dim != hidden/heads, tied",
    ),
    FamilyShape(
        "Qwen2-MoE",
        "Qwen/Qwen1.5-MoE-A2.7B",
        "Qwen2MoeConfig",
        dict(
            _GQA,
            intermediate_size=128,
            moe_intermediate_size=32,
            shared_expert_intermediate_size=64,
            num_experts=4,
            num_experts_per_tok=2,
            decoder_sparse_step=1,
            mlp_only_layers=[],
            tie_word_embeddings=False,
        ),
        "routed experts (fused) + shared expert with its sigmoid gate, q/k/v biases",
    ),
    FamilyShape(
        "Qwen3-MoE",
        "Qwen/Qwen3-30B-A3B",
        "Qwen3MoeConfig",
        dict(
            _GQA,
            intermediate_size=128,
            moe_intermediate_size=32,
            num_experts=4,
            num_experts_per_tok=2,
            decoder_sparse_step=1,
            mlp_only_layers=[],
            head_dim=128,
            norm_topk_prob=True,
            tie_word_embeddings=False,
        ),
        "fused experts, no shared expert, q/k norms",
    ),
    FamilyShape(
        "Mixtral",
        "mistralai/Mixtral-8x7B-Instruct-v0.1",
        "MixtralConfig",
        dict(_GQA, intermediate_size=64, num_local_experts=4, num_experts_per_tok=2, tie_word_embeddings=False),
        "fused experts (w1/w3 as gate_up), top-2 routing, untied",
    ),
    FamilyShape(
        "OLMoE",
        "allenai/OLMoE-1B-7B-0924",
        "OlmoeConfig",
        dict(
            num_key_value_heads=4,
            intermediate_size=32,
            num_experts=4,
            num_experts_per_tok=2,
            norm_topk_prob=False,
            tie_word_embeddings=False,
        ),
        "fused experts, router, q/k norms over the whole projection, untied",
    ),
    FamilyShape(
        "Gemma 2",
        "google/gemma-2-2b-it",
        "Gemma2Config",
        dict(
            _GQA,
            intermediate_size=128,
            head_dim=32,
            query_pre_attn_scalar=32,
            tie_word_embeddings=True,
            final_logit_softcapping=30.0,
            attn_logit_softcapping=50.0,
            sliding_window=16,
            layer_types=["sliding_attention", "full_attention"],
        ),
        "norm +1, embedding scaling, soft-capping, alternating sliding attention, tied",
    ),
    FamilyShape(
        "Gemma 3 (text)",
        "google/gemma-3-1b-it",
        "Gemma3TextConfig",
        dict(
            _GQA,
            intermediate_size=128,
            head_dim=32,
            query_pre_attn_scalar=32,
            tie_word_embeddings=True,
            sliding_window=8,
            num_hidden_layers=3,
            layer_types=["sliding_attention", "sliding_attention", "full_attention"],
        ),
        "q/k norms, local/global layers with their own rope (window 8: shorter than the test prompts), tied",
    ),
    FamilyShape(
        "Phi-3 / Phi-4",
        "microsoft/Phi-4-mini-instruct",
        "Phi3Config",
        dict(
            _GQA,
            intermediate_size=128,
            tie_word_embeddings=True,
            partial_rotary_factor=0.75,
            max_position_embeddings=1024,
            original_max_position_embeddings=512,
            rope_parameters={
                "rope_type": "longrope",
                "rope_theta": 10000.0,
                "original_max_position_embeddings": 512,
                "short_factor": [1.0, 1.2, 1.5, 2.0, 3.0, 4.0],
                "long_factor": [1.0, 2.0, 4.0, 8.0, 16.0, 32.0],
            },
        ),
        "fused qkv_proj and gate_up_proj, partial rotary, longrope (short and long factors, a context "
        "twice the original: llama.cpp pads its context to 256, so the original is 512 here), tied "
        "(Phi-4-mini)",
    ),
    FamilyShape(
        "OLMo 2",
        "allenai/OLMo-2-1124-7B-Instruct",
        "Olmo2Config",
        dict(_GQA, intermediate_size=128, tie_word_embeddings=False),
        "q/k norms over the whole projection, norms after attention and MLP, untied",
    ),
    FamilyShape(
        "Granite",
        "ibm-granite/granite-3.3-2b-instruct",
        "GraniteConfig",
        dict(
            _GQA,
            intermediate_size=128,
            tie_word_embeddings=True,
            embedding_multiplier=12.0,
            attention_multiplier=0.015625,
            residual_multiplier=0.22,
            logits_scaling=8.0,
        ),
        "embedding/attention/residual multipliers, logits scaling, tied",
    ),
    FamilyShape(
        "DeepSeek-V3",
        "deepseek-ai/DeepSeek-V3",
        "DeepseekV3Config",
        dict(
            num_key_value_heads=4,
            intermediate_size=128,
            moe_intermediate_size=32,
            n_routed_experts=4,
            n_shared_experts=1,
            num_experts_per_tok=2,
            n_group=2,
            topk_group=1,
            first_k_dense_replace=1,
            q_lora_rank=32,
            kv_lora_rank=16,
            qk_rope_head_dim=8,
            qk_nope_head_dim=8,
            v_head_dim=16,
            tie_word_embeddings=False,
        ),
        "MLA (q/kv low-rank), first layer dense, routed + shared experts, grouped routing",
    ),
    FamilyShape(
        "gpt-oss",
        "openai/gpt-oss-20b",
        "GptOssConfig",
        dict(
            num_key_value_heads=2,
            intermediate_size=64,
            head_dim=16,
            num_local_experts=4,
            num_experts_per_tok=2,
            sliding_window=8,
            tie_word_embeddings=False,
            layer_types=["sliding_attention", "full_attention"],
            rope_parameters={
                "rope_type": "yarn",
                "rope_theta": 150000.0,
                "factor": 4.0,
                "beta_fast": 32.0,
                "beta_slow": 1.0,
                "truncate": False,
                "original_max_position_embeddings": 64,
            },
        ),
        "fused transposed experts with biases, router bias, attention sinks, alternating sliding (window 8: "
        "shorter than the test prompts), yarn rope (truncate false, as released)",
    ),
    FamilyShape(
        "Llama 4 (text)",
        "meta-llama/Llama-4-Scout-17B-16E-Instruct",
        "Llama4TextConfig",
        dict(
            _GQA,
            intermediate_size=64,
            intermediate_size_mlp=128,
            head_dim=16,
            num_local_experts=4,
            num_experts_per_tok=1,
            interleave_moe_layer_step=1,
            num_hidden_layers=4,
            no_rope_layer_interval=4,
            attn_temperature_tuning=True,
            tie_word_embeddings=False,
        ),
        "fused experts + shared expert, sigmoid top-1 router, NoPE every 4th layer (the released interval, "
        "which llama.cpp hard-codes: layer 3 of 4), q/k L2 norm, chunked attention (8192 > test prompts)",
    ),
    FamilyShape(
        "JetMoE",
        "jetmoe/jetmoe-8b",
        "JetMoeConfig",
        dict(
            num_key_value_heads=2,
            kv_channels=16,
            intermediate_size=32,
            num_local_experts=4,
            num_experts_per_tok=2,
            tie_word_embeddings=True,
        ),
        "ParallelExperts (3-D, rows sorted by expert) in the MLP and a mixture of attention heads, tied",
    ),
    FamilyShape(
        "SmolLM3",
        "HuggingFaceTB/SmolLM3-3B",
        "SmolLM3Config",
        dict(
            _GQA,
            intermediate_size=128,
            tie_word_embeddings=True,
            num_hidden_layers=4,
            no_rope_layer_interval=4,
            use_sliding_window=False,
        ),
        "NoPE every 4th layer (no_rope_layer_interval 4: layer 3 of 4), GQA, tied",
    ),
    FamilyShape(
        "GPT-2",
        "openai-community/gpt2",
        "GPT2Config",
        dict(n_embd=64, n_layer=2, n_head=4, n_positions=256, tie_word_embeddings=True),
        "Conv1D projections (stored transposed), learned positions, tied",
    ),
)


def family_shape(name: str) -> FamilyShape:
    """The entry of :data:`FAMILY_SHAPES` called ``name``."""
    for s in FAMILY_SHAPES:
        if s.name == name:
            return s
    raise KeyError(name)
