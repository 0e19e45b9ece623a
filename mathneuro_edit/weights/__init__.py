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

from .adapter import AdapterExport, export_adapter, load_edited
from .audit import VerifyReport, verify
from .base import base_reference, resolve_base, resolve_model_path
from .checkpoint import Checkpoint, open_checkpoint
from .checkpoint_writer import export_checkpoint
from .gguf_reader import dequantize_gguf
from .gguf_writer import write_gguf
from .loading import load_model, model_weights, weights_from_checkpoint

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
