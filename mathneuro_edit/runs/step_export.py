"""The ``export`` stage of a recipe: one output of its edit written into a folder, by that output's exporter.

:data:`EXPORTERS` holds one :class:`Exporter` per output a run writes with a step of its own, keyed by the output's
name in the registry (:mod:`mathneuro_edit.publish.outputs`): the checkpoint (streamed, with the GGUF files the
recipe asks for: that output is written from the finished checkpoint) and the PEFT adapter, with the check that
refuses a model the adapter cannot express before any weight is read. :func:`export_step` dispatches to it;
:func:`output_kinds` lists the outputs a recipe asks for. What the exports, the lock and the cards record about
the base is one :class:`BaseRecord`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..engine.mask import Mask
from ..engine.targets import find_targets
from ..errors import InputError
from ..publish.base_card import base_card_fields
from ..publish.gguf_naming import gguf_general
from ..publish.lock import base_description, weights_sha256
from ..publish.outputs import ADAPTER, CHECKPOINT, Output, output
from ..recipe.schema import Recipe
from ..util.console import Stages
from ..weights.adapter import export_adapter
from ..weights.base import base_reference, resolved_revision
from ..weights.checkpoint_writer import export_checkpoint
from ..weights.gguf_reader import gguf_lock_entry, gguf_source_dtype
from ..weights.gguf_writer import check_gguf, gguf_filename, gguf_public_name, write_gguf
from ..weights.support import adapter_refusal

__all__ = [
    "BaseRecord",
    "base_record",
    "Exporter",
    "EXPORTERS",
    "register_exporter",
    "output_kinds",
    "output_checks",
    "export_step",
    "check_adapter_support",
    "output_dtype",
]


@dataclass(frozen=True)
class Exporter:
    """How a run writes one output: ``write(recipe, base, mask, dest, *, n_params, gguf, progress, workers,
    stages)`` writes its files into ``dest`` and returns its size as a fraction of the checkpoint's when it reports
    one (the adapter), else ``None``; ``check(recipe, model)``, when set, refuses a model the output cannot
    express, from a model on the meta device (before any weight is read) or a loaded one."""

    write: Callable[..., float | None]
    check: Callable[[Recipe, Any], None] | None = None


EXPORTERS: dict[str, Exporter] = {}


def register_exporter(
    out: Output, write: Callable[..., float | None], check: Callable[[Recipe, Any], None] | None = None
) -> None:
    """Give a registered output its run step (one per output; an output written by another's step, the GGUF, has
    none). A run writes it when the recipe's ``outputs.<name>`` is on."""
    if out.name in EXPORTERS:
        raise ValueError(f"output {out.name!r} already has an exporter")
    EXPORTERS[out.name] = Exporter(write, check)


def output_kinds(recipe: Recipe) -> list[str]:
    """The outputs a run writes with a step of their own, in order: each whose ``outputs.<name>`` is on (the
    checkpoint, with its GGUF files, and the adapter)."""
    return [name for name in EXPORTERS if getattr(recipe.outputs, name)]


def output_checks(kinds: list[str]) -> list[Callable[[Recipe, Any], None]]:
    """The model checks of the listed outputs (the adapter's: :func:`check_adapter_support`)."""
    return [c for c in (EXPORTERS[k].check for k in kinds) if c is not None]


def check_adapter_support(recipe: Recipe, model: Any) -> None:
    """Refuse ``outputs.adapter`` when a target is not a plain ``nn.Linear`` (PEFT cannot express it exactly):
    the family gets a checkpoint only, and the message names the recipe line. ``model`` may be on the meta device."""
    t = recipe.targets
    targets = find_targets(model, include=t.include or None, exclude=t.exclude or None)
    refusal = adapter_refusal(model, targets, str(getattr(model.config, "model_type", "?")))
    if refusal is not None:
        raise InputError(refusal)


@dataclass(frozen=True)
class BaseRecord:
    """What the exports, the lock and the cards record about the base: its resolved folder, revision (the adapter
    pins it), a GGUF base's entry and weights hash, and its card's license fields."""

    folder: Path
    revision: str | None
    gguf: dict | None
    weights: dict | None
    card_fields: Any


def base_record(recipe: Recipe, folder: Path) -> BaseRecord:
    """A GGUF base records the GGUF file's own hash and the dequantized folder's, which the outputs were made from;
    other bases record the resolved Hub revision (weights are hashed by :func:`~mathneuro_edit.publish.lock.build_lock`)."""
    if recipe.base.is_gguf:
        gguf, revision = gguf_lock_entry(recipe.base)
        weights = weights_sha256(folder)
    else:
        revision, gguf, weights = resolved_revision(folder), None, None
    return BaseRecord(folder, revision, gguf, weights, base_card_fields(base_reference(recipe), recipe.base.revision))


def gguf_meta(recipe: Recipe, n_params: int, fields: dict | None, gguf: dict | None = None) -> dict[str, Any]:
    """The ``general.*`` metadata of the run's GGUF, from the same public names the lock and the GGUF repo use
    (:func:`~mathneuro_edit.publish.card.gguf_general`); ``gguf`` is a GGUF base's lock entry (its own names)."""
    public = recipe.public_dict()
    local = recipe.base.local_dir()
    base: dict[str, Any] = {"model": public["base"]["model"], **({"gguf": gguf} if gguf else {})}
    if local is not None and local.is_dir():
        base["description"] = base_description(local)
    return gguf_general(
        {
            "base": base,
            "recipe": {"edit": public["edit"], "base": public["base"]},
            "edit_summary": {"model_params": n_params},
        },
        fields,
    )


