"""Every reader and writer of weights: base checkpoints, shards and headers, GGUF in and out, the PEFT adapter.

Contract: a base (:mod:`.base` resolves it: organism, local folder, ``.gguf`` file or Hub id) is read without
loading the model, edited by the one rule of :func:`mathneuro_edit.engine.apply.scale_masked` and written
streamed and atomically; :mod:`.audit` recomputes every expected tensor of an export. Each module's part:
docs/architecture.md.
"""

import lazy_loader

# the face's names are __init__.pyi's imports (its one list, which type checkers read too), each loaded on first
# access from the module that defines it: importing the face imports none of the package's modules, and no torch
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
