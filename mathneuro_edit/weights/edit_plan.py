"""Which checkpoint tensors each mask entry edits: the mask-name -> tensor-name mapping of :func:`plan_edits`.

Mask keys are ``model.named_parameters()`` names of the transformers 5 model in memory, while a checkpoint may
store a weight under another name or layout. :func:`plan_edits` maps each mask entry to checkpoint tensors by:

1. the same name and shape; 2. with or without the ``base_model_prefix`` (old GPT-2 checkpoints: ``h.0...``);
3. the same for the parameter's tied aliases (an ``lm_head`` tied to the embedding is saved once);
4. transformers' own save-time conversion (``revert_weight_conversion``, the function ``save_pretrained`` uses)
   applied to the mask itself: e.g. a fused ``mlp.experts.gate_up_proj`` mask ``(E, 2I, H)`` becomes the
   per-expert masks ``block_sparse_moe.experts.{e}.w1/w3.weight`` ``(I, H)`` that transformers 5 writes for
   Mixtral (``mlp.experts.{e}.gate_proj/up_proj.weight`` for Qwen-MoE). These conversions only move entries,
   and an edit is elementwise, so editing the converted mask's entries equals editing the fused tensor.

An entry that none of these maps exactly (name, shape, and an entry count that is conserved) raises
:class:`~mathneuro_edit.errors.InputError` naming the parameter; nothing is skipped silently. The checkpoint
itself is read by :mod:`mathneuro_edit.weights.checkpoint`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..engine.apply import check_scale, scale_masked, scale_of
from ..engine.edit_map import Setting
from ..errors import InputError
from ..util.config_sizes import check_config_file_sizes, model_json_object
from .checkpoint import Checkpoint
from .remote_code import check_remote_code

__all__ = ["EditPlan", "plan_edits", "meta_model", "row_blocks", "ROW_BLOCK_BYTES"]

log = logging.getLogger(__name__)

# Why 64 MiB: the audits and the adapter writer hold a few copies of a block (base, edited, merged) instead of a
# few copies of the whole tensor; an 8B model's 1 GB lm_head made those copies the peak (8-14 GB,
# benchmarks/scale_8b.py). An edit is elementwise, so any block size gives the same bytes.
ROW_BLOCK_BYTES = 64 << 20


def meta_model(folder: Path, *, trust_remote_code: bool = False) -> torch.nn.Module | None:
    """The model class of ``folder``'s config instantiated on the meta device (no memory), or None if unknown
    (:func:`~.remote_code.check_remote_code` first)."""
    import transformers

    check_remote_code(folder, trust_remote_code)  # never prompt, never run repo code unasked
    check_config_file_sizes(folder)  # sizes a model has, before a layer is built from them
    try:
        config = transformers.AutoConfig.from_pretrained(folder, trust_remote_code=trust_remote_code)
        arch = (getattr(config, "architectures", None) or [None])[0]
        cls = getattr(transformers, arch, None) if arch else None
        with torch.device("meta"):
            if cls is not None:
                return cls(config)
            return transformers.AutoModelForCausalLM.from_config(config, trust_remote_code=trust_remote_code)
    except Exception as e:  # custom code or unknown family: fall back to name matching only
        log.info("could not build the model class on the meta device (%s); matching names only", e)
        return None


def row_blocks(shape: tuple[int, ...], item_bytes: int, block_bytes: int | None = None) -> Iterator[slice]:
    """Slices of a tensor's first dimension of about ``block_bytes`` each (``ROW_BLOCK_BYTES`` by default).

    A 0-D tensor is one block of one row; a block holds at least one row.

    Example:
        >>> [(s.start, s.stop) for s in row_blocks((5, 4), 2, block_bytes=16)]
        [(0, 2), (2, 4), (4, 5)]
        >>> [(s.start, s.stop) for s in row_blocks((7,), 4, block_bytes=12)], list(row_blocks((), 4))
        ([(0, 3), (3, 6), (6, 7)], [slice(0, 1, None)])
    """
    block_bytes = ROW_BLOCK_BYTES if block_bytes is None else block_bytes  # read here: tests may shrink it
    rows = shape[0] if shape else 1
    step = max(1, block_bytes // max(1, item_bytes * math.prod(shape[1:])))
    for start in range(0, rows, step):
        yield slice(start, min(rows, start + step))


@dataclass
class EditPlan:
    """Which checkpoint tensors each mask entry edits."""

    mask: Any
    # checkpoint tensor -> mask entries editing it, in mask order (applied in turn, as engine.apply.apply_mask does)
    edits: dict[str, list[str]]
    direct: dict[str, list[str]]  # mask entry -> checkpoint tensors holding it in its layout (several: tied copies)
    converted: dict[str, dict[str, str]]  # mask entry -> {converted name: checkpoint tensor}: another layout
    model: torch.nn.Module | None  # the meta-device model (None: a family unknown to transformers)
    _cache: dict[str, dict[str, torch.Tensor]] = field(default_factory=dict)

    def mask_slice(self, ckpt_name: str, mask_name: str) -> torch.Tensor:
        """The bool mask of ``mask_name`` laid out like the checkpoint tensor ``ckpt_name``."""
        if mask_name in self.direct:
            return self.mask[mask_name]
        if mask_name not in self._cache:
            from transformers.core_model_loading import revert_weight_conversion

            out = revert_weight_conversion(self.model, {mask_name: self.mask[mask_name]})
            self._cache[mask_name] = {self.converted[mask_name][k]: v for k, v in out.items()}
            if sum(int(torch.count_nonzero(v)) for v in out.values()) != self.mask.counts()[mask_name][0]:
                raise InputError(f"mask entry {mask_name!r}: converting it to the checkpoint layout lost entries")
        cache = self._cache[mask_name]
        result = cache.pop(ckpt_name).contiguous()
        if not cache:  # every piece used: free the converted mask
            del self._cache[mask_name]
        return result

    def edited_rows(
        self, ckpt: Checkpoint, name: str, scale: Setting, device: torch.device | str | None = None
    ) -> Iterator[tuple[slice, torch.Tensor, torch.Tensor]]:
        """``(rows, base rows, edited rows)`` of checkpoint tensor ``name``, one :func:`row_blocks` block at a time:
        each mask entry's edit applied in turn, with its own scale (a scale map:
        :func:`~mathneuro_edit.engine.apply.scale_of`).

        An edit is elementwise, so only one block of the tensor is in memory, plus its unpacked masks (one byte per
        entry). ``device``: where each block is edited (an audit on a GPU); an elementwise float32 multiply rounded
        once gives the same bits on any device.
        """
        scale = check_scale(scale)
        masks = [(self.mask_slice(name, n), scale_of(scale, n)) for n in self.edits.get(name, ())]
        entry = ckpt.tensors[name]
        item = entry.nbytes // max(math.prod(entry.shape), 1)
        for rows in row_blocks(tuple(entry.shape), item):
            base = ckpt.read(name, rows=rows)
            base = base.to(device) if device is not None else base
            edited = base
            for m, s in masks:
                block = m[rows] if entry.shape else m
                edited = scale_masked(edited, block.to(base.device), s)
            yield rows, base, edited


def _candidates(name: str, prefix: str) -> list[str]:
    """``name``, then the same without the ``base_model_prefix`` (or with it, when it has none)."""
    if not prefix:
        return [name]
    return [name, name.removeprefix(prefix + ".") if name.startswith(prefix + ".") else f"{prefix}.{name}"]


def plan_edits(
    ckpt: Checkpoint, mask: Any, model: torch.nn.Module | None = None, *, trust_remote_code: bool = False
) -> EditPlan:
    """Map every mask entry to the checkpoint tensors it edits (see the module docstring); an entry that is not a
    parameter of the base's model class, or that cannot be mapped exactly, is an InputError."""
    direct: dict[str, list[str]] = {}
    converted: dict[str, dict[str, str]] = {}
    lazy = model is None and not _needs_model(ckpt, mask)
    model = model if model is not None or lazy else meta_model(ckpt.folder, trust_remote_code=trust_remote_code)
    aliases: dict[str, list[str]] = {}
    params: dict[str, tuple[int, ...]] = {}
    prefix = ""
    if model is not None:
        prefix = getattr(model, "base_model_prefix", "") or ""
        by_id: dict[int, list[str]] = {}
        for n, p in model.named_parameters(remove_duplicate=False):
            by_id.setdefault(id(p), []).append(n)
            params[n] = tuple(p.shape)
        for names in by_id.values():
            for n in names:
                aliases[n] = [n] + [a for a in names if a != n]
    for name in mask if not lazy else ():
        shape = tuple(mask.shape_of(name))
        if params and params.get(name) != shape:
            got = "not a parameter" if name not in params else f"shape {params[name]}"
            raise InputError(
                f"mask entry {name!r} (shape {shape}) does not fit the base model ({got}); the mask was computed "
                "for another model: recompute it on this base"
            )
        found = [c for a in aliases.get(name, [name]) for c in _candidates(a, prefix) if c in ckpt.tensors]
        found = list(dict.fromkeys(found))
        same = [c for c in found if ckpt.tensors[c].shape == shape]
        if found and not same:
            raise InputError(
                f"mask entry {name!r} has shape {shape} but the checkpoint tensor {found[0]} has "
                f"{ckpt.tensors[found[0]].shape}; the mask was computed for another model: recompute it"
            )
        if same:
            direct[name] = same
            continue
        conv = _convert(ckpt, model, name, shape, prefix)
        if len(conv) == 1 and _is_identity(model, name, shape):
            direct[name] = list(conv.values())  # a plain rename: same layout
        else:
            converted[name] = conv
    if lazy:  # every entry is stored under its own name and shape
        direct = {n: [n] for n in mask}
    edits: dict[str, list[str]] = {}
    for name in mask:
        for c in direct.get(name) or converted[name].values():
            edits.setdefault(c, []).append(name)
    return EditPlan(mask, edits, direct, converted, model)