def output_dtype(recipe: Recipe) -> str | None:
    """The checkpoint's dtype (``outputs.dtype``): as set; ``auto`` is the base's own (``None``: every tensor
    keeps its type), or for a GGUF base its source's (:func:`~mathneuro_edit.weights.gguf_reader.gguf_source_dtype`:
    bfloat16 unless the GGUF holds F32/F16/BF16 weights), never the float32 of its dequantized folder."""
    if recipe.outputs.dtype != "auto":
        return recipe.outputs.dtype
    return gguf_source_dtype(recipe.base) if recipe.base.is_gguf else None


def release_dtype(recipe: Recipe) -> Any:
    """:func:`output_dtype` as a torch dtype (``None``: every tensor keeps its type): what an evaluation of the
    release rounds the model to (:func:`~mathneuro_edit.engine.apply.round_weights_`)."""
    import torch

    name = output_dtype(recipe)
    return None if name is None else getattr(torch, name)


def gguf_name(recipe: Recipe) -> str:
    """What a GGUF output's ``general.name`` starts with: ``base.hub_id`` when set, else ``base.model`` (a local
    path becomes "local model" in :func:`~mathneuro_edit.weights.checkpoint_writer.export_checkpoint`)."""
    return recipe.base.hub_id or recipe.base.model


def adapter_base(recipe: Recipe, revision: str | None) -> tuple[str | None, str | None]:
    """``(base_model_name_or_path, revision)`` an adapter records: ``base.hub_id`` (and ``hub_revision``) for a
    local folder that names its Hub origin; ``(None, revision)`` for the default (the Hub id of a Hub base).

    A GGUF base's adapter names no Hub id: it was computed against the dequantized GGUF, whose
    weights are other numbers; naming the Hub id would let ``AutoPeftModelForCausalLM`` load the adapter onto
    the wrong weights without an error. Its card names the dequantized folder instead."""
    b = recipe.base
    if b.hub_id is not None and not b.is_gguf:
        return b.hub_id, b.hub_revision
    return None, revision


def export_step(
    recipe: Recipe,
    base: BaseRecord,
    mask: Mask,
    dest: Path,
    kind: str,
    *,
    n_params: int,
    gguf: tuple[str | None, str | None] = (None, None),
    progress: bool = True,
    workers: int = 1,
    stages: Stages | None = None,
) -> float | None:
    """Write one output of the recipe's edit into ``dest`` with its exporter (:data:`EXPORTERS`): ``"checkpoint"``
    (streamed, + ``model-TYPE.gguf`` when ``gguf`` = ``(type, tokenizer.ggml.pre)`` names a type) or
    ``"adapter"`` (PEFT SHiRA). Returns the adapter's size as a fraction of the checkpoint's (``None`` for a
    checkpoint)."""
    out = output(kind)
    if out.name not in EXPORTERS:
        raise InputError(f"kind: {kind!r} has no export step of its own; it is written with the {out.derived_from}")
    return EXPORTERS[out.name].write(
        recipe, base, mask, dest, n_params=n_params, gguf=gguf, progress=progress, workers=workers, stages=stages
    )


def write_checkpoint(
    recipe: Recipe,
    base: BaseRecord,
    mask: Mask,
    dest: Path,
    *,
    n_params: int,
    gguf: tuple[str | None, str | None] = (None, None),
    progress: bool = True,
    workers: int = 1,
    stages: Stages | None = None,
) -> None:
    """The checkpoint's step: the edited checkpoint streamed into ``dest`` and, when ``gguf`` names a type, its
    ``model-TYPE.gguf`` written from the finished folder (checked first, before the long steps)."""
    scale = recipe.edit.effective_scale
    gguf_type, gguf_pre = gguf
    if stages is not None:
        stages.start(f"export {CHECKPOINT.folder}/" + (f" + model-{gguf_type}.gguf" if gguf_type else ""))
    name = gguf_public_name(gguf_name(recipe))
    if gguf_type is not None:  # fail before the long steps: type, package, architecture, tokenizer
        check_gguf(base.folder, gguf_type, name=name)
    export_checkpoint(
        base.folder,
        mask,
        scale,
        dest,
        max_shard_size=recipe.outputs.max_shard_size,
        progress=progress,
        workers=workers,
        trust_remote_code=recipe.base.trust_remote_code,
        dtype=output_dtype(recipe),
    )
    if gguf_type is not None:  # the sibling writer, from the finished checkpoint folder (checked above)
        meta = gguf_meta(recipe, n_params, base.card_fields, base.gguf)
        write_gguf(dest, dest / gguf_filename(gguf_type), gguf_type, name=name, pre=gguf_pre, meta=meta)
    return None


def write_adapter(
    recipe: Recipe,
    base: BaseRecord,
    mask: Mask,
    dest: Path,
    *,
    n_params: int,
    gguf: tuple[str | None, str | None] = (None, None),
    progress: bool = True,
    workers: int = 1,
    stages: Stages | None = None,
) -> float:
    """The adapter's step: the PEFT SHiRA adapter of the edit into ``dest``, pinned to the base it was computed
    against (:func:`adapter_base`). Returns its size as a fraction of the checkpoint's."""
    if stages is not None:
        stages.start(f"export {ADAPTER.folder}/ (PEFT SHiRA)")
    named, pinned = adapter_base(recipe, base.revision)
    adapter = export_adapter(
        base.folder,
        mask,
        recipe.edit.effective_scale,
        dest,
        revision=pinned,
        base_model_name_or_path=named,
        trust_remote_code=recipe.base.trust_remote_code,
    )
    if stages is not None:
        stages.note(f"{100 * adapter.size_ratio:.2f}% of the checkpoint's size")
    return adapter.size_ratio


register_exporter(CHECKPOINT, write_checkpoint)
register_exporter(ADAPTER, write_adapter, check_adapter_support)
