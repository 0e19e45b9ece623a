"""GGUF architectures: per model family, what llama.cpp's converter does and what llama.cpp hard-codes.

Each family the GGUF export writes is one :class:`Family` (:mod:`.family` says how it is registered and asked). A
family is only added with the test that llama.cpp itself loads its file, tokenizes like transformers, and its
logits and greedy continuation match transformers' (tests/runs/test_families.py); what llama.cpp computes from
fixed rules instead of reading a key is refused when a config differs, with one line that ``plan`` prints before
any weight is read (:func:`gguf_refusal`).

Modules: :mod:`.family` (:class:`Family` and the registry), :mod:`.registry` (the lookups, and the import of
every family module), :mod:`.table` (the families not written), :mod:`.common` (:class:`View`, expert count and
keys, layer types), :mod:`.rope` (YaRN), and one per family group, each registering its families: :mod:`.dense`
(Llama, Mistral, Qwen2/3, OLMo 2, Granite, Phi-3, SmolLM3, GPT-2), :mod:`.gemma` (Gemma 2/3), :mod:`.moe`
(Mixtral, Qwen2/3-MoE, OLMoE), :mod:`.gpt_oss`, :mod:`.deepseek` (DeepSeek-V3), :mod:`.llama4` (Llama 4 text).
The conventions each follows: docs/formats.md (generated from the registrations by scripts/gguf_families_doc.py).
"""

import lazy_loader

# imported now, not on first access: it imports every family module, and each registers its families in
# FAMILIES (which would be empty otherwise)
from . import registry  # noqa: F401

# the face's names are __init__.pyi's imports (its one list, which type checkers read too), each loaded on first
# access from the module that defines it
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