def _needs_model(ckpt: Checkpoint, mask: Any) -> bool:
    """Whether mapping needs the model class (skipping it saves seconds and the transformers import): some entry
    is stored under another name/shape, or the config may tie weights (a tied copy stored twice is edited twice)."""
    tied = (model_json_object(ckpt.folder / "config.json") or {}).get("tie_word_embeddings", True)
    return tied is not False or any(
        n not in ckpt.tensors or ckpt.tensors[n].shape != tuple(mask.shape_of(n)) for n in mask
    )


def _convert(
    ckpt: Checkpoint, model: torch.nn.Module | None, name: str, shape: tuple[int, ...], prefix: str
) -> dict[str, str]:
    """Checkpoint tensors of a mask entry stored in another layout, via transformers' save-time conversion."""
    fail = (
        f"mask entry {name!r} has no tensor in the checkpoint {ckpt.folder} that it maps to exactly "
        "(same name, base-model prefix, tied alias, or transformers' weight conversion)"
    )
    if model is None:
        raise InputError(f"{fail}; the model family is unknown to transformers, so only names can be matched")
    from transformers.core_model_loading import revert_weight_conversion

    try:
        out = revert_weight_conversion(model, {name: torch.empty(shape, dtype=torch.bool, device="meta")})
    except Exception as e:
        raise InputError(f"{fail}; converting it failed ({type(e).__name__}: {e})") from None
    mapping: dict[str, str] = {}
    for conv_name, t in out.items():
        hits = [c for c in _candidates(conv_name, prefix) if c in ckpt.tensors]
        if not hits or ckpt.tensors[hits[0]].shape != tuple(t.shape):
            raise InputError(f"{fail}; its converted piece {conv_name!r} {tuple(t.shape)} is not in the checkpoint")
        mapping[conv_name] = hits[0]
    # A conversion that duplicated or dropped entries would not be an exact re-layout: refuse it.
    if sum(t.numel() for t in out.values()) != int(torch.Size(shape).numel()) or len(set(mapping.values())) != len(out):
        raise InputError(f"{fail}; the conversion does not move each entry to exactly one place")
    return mapping


def _is_identity(model: torch.nn.Module | None, name: str, shape: tuple[int, ...]) -> bool:
    """Whether transformers' conversion of ``name`` keeps every entry in place (a rename, not a re-layout)."""
    from transformers.core_model_loading import revert_weight_conversion

    ids = torch.arange(int(torch.Size(shape).numel())).reshape(shape)  # each entry's own position
    (out,) = revert_weight_conversion(model, {name: ids}).values()
    return tuple(out.shape) == shape and torch.equal(out, ids)
