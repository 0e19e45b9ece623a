"""GGUF architectures: per model family, what llama.cpp's converter does and what llama.cpp hard-codes.

Each family the GGUF export writes is one :class:`Family` object, registered by its module with
:func:`register_family` (as llama.cpp's converter registers a class per architecture); :mod:`..gguf_writer` looks
it up once (:func:`family_for`) and asks it, from ``config.json`` alone, for its architecture, keys, one-to-many
tensors (:class:`View`), rotary dimensions and refusal. A family is only added with the test that llama.cpp
itself loads its file, tokenizes like transformers, and its logits and greedy continuation match transformers'
(tests/runs/test_families.py); what llama.cpp computes from fixed rules instead of reading a key is refused when a
config differs, with one line that ``plan`` prints before any weight is read (:func:`gguf_refusal`).

Modules: :mod:`.family` (:class:`Family` and the registry), :mod:`.registry` (the lookups, and the import of
every family module), :mod:`.table` (the families not written), :mod:`.common` (:class:`View`, expert count and
keys, layer types), :mod:`.rope` (YaRN), and one per family group, each registering its families: :mod:`.dense`
(Llama, Mistral, Qwen2/3, OLMo 2, Granite, Phi-3, SmolLM3, GPT-2), :mod:`.gemma` (Gemma 2/3), :mod:`.moe`
(Mixtral, Qwen2/3-MoE, OLMoE), :mod:`.gpt_oss`, :mod:`.deepseek` (DeepSeek-V3), :mod:`.llama4` (Llama 4 text).
The conventions each follows: docs/formats.md (generated from the registrations by scripts/gguf_families_doc.py).
"""

from __future__ import annotations

from .common import SLIDING, View, expert_count, layer_types
from .family import FAMILIES, LLAMA_ROPE_SCALINGS, Family, family_for, register_family, rope_scalings_note
from .gemma import gemma3_refusal, rope_by_layer_type
from .gpt_oss import GPT_OSS_SWIGLU
from .llama4 import LLAMA4_FIXED, LLAMA4_NOPE_PERIOD
from .registry import GGUF_WRITTEN, gguf_refusal, tensor_shift
from .rope import yarn_ramp_bounds
from .table import GGUF_PENDING, NO_LLAMA_CPP

__all__ = [
    "Family",
    "FAMILIES",
    "register_family",
    "family_for",
    "LLAMA_ROPE_SCALINGS",
    "rope_scalings_note",
    "GGUF_WRITTEN",
    "GGUF_PENDING",
    "NO_LLAMA_CPP",
    "gguf_refusal",
    "tensor_shift",
    "View",
    "expert_count",
    "layer_types",
    "SLIDING",
    "gemma3_refusal",
    "rope_by_layer_type",
    "GPT_OSS_SWIGLU",
    "LLAMA4_FIXED",
    "LLAMA4_NOPE_PERIOD",
    "yarn_ramp_bounds",
]
