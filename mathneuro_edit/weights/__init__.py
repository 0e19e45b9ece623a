"""Every reader and writer of weights: base checkpoints, shards and headers, GGUF in and out, the PEFT adapter.

Contract: a base (:mod:`.base` resolves it: organism, local folder, ``.gguf`` file or Hub id) is read without
loading the model (:mod:`.checkpoint`, :mod:`.headers`), edited by the one rule of
:func:`mathneuro_edit.engine.apply.scale_masked` (:mod:`.edit_plan` maps mask names to tensors) and written
streamed and atomically (:mod:`.checkpoint_writer`, :mod:`.shards`, :mod:`.adapter`, :mod:`.gguf_writer`, whose
tokenizer keys :mod:`.gguf_vocab` writes);
:mod:`.audit` recomputes every expected tensor of an export; :mod:`.loading` loads a model for calibration and
evaluation; :mod:`.remote_code` refuses repository code without an explicit opt-in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..util.lazy import lazy_face

# public name -> the module that defines it, imported on first access (importing one module of this package
# never imports its siblings: torch loads only where it is used)
_LAZY: dict[str, str] = {
    "AdapterExport": "adapter",
    "export_adapter": "adapter",
    "load_edited": "adapter",
    "VerifyReport": "audit",
    "verify": "audit",
    "base_reference": "base",
    "resolve_base": "base",
    "resolve_model_path": "base",
    "Checkpoint": "checkpoint",
    "open_checkpoint": "checkpoint",
    "export_checkpoint": "checkpoint_writer",
    "dequantize_gguf": "gguf_reader",
    "write_gguf": "gguf_writer",
    "load_model": "loading",
    "model_weights": "loading",
    "weights_from_checkpoint": "loading",
}

__all__ = [
    "AdapterExport",
    "export_adapter",
    "load_edited",
    "VerifyReport",
    "verify",
    "base_reference",
    "resolve_base",
    "resolve_model_path",
    "Checkpoint",
    "open_checkpoint",
    "export_checkpoint",
    "dequantize_gguf",
    "write_gguf",
    "load_model",
    "model_weights",
    "weights_from_checkpoint",
]

if TYPE_CHECKING:
    from .adapter import AdapterExport, export_adapter, load_edited
    from .audit import VerifyReport, verify
    from .base import base_reference, resolve_base, resolve_model_path
    from .checkpoint import Checkpoint, open_checkpoint
    from .checkpoint_writer import export_checkpoint
    from .gguf_reader import dequantize_gguf
    from .gguf_writer import write_gguf
    from .loading import load_model, model_weights, weights_from_checkpoint

__getattr__, __dir__ = lazy_face(__name__, _LAZY)
