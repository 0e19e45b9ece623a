"""The edited checkpoint: a plain transformers folder, streamed from the base's files with the edit baked in.

Its entry, its run step (:func:`write_checkpoint`, at ``outputs.dtype``: :func:`output_dtype`) and its card's data
(its snippet's and "Where it loads" words are the card template's; its files cell and its sentence on a GGUF base).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .common import snippet_facts
from .registry import Output, RunView, register_output

__all__ = [
    "CHECKPOINT",
    "write_checkpoint",
    "audit_weights",
    "output_dtype",
]


def output_dtype(recipe: Any) -> str | None:
    """The checkpoint's dtype (``outputs.dtype``): as set; ``auto`` is the base's own (``None``: every tensor
    keeps its type), or for a GGUF base its source's (:func:`~mathneuro_edit.weights.gguf_reader.gguf_source_dtype`:
    bfloat16 unless the GGUF holds F32/F16/BF16 weights), never the float32 of its dequantized folder."""
    if recipe.outputs.dtype != "auto":
        return recipe.outputs.dtype
    if not recipe.base.is_gguf:
        return None
    from ..weights.gguf_reader import gguf_source_dtype  # reads the GGUF base (and torch): only for one

    return gguf_source_dtype(recipe.base)


def write_checkpoint(job: RunView, dest: Path) -> None:
    """The checkpoint's step: the edited checkpoint streamed into ``dest`` at :func:`output_dtype`."""
    from ..weights.checkpoint_writer import export_checkpoint  # torch: only when a run writes it

    recipe = job.recipe
    export_checkpoint(
        job.base.folder,
        job.mask,
        recipe.edit.effective_scale,
        dest,
        max_shard_size=recipe.outputs.max_shard_size,
        progress=job.progress,
        workers=job.workers,
        trust_remote_code=recipe.base.trust_remote_code,
        dtype=output_dtype(recipe),
    )


def audit_weights(folder: Path, base: str, mask: Any, scale: float, **how: Any) -> Any:
    """``verify``'s audit of an output of weights (the checkpoint, with the GGUF files beside it, or the adapter):
    every tensor against the base, the mask and the scale
    (:func:`~mathneuro_edit.weights.audit.verify`; ``how``: ``trust_remote_code``, ``progress``)."""
    from ..weights.audit import verify  # torch: only when a folder is audited

    return verify(folder, base, mask, scale, **how)


CHECKPOINT = register_output(
    Output(
        name="checkpoint",
        gguf_files=False,
        repo_suffix="",
        library="transformers",
        relation="finetune",
        tags=(),
        holds="model is",
        evaluated=True,
        usage=lambda out, view: snippet_facts(view),  # card_template.md's checkpoint_usage; where it loads too
        files_cell=lambda weights_dtype, files: (
            f"safetensors, {weights_dtype or 'the base model dtype'} (not quantized)"
        ),
        on_gguf_base=lambda cast, files: (
            f"These weights are that dequantized model with the edit (computed in float32{cast}; safetensors, not "
            "quantized)"
        ),
        write=write_checkpoint,
        stage=lambda recipe: f"export {CHECKPOINT.folder}/",
        audit=audit_weights,
    )
)
