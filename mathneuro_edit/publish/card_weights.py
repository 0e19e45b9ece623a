"""The model card's paragraphs on the form of the weights: a GGUF base and a cast dtype.

Each is empty unless the run made that form (a GGUF base, ``outputs.dtype`` other than the base's), so most cards
show neither. Kept apart from :mod:`mathneuro_edit.publish.card` (the card's assembly) because they depend on the
lock and the output only, not on the recipe, and their exact text is tested on its own. What differs per output
(its sentence on a GGUF base) is its entry's (:attr:`~mathneuro_edit.outputs.registry.Output.on_gguf_base`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..outputs.registry import Output, own_files

__all__ = ["dtype_note", "gguf_base_note"]


def dtype_note(lock: Mapping[str, Any], out: Output, weights_dtype: str | None) -> str:
    """The card's sentence on ``outputs.dtype`` (empty when the checkpoint keeps the base's own dtype)."""
    dtype = ((lock.get("recipe") or {}).get("outputs") or {}).get("dtype")
    if out.deltas or (lock.get("base") or {}).get("gguf") or dtype in (None, "auto") or not weights_dtype:
        return ""
    return (
        f"\nThe weights are stored in {weights_dtype} (`outputs.dtype`): the edit was computed in the base's own "
        "dtype and the result cast; the evaluation below ran on these stored weights (read into the base's dtype).\n"
    )


def gguf_base_note(lock: Mapping[str, Any], out: Output, weights_dtype: str | None = None) -> str:
    """The card's paragraph on a GGUF base (empty for other bases): what the weights are and where the base is."""
    gguf = (lock.get("base") or {}).get("gguf")
    if not gguf:
        return ""
    stored = weights_dtype or "float32"
    cast = (
        ""
        if stored == "float32"
        else (
            f", then stored in {stored} (`outputs.dtype`; the evaluation below ran on these {stored} weights, in float32)"
        )
    )
    what = out.on_gguf_base(cast, own_files(out, lock))
    return (
        f"\nThe base is the GGUF file `{gguf['file']}` (sha256 `{gguf['sha256']}`), dequantized to float32 by "
        f"transformers. {what}. `mathneuro-edit dequantize FILE.gguf` writes the dequantized base folder once "
        "and prints its path; its safetensors sha256 are the lock's `base.weights_sha256`.\n"
    )
