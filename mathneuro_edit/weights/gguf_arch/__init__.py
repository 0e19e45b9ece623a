"""GGUF architectures: per model family, what llama.cpp's converter does and what llama.cpp hard-codes.

:mod:`..gguf_writer` writes the families of :data:`GGUF_WRITTEN` and asks this package, from ``config.json``
alone, for each family's keys, one-to-many tensors (:class:`View`), rotary dimensions and refusal. A family is
only added with the test that llama.cpp itself loads its file, tokenizes like transformers, and its logits and
greedy continuation match transformers' (tests/runs/test_families.py); what llama.cpp computes from fixed rules
instead of reading a key is refused when a config differs, with one line that ``plan`` prints before any weight
is read (:func:`gguf_refusal`).

Modules: :mod:`.table` (which families), :mod:`.registry` (the dispatch), :mod:`.common` (:class:`View`, expert
count, layer types), :mod:`.rope` (YaRN), and one per family group: :mod:`.moe` (Mixtral, Qwen2/3-MoE, OLMoE),
:mod:`.gemma` (Gemma 2/3), :mod:`.gpt_oss`, :mod:`.deepseek` (DeepSeek-V3), :mod:`.llama4` (Llama 4 text),
:mod:`.dense` (SmolLM3, GPT-2, Phi-3, Granite). The conventions each follows: docs/formats.md.
"""

from __future__ import annotations

from .common import SLIDING, View, expert_count, layer_types
from .deepseek import MLA
from .dense import has_rotary, llama_names
from .gemma import gemma3_refusal, rope_by_layer_type, tensor_shift
from .gpt_oss import GPT_OSS_SWIGLU
from .llama4 import LLAMA4_FIXED, LLAMA4_NOPE_PERIOD
from .moe import MOE_NORM_TOPK
from .registry import (
    add_family_keys,
    feed_forward_length,
    gguf_refusal,
    rope_dims,
    tensor_views,
)
from .rope import yarn_ramp_bounds
from .table import GGUF_PENDING, GGUF_WRITTEN, NO_LLAMA_CPP

__all__ = [
    "GGUF_WRITTEN",
    "GGUF_PENDING",
    "NO_LLAMA_CPP",
    "gguf_refusal",
    "add_family_keys",
    "tensor_views",
    "rope_dims",
    "feed_forward_length",
    "tensor_shift",
    "View",
    "expert_count",
    "layer_types",
    "SLIDING",
    "MLA",
    "llama_names",
    "has_rotary",
    "gemma3_refusal",
    "rope_by_layer_type",
    "GPT_OSS_SWIGLU",
    "LLAMA4_FIXED",
    "LLAMA4_NOPE_PERIOD",
    "MOE_NORM_TOPK",
    "yarn_ramp_bounds",
]
