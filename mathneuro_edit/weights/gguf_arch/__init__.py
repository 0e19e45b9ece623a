"""GGUF architectures: per model family, what llama.cpp's converter does and what llama.cpp hard-codes.

Each family the GGUF export writes is one :class:`Family` (:mod:`.family`), added only with the test that llama.cpp
runs its file as transformers runs the model (docs/extending.md, "A GGUF family"); what llama.cpp computes from
fixed rules instead of reading a key is refused when a config differs, with one line that ``plan`` prints before
any weight is read (:func:`gguf_refusal`). The modules: docs/architecture.md; each family's conventions:
docs/formats.md (generated from the registrations).
"""

import lazy_loader

# imported now, not on first access: it imports every family module, and each registers its families in
# FAMILIES (which would be empty otherwise)
from . import registry  # noqa: F401

# the face's names are __init__.pyi's imports (its one list, which type checkers read too), each loaded on first
# access from the module that defines it
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
