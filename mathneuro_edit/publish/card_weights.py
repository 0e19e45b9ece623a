"""What the model card says of the form of the weights (a GGUF base, a cast dtype) and the dtype its figures were
computed in (what its snippet loads in); the paragraphs' words are the card's template's. Each is empty unless the
run made that form, so most cards show neither; they read the lock and the output only, not the recipe.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..outputs.common import FLOAT_DTYPE_NAMES
from ..outputs.registry import Output, own_files

__all__ = ["cast_dtype", "gguf_base", "compute_dtype", "load_dtype"]


def cast_dtype(lock: Mapping[str, Any], out: Output, weights_dtype: str | None) -> str | None:
    """The dtype ``outputs.dtype`` cast the stored weights to, for the card's sentence on it; ``None`` when the
    checkpoint keeps the base's own dtype (``auto``), the output holds deltas, or the base is a GGUF (its paragraph
    says it)."""
    dtype = ((lock.get("recipe") or {}).get("outputs") or {}).get("dtype")
    if out.deltas or (lock.get("base") or {}).get("gguf") or dtype in (None, "auto") or not weights_dtype:
        return None
    return weights_dtype


def gguf_base(lock: Mapping[str, Any], out: Output, weights_dtype: str | None = None) -> dict[str, str] | None:
    """What the card's paragraph on a GGUF base shows (``None`` for other bases): the file, its sha256 and what the
    output's files are of it (:attr:`~mathneuro_edit.outputs.registry.Output.on_gguf_base`)."""
    gguf = (lock.get("base") or {}).get("gguf")
    if not gguf:
        return None
    stored = weights_dtype or "float32"
    cast = (
        f", then stored in {stored} (`outputs.dtype`; the evaluation below ran on these {stored} weights, in float32)"
    )
    what = out.on_gguf_base(cast if stored != "float32" else "", own_files(out, lock))
    return {"file": gguf["file"], "sha256": gguf["sha256"], "what": what}


def compute_dtype(lock: Mapping[str, Any]) -> str | None:
    """The dtype the card's figures were computed in: a sweep's confirmation's (as recorded, else as its recipe
    says), else the run's model's: ``base.dtype`` when set, float32 for a GGUF base (loaded dequantized to
    float32); ``None`` when the lock does not say (``base.dtype: auto`` of a model folder: the base's own).

    Example:
        >>> compute_dtype({"recipe": {"base": {"dtype": "auto"}}, "base": {"gguf": {"file": "m.gguf"}}})
        'float32'
        >>> compute_dtype({"sweep": {"confirmation": {"compute_dtype": "float32"}}, "recipe": {"base": {}}})
        'float32'
    """
    sweep = lock.get("sweep") if isinstance(lock.get("sweep"), Mapping) else {}
    confirmed = (sweep.get("confirmation") or {}).get("compute_dtype")
    asked = ((lock.get("recipe") or {}).get("base") or {}).get("dtype")
    found = next((str(d) for d in (confirmed, asked) if d in FLOAT_DTYPE_NAMES), None)
    return found or ("float32" if (lock.get("base") or {}).get("gguf") else None)


def load_dtype(lock: Mapping[str, Any], weights_dtype: str | None) -> str | None:
    """The dtype a card's snippet loads the checkpoint in: the one its figures were computed in
    (:func:`compute_dtype`) when the stored weights' dtype (``weights_dtype``, what a default transformers 5 load
    computes in) is another; ``None`` when a default load computes as the figures were, or either is unknown.

    Example:
        >>> lock = {"recipe": {"base": {"dtype": "float32"}}}
        >>> load_dtype(lock, "bfloat16"), load_dtype(lock, "float32")
        ('float32', None)
    """
    dtype = compute_dtype(lock)
    return dtype if dtype is not None and weights_dtype is not None and dtype != weights_dtype else None
