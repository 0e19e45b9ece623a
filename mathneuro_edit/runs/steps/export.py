"""The ``export`` stage of a recipe: the outputs of its edit written into their folders, each by its own step (its
entry in the registry, :mod:`mathneuro_edit.outputs`), and what the exports, the lock and the cards record about
the base (one :class:`~mathneuro_edit.outputs.registry.BaseRecord`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ...errors import InputError
from ...outputs.checkpoint import output_dtype
from ...outputs.registry import OUTPUTS, BaseRecord, Output, output
from ...publish.base_card import base_card_fields
from ...publish.lock import base_description, weights_sha256
from ...recipe.input_sections import BaseConfig
from ...recipe.schema import Recipe
from ...util.hashing import sha256_file
from ...weights.base import base_reference, hub_commit, resolve_base, resolved_revision
from ...weights.gguf_reader import gguf_lock_entry, gguf_source
from .record import RunRecord

__all__ = [
    "base_record",
    "base_identity",
    "output_kinds",
    "derived_outputs",
    "prepare_outputs",
    "output_checks",
    "export_step",
    "release_dtype",
]


def output_kinds(recipe: Recipe) -> list[str]:
    """The outputs a run writes into a folder of their own, in order: each registered output the recipe asks for
    that is not made from another (the checkpoint and the adapter; the GGUF is written with the checkpoint)."""
    return [o.name for o in OUTPUTS.values() if o.derived_from is None and o.is_asked(recipe)]


def derived_outputs(recipe: Recipe, kind: str) -> list[Output]:
    """The outputs the recipe asks for that are made from output ``kind`` (written into its folder after it)."""
    return [o for o in OUTPUTS.values() if o.derived_from == kind and o.is_asked(recipe)]


def prepare_outputs(recipe: Recipe, folder: Path, kinds: Sequence[str]) -> None:
    """The checks from the recipe and the base's folder alone, once, before the model loads: of the listed outputs
    and of those made from them (the GGUF's type, architecture and tokenizer)."""
    for out in [o for k in kinds for o in (output(k), *derived_outputs(recipe, k))]:
        if out.prepare is not None:
            out.prepare(recipe, folder)


def output_checks(kinds: Sequence[str]) -> list[Callable[[Recipe, Any], None]]:
    """The model checks of the listed outputs (the adapter's:
    :func:`~mathneuro_edit.outputs.adapter.check_adapter_support`)."""
    return [c for c in (output(k).check for k in kinds) if c is not None]


def base_record(recipe: Recipe, folder: Path) -> BaseRecord:
    """A GGUF base records the GGUF file's own hash and the dequantized folder's, which the outputs were made from;
    other bases record the resolved Hub revision (weights are hashed by :func:`~mathneuro_edit.publish.lock.build_lock`).
    A local base's description is what a GGUF output's names fall back to."""
    if recipe.base.is_gguf:
        gguf, revision = gguf_lock_entry(recipe.base)
        weights = weights_sha256(folder)
    else:
        revision, gguf, weights = resolved_revision(folder), None, None
    local = recipe.base.local_dir()
    description = base_description(local) if local is not None and local.is_dir() else None
    fields = base_card_fields(base_reference(recipe.base), recipe.base.revision)
    return BaseRecord(folder, revision, gguf, weights, fields, description)


def base_identity(base: BaseConfig) -> dict[str, Any]:
    """The base model by content, never by place: what a sweep records as ``base_identity`` and ``run --from-sweep``
    compares (:func:`~mathneuro_edit.runs.sweep.evidence.base_difference`). One of ``{"gguf_sha256": ...}`` (a GGUF
    base: its file's sha256, wherever it lies, local or in a Hub repo), ``{"hub_id": ..., "revision": COMMIT}`` (a
    Hub model: its id and resolved commit) or ``{"weights_sha256": {file: sha256}}`` (a local folder or the
    organism: :func:`~mathneuro_edit.publish.lock.weights_sha256`, as the lock records it).

    Example:
        >>> from mathneuro_edit.recipe.io import quickstart_recipe
        >>> list(base_identity(quickstart_recipe().base)["weights_sha256"])
        ['model.safetensors']
    """
    if base.is_gguf:
        path, _ = gguf_source(base.model, base.gguf_file, base.revision)
        return {"gguf_sha256": sha256_file(path)}
    if base.local_dir() is None:  # a Hub id: its commit, from config.json alone (a dry run downloads no weights)
        return {"hub_id": base.model, "revision": hub_commit(base.model, base.revision)}
    return {"weights_sha256": weights_sha256(resolve_base(base_reference(base)))}


def release_dtype(recipe: Recipe) -> Any:
    """:func:`~mathneuro_edit.outputs.checkpoint.output_dtype` as a torch dtype (``None``: every tensor keeps its
    type): what an evaluation of the release rounds the model to (:func:`~mathneuro_edit.engine.apply.round_weights_`)."""
    import torch

    name = output_dtype(recipe)
    return None if name is None else getattr(torch, name)


def export_step(run: RunRecord, dest: Path, kind: str) -> None:
    """Write output ``kind`` of the record's edit (its ``mask``, ``base`` and ``n_params``) into ``dest`` with its
    step, then each output the recipe asks for that is made from it (from the finished folder), announced on one
    stage line (``export checkpoint/ + model-Q8_0.gguf``). Records in ``written`` what each step returned (the
    adapter: its size as a fraction of the checkpoint's)."""
    out = output(kind)
    if out.derived_from is not None:
        raise InputError(f"kind: {kind!r} has no export step of its own; it is written with the {out.derived_from}")
    then = derived_outputs(run.recipe, kind)
    run.start(out.stage(run.recipe) + "".join(o.stage(run.recipe) for o in then))
    run.written[kind] = out.write(run, dest)
    for made in then:
        run.written[made.name] = made.write(run, dest)
