"""Sparse delta adapter: the edit as a small PEFT adapter on top of the unchanged base model.

Formats (``export_adapter(..., format=...)``; their files: docs/formats.md, "Adapter"):

- ``"peft"`` (default): a stock PEFT SHiRA adapter (``PeftModel.from_pretrained(base_model, dir)`` loads it,
  nothing of ours needed). ``mask_type`` is ``"mathneuro_edit"``: PEFT reads the indices from the file instead of
  drawing a random mask per layer first, which takes minutes on a 7B model. SHiRA wants exactly ``r*(m+n)``
  entries per layer with one ``r`` for all layers, so ``r`` is the smallest that fits every layer's masked count,
  and each layer is padded with ``-0.0`` at unmasked positions (``x + (-0.0) == x`` bit for bit, also for
  ``x = -0.0``). Each delta ``d`` is chosen so that ``w + d`` rounds to the edited value exactly: ``d = dtype(e -
  w)`` computed in float64, then checked with the very operation PEFT's merge and forward use (dense ``+=`` sparse
  COO), both with the adapter in the base dtype and upcast to float32 (PEFT's default ``autocast_adapter_dtype``),
  with a fix-up of 1-2 ulps where needed. So ``merge_and_unload()`` gives the baked checkpoint's tensors bit for
  bit, and the unmerged forward adds the same dense delta. An exact delta always exists for ``scale == 0``
  (``d = -w``) and for scales in ``[0.5, 2]`` (``e - w`` is then exact in the weight's format, Sterbenz's lemma;
  this covers MathNeuro's 1.1), except a 16-bit subnormal weight whose product underflows to ``-0.0``; other
  scales often have entries with no exact delta (the sum lands on a rounding tie) and are refused. Exactness holds
  when the base is loaded in its checkpoint dtype (transformers' default ``dtype="auto"``).
- ``"mathneuro"``: mathneuro-edit's own format, for what PEFT cannot express: the mask and a small JSON, loaded
  with :func:`load_edited`, which applies the mask to the base (exact by construction; needs mathneuro-edit).
  Plain PEFT refuses this folder (no ``adapter_config.json``), so it is never half applied.

Refused, never approximated: with ``format="peft"``, a mask entry PEFT cannot hold exactly (:func:`shira_layers`)
or one with no exact delta in the base dtype (:func:`exact_delta`); the line points to
:func:`~.checkpoint_writer.export_checkpoint` (the baked model) or ``format="mathneuro"``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Literal

import torch
from torch import nn

from .._version import __version__
from ..engine.apply import apply_mask, check_scale, scale_masked, scale_of
from ..engine.edit_map import Setting
from ..engine.mask import Mask, as_mask
from ..errors import InputError
from ..layout import MATHNEURO_CONFIG, MATHNEURO_MASK
from ..recipe.input_sections import BaseConfig
from ..util.console import known_warnings_silenced
from ..util.files import write_text_atomic
from ..util.outdir import atomic_dir
from .base import resolve_base, resolve_model_path
from .checkpoint import Checkpoint, open_checkpoint
from .edit_plan import EditPlan, meta_model, plan_edits, row_blocks
from .gguf_reader import base_folder
from .remote_code import check_remote_code
from .shards import tensor_bytes, write_all, write_safetensors

__all__ = [
    "AdapterExport",
    "ShiraLayer",
    "export_adapter",
    "load_edited",
    "exact_delta",
    "shira_layers",
    "shira_layer_rows",
    "peft_merge_exact",
]

_FORMAT = "mathneuro-edit/adapter/v1"
_INT_OF_SIZE = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


@dataclass(frozen=True)
class AdapterExport:
    """What :func:`export_adapter` wrote; usable as a path (``os.fspath``)."""

    path: Path
    format: str  # "peft" or "mathneuro"
    r: int | None  # SHiRA's r (None for "mathneuro")
    edited_entries: int  # weights the mask edits
    stored_entries: int  # SHiRA: including the zero padding
    adapter_bytes: int  # the adapter folder's files
    checkpoint_bytes: int  # the base's weight files (the full checkpoint)

    @property
    def size_ratio(self) -> float:
        """Adapter size / full checkpoint size."""
        return self.adapter_bytes / max(self.checkpoint_bytes, 1)

    def __fspath__(self) -> str:
        return str(self.path)


@dataclass(frozen=True)
class ShiraLayer:
    """One edited ``nn.Linear`` of a SHiRA adapter: its mask entry, module, checkpoint tensor, shape and count."""

    name: str  # mask entry (parameter name)
    module: str
    ckpt: str  # checkpoint tensor
    rows: int
    cols: int
    count: int


def export_adapter(
    base: str | Path,
    mask: Any,
    scale: Setting,
    out_dir: str | Path,
    *,
    overwrite: bool = False,
    format: Literal["peft", "mathneuro"] = "peft",
    allow_pickle: bool = False,
    revision: str | None = None,
    base_model_name_or_path: str | None = None,
    trust_remote_code: bool = False,
) -> AdapterExport:
    """Write the edit of ``base`` (a local folder or a Hub id) by ``mask`` (a Mask or its file, computed on this
    base) at ``scale`` (>= 0; 0 prunes) as an adapter (see the module docstring for the formats and their
    guarantees). ``base_model_name_or_path`` is what the adapter records as its base (default: the Hub id, also
    for a folder in the Hub cache; ``None`` for a plain local folder, whose path is private and never recorded).

    Example:
        >>> info = export_adapter("base_dir", mask, 1.1, "adapter_dir")  # doctest: +SKIP
        >>> model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained("base_dir"), info.path)  # doctest: +SKIP
    """
    scale = check_scale(scale)
    mask = as_mask(mask)
    scale = check_scale(scale, list(mask))  # a scale map's keys against the edited matrices
    if format not in ("peft", "mathneuro"):
        raise InputError(f"format: must be 'peft' or 'mathneuro', got {format!r}")
    folder = resolve_base(base, revision=revision, allow_pickle=allow_pickle)
    ckpt = open_checkpoint(folder, allow_pickle=allow_pickle)
    # also proves the mask fits this base
    plan = plan_edits(ckpt, mask, meta_model(folder, trust_remote_code=trust_remote_code))
    base_id = base_model_name_or_path or _base_id(base, folder)
    size = sum((folder / s).stat().st_size for s in ckpt.shards)
    job = _AdapterJob(out_dir, overwrite, folder, ckpt, plan, mask, scale, base_id, revision, size)
    return _write_mathneuro(job) if format == "mathneuro" else _write_peft(job)


@dataclass(frozen=True)
class _AdapterJob:
    """What both formats' writers read: where to write, the base, its plan, the mask and what the adapter records."""

    out_dir: str | Path
    overwrite: bool
    folder: Path  # the resolved base folder (protected from being overwritten)
    ckpt: Checkpoint
    plan: EditPlan
    mask: Mask
    scale: Setting
    base_id: str | None  # what the adapter records as its base (None: a private local folder)
    revision: str | None
    checkpoint_bytes: int  # the base's weight files: the size the adapter is compared with


def _write_mathneuro(job: _AdapterJob) -> AdapterExport:
    """Our own format: the mask and a small JSON (scale, mask hash, base id); exact by construction."""
    edited = job.mask.total()[0]
    with atomic_dir(job.out_dir, overwrite=job.overwrite, protect=[job.folder]) as tmp:
        job.mask.save(tmp / MATHNEURO_MASK)
        cfg = {
            "format": _FORMAT,
            "scale": job.scale,
            "mask_file": MATHNEURO_MASK,
            "mask_sha256": job.mask.sha256,
            "base_model_name_or_path": job.base_id,
            "revision": job.revision,
            "version": __version__,
        }
        (tmp / MATHNEURO_CONFIG).write_text(json.dumps(cfg, indent=2))
    return _report(job.out_dir, "mathneuro", None, edited, edited, job.checkpoint_bytes)


def _shira_r(layers: list[ShiraLayer]) -> int:
    """SHiRA's one ``r`` for all layers: the smallest that holds the densest layer's entries, refused where a
    layer cannot hold ``r * (rows + cols)`` entries."""
    r = max(math.ceil(layer.count / (layer.rows + layer.cols)) for layer in layers)
    too_small = [layer for layer in layers if r * (layer.rows + layer.cols) > layer.rows * layer.cols]
    if too_small:
        raise InputError(
            f"SHiRA needs one r for all layers; r={r} (set by the densest layer) exceeds what {too_small[0].name} "
            f"{(too_small[0].rows, too_small[0].cols)} can hold; use export_checkpoint or format='mathneuro'"
        )
    return r


def _write_peft(job: _AdapterJob) -> AdapterExport:
    """A stock PEFT SHiRA adapter: the tensors streamed one layer at a time, then PEFT's own config."""
    ckpt, plan, scale = job.ckpt, job.plan, job.scale
    layers = shira_layers(plan, job.mask)
    r = _shira_r(layers)
    dtype = {ckpt.tensors[layer.ckpt].dtype for layer in layers}
    specs: list[tuple[str, str, tuple[int, ...], int]] = []
    for layer in layers:
        k = r * (layer.rows + layer.cols)
        e = ckpt.tensors[layer.ckpt]
        size = (e.nbytes // max(layer.rows * layer.cols, 1)) * k
        prefix = f"base_model.model.{layer.module}"
        specs += [(f"{prefix}.shira_indices", "I32", (2, k), 8 * k), (f"{prefix}.shira_weight", e.dtype, (k,), size)]
    by_key = {f"base_model.model.{layer.module}": layer for layer in layers}
    current: dict[str, torch.Tensor] = {}

    def produce(key: str, f: BinaryIO) -> None:  # indices then weight of each layer, one layer in memory
        prefix, _, what = key.rpartition(".")
        if what == "shira_indices":
            layer = by_key[prefix]
            layer_scale = scale_of(scale, layer.name)  # a scale map: this matrix's own
            current["idx"], current["val"] = _layer_delta(ckpt, plan, layer, layer_scale, r * (layer.rows + layer.cols))
        write_all(f, tensor_bytes(current["idx"] if what == "shira_indices" else current["val"]))

    meta = {
        "format": "pt",
        "mathneuro_edit_version": __version__,
        "mathneuro_edit_mask_sha256": job.mask.sha256,
        "mathneuro_edit_scale": repr(scale),
        "mathneuro_edit_base_dtype": ",".join(sorted(dtype)),
    }
    with atomic_dir(job.out_dir, overwrite=job.overwrite, protect=[job.folder]) as tmp:
        write_safetensors(tmp / "adapter_model.safetensors", specs, produce, meta)
        _write_shira_config(job, tmp, layers, r)
    stored = sum(r * (layer.rows + layer.cols) for layer in layers)
    return _report(job.out_dir, "peft", r, job.mask.total()[0], stored, job.checkpoint_bytes)


def _write_shira_config(job: _AdapterJob, tmp: Path, layers: list[ShiraLayer], r: int) -> None:
    """PEFT's ``adapter_config.json`` for the SHiRA layers, its ``target_modules`` sorted."""
    from peft import ShiraConfig

    config = job.folder / "config.json"
    arch = (json.loads(config.read_text()).get("architectures") or [""])[0] if config.is_file() else ""
    ShiraConfig(
        r=r,
        target_modules=[layer.module for layer in layers],
        base_model_name_or_path=job.base_id,
        revision=job.revision,
        task_type="CAUSAL_LM" if arch.endswith(("ForCausalLM", "LMHeadModel")) else None,
        mask_type="mathneuro_edit",  # not "random": why in the module docstring
        init_weights=True,
        inference_mode=True,
    ).save_pretrained(str(tmp))
    # Why rewritten with target_modules sorted: PEFT keeps them as a set and writes list(set), whose order follows
    # PYTHONHASHSEED; the same edit then gave a different file (and lock, and card) in every process. Same format
    # as PEFT's save_pretrained (indent=2, sort_keys=True), so only the order changes.
    path = tmp / "adapter_config.json"
    cfg = json.loads(path.read_text(encoding="utf-8"))
    cfg["target_modules"] = sorted(cfg["target_modules"])  # a list: the one given above
    write_text_atomic(path, json.dumps(cfg, indent=2, sort_keys=True))


def _base_id(base: str | Path, folder: Path) -> str | None:
    """The Hub id of the base when it has one (a folder of the Hub cache is ``.../models--org--name/...``).

    A plain local folder gives ``None``: a local path is private and would be published with the adapter (PEFT
    then needs the base model passed explicitly, as ``PeftModel.from_pretrained(base_model, dir)`` does anyway).
    """
    if not Path(str(base)).expanduser().exists():
        return str(base)
    hub = [p for p in folder.parts if p.startswith("models--")]
    return hub[-1].removeprefix("models--").replace("--", "/") if hub else None


def _report(out_dir: str | Path, fmt: str, r: int | None, edited: int, stored: int, ckpt_bytes: int) -> AdapterExport:
    path = Path(out_dir).expanduser().absolute()
    size = sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return AdapterExport(path, fmt, r, edited, stored, size, ckpt_bytes)


def shira_layers(plan: EditPlan, mask: Any) -> list[ShiraLayer]:
    """The SHiRA layers, or an InputError listing every entry PEFT cannot express exactly."""
    fix = "use export_checkpoint (a baked model) or export_adapter(..., format='mathneuro')"
    if plan.model is None:
        raise InputError(f"the base's model family is unknown to transformers, so no PEFT adapter can be built; {fix}")
    modules = dict(plan.model.named_modules(remove_duplicate=False))
    counts = mask.counts()
    layers: list[ShiraLayer] = []
    problems: list[str] = []
    for name in mask:
        mod_name, _, attr = name.rpartition(".")
        module = modules.get(mod_name)
        if attr != "weight" or not isinstance(module, nn.Linear):
            problems.append(f"{name} ({type(module).__name__ if attr == 'weight' else 'a fused 3-D weight'})")
        elif name not in plan.direct:
            problems.append(f"{name} (stored in another layout)")
        elif plan.edits[plan.direct[name][0]] != [name]:
            problems.append(f"{name} (its tensor is also edited by {plan.edits[plan.direct[name][0]]})")
        elif n := counts[name][0]:
            layers.append(ShiraLayer(name, mod_name, plan.direct[name][0], module.out_features, module.in_features, n))
    if problems:
        shown = ", ".join(problems[:4]) + (f" and {len(problems) - 4} more" if len(problems) > 4 else "")
        raise InputError(
            f"{len(problems)} mask entries cannot be a PEFT SHiRA adapter (only nn.Linear): {shown}; {fix}"
        )
    if not layers:
        raise InputError("the mask selects no weight: nothing to export; check top_k and the mask")
    return layers


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    it = _INT_OF_SIZE[a.element_size()]
    return a.contiguous().view(it) == b.contiguous().view(it)


def peft_merge_exact(w: torch.Tensor, e_vals: torch.Tensor, idx: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """Per entry: does PEFT's merge (``dense += sparse_coo``) give exactly ``e_vals``, in every adapter dtype?"""
    # PEFT keeps 16-bit adapters in float32 by default (autocast_adapter_dtype) and in the base dtype otherwise.
    adapter_dtypes = {w.dtype, torch.float32} if w.element_size() < 4 else {w.dtype}
    ok = torch.ones(len(d), dtype=torch.bool)
    for adt in adapter_dtypes:
        merged = w.clone()
        # what SHiRA's merge and forward do; our indices are valid, so checking them is only a small cost
        merged += torch.sparse_coo_tensor(idx.t(), d.to(adt), w.shape, check_invariants=True)
        ok &= _same_bits(merged[idx[:, 0], idx[:, 1]], e_vals)
    return ok


def exact_delta(w: torch.Tensor, e: torch.Tensor, idx: torch.Tensor, name: str = "weight") -> torch.Tensor:
    """``(k,)`` deltas ``d`` in ``w.dtype`` such that PEFT's ``w += d`` gives the edited weight ``e`` (same shape and
    dtype) bit for bit at the ``(k, 2)`` positions ``idx`` (row, col); an InputError when some entry has no exact
    delta in the base dtype.

    Example:
        >>> w = torch.tensor([[1.0, -2.0]], dtype=torch.bfloat16)
        >>> exact_delta(w, w * 1.1, torch.tensor([[0, 0], [0, 1]]))
        tensor([ 0.1016, -0.2031], dtype=torch.bfloat16)
    """
    w_vals, e_vals = w[idx[:, 0], idx[:, 1]], e[idx[:, 0], idx[:, 1]]
    # why float64, then one rounding: exact for scales in [0.5, 2] and 0 (the module docstring's Sterbenz argument)
    d0 = (e_vals.to(torch.float64) - w_vals.to(torch.float64)).to(w.dtype)
    d0 = torch.where(_same_bits(e_vals, w_vals), torch.tensor(-0.0, dtype=w.dtype), d0)  # w + (-0.0) is w
    d = d0.clone()
    bad = ~peft_merge_exact(w, e_vals, idx, d)
    up, down = torch.full_like(d0, math.inf), torch.full_like(d0, -math.inf)
    candidates = [torch.nextafter(d0, up), torch.nextafter(d0, down)]
    candidates += [torch.nextafter(candidates[0], up), torch.nextafter(candidates[1], down), -d0]
    for cand in candidates:  # fix-up: only the failing entries move, by 1-2 ulps (or a zero's sign)
        if not bad.any():
            break
        d[bad] = cand[bad]
        bad = ~peft_merge_exact(w, e_vals, idx, d)
    if bad.any():
        i = int(bad.nonzero()[0])
        raise InputError(
            f"{name}: {int(bad.sum())} entries have no exact delta in {w.dtype} (e.g. {w_vals[i].item()} -> "
            f"{e_vals[i].item()}; exact deltas exist for scale 0 and scales in [0.5, 2]); use export_checkpoint "
            "or export_adapter(..., format='mathneuro')"
        )
    return d


def shira_layer_rows(
    ckpt: Checkpoint, layer: ShiraLayer, m: torch.Tensor, scale: float
) -> Iterator[tuple[slice, torch.Tensor, torch.Tensor, torch.Tensor]]:
    """``(rows, base, edited, mask)`` of a SHiRA layer whose ``(rows, cols)`` bool mask is ``m``, one block of rows
    at a time (why blocks: :data:`~.edit_plan.ROW_BLOCK_BYTES`): PEFT's merge (``dense += sparse``) is elementwise
    too, so a block gives the same deltas and the same merge as the whole matrix."""
    item = ckpt.tensors[layer.ckpt].nbytes // max(layer.rows * layer.cols, 1)
    for rows in row_blocks((layer.rows, layer.cols), item):
        w, mb = ckpt.read(layer.ckpt, rows=rows), m[rows]
        yield rows, w, scale_masked(w, mb, scale), mb


def _layer_delta(
    ckpt: Checkpoint, plan: EditPlan, layer: ShiraLayer, scale: float, k: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """SHiRA's ``(2, k)`` int32 indices and ``(k,)`` values for one layer, padded with ``-0.0``."""
    m = plan.mask_slice(layer.ckpt, layer.name)  # (rows, cols) bool: one byte per entry, unpacked once
    flat_parts, delta_parts = [], []
    for rows, w, e, mb in shira_layer_rows(ckpt, layer, m, scale):
        idx = mb.nonzero()  # (count in block, 2), row-major
        delta_parts.append(exact_delta(w, e, idx, layer.name))
        flat_parts.append((idx[:, 0] + rows.start) * layer.cols + idx[:, 1])
    flat, d = torch.cat(flat_parts), torch.cat(delta_parts)
    # The first unmasked positions pad the layer (deterministic). They lie among its first k positions: at most
    # `count` of those are masked, and k - count are needed (k <= rows * cols is checked before).
    need = k - len(flat)
    free = (~m.reshape(-1)[:k]).nonzero().squeeze(1)[:need]
    flat = torch.cat([flat, free])
    values = torch.cat([d, torch.full((len(free),), -0.0, dtype=d.dtype)])
    order = flat.argsort()  # row-major, as SHiRA's own mask -> indices conversion (torch.where) orders them
    flat, values = flat[order], values[order]
    indices = torch.stack([flat // layer.cols, flat % layer.cols]).to(torch.int32)  # (2, k), as PEFT stores them
    return indices, values


def _base_path(base: str | Path | BaseConfig, kwargs: dict[str, Any]) -> str:
    """What ``from_pretrained`` gets for ``base``, resolved as :func:`~.loading.load_model` resolves it; a recipe's
    ``base`` section also gives its revision and ``trust_remote_code`` as defaults in ``kwargs``."""
    if isinstance(base, BaseConfig):
        if base.is_gguf:
            return str(base_folder(base))
        if base.revision is not None:
            kwargs.setdefault("revision", base.revision)
        kwargs.setdefault("trust_remote_code", base.trust_remote_code)
        base = base.model
    return resolve_model_path(base)  # why: "organism" is no Hub id (it was sent to the Hub, retried for a minute)


def load_edited(
    base: str | Path | BaseConfig | nn.Module, adapter_dir: str | Path, **from_pretrained_kwargs: Any
) -> nn.Module:
    """Load the base and apply an adapter written by :func:`export_adapter` (either format): the edited model (PEFT
    adapters merged and unloaded). ``base``: every base :func:`~.loading.load_model` accepts (loaded with
    ``AutoModelForCausalLM.from_pretrained(**from_pretrained_kwargs)``: keep the default ``dtype="auto"`` for
    exactness; ``trust_remote_code`` and ``use_kernels`` are ``False`` unless given), or a loaded model (edited in
    place).
    """
    adapter_dir = Path(adapter_dir)
    peft_cfg, ours = adapter_dir / "adapter_config.json", adapter_dir / MATHNEURO_CONFIG
    if not peft_cfg.is_file() and not ours.is_file():
        raise InputError(f"{adapter_dir}: not an adapter folder (no adapter_config.json or {MATHNEURO_CONFIG})")
    if isinstance(base, nn.Module):
        model = base
    else:
        from transformers import AutoModelForCausalLM

        from_pretrained_kwargs.setdefault("use_kernels", False)  # no Hub kernels (downloaded code) unless asked
        path = _base_path(base, from_pretrained_kwargs)
        from_pretrained_kwargs.setdefault("trust_remote_code", False)  # explicit: transformers never prompts
        check_remote_code(path, from_pretrained_kwargs["trust_remote_code"])
        model = AutoModelForCausalLM.from_pretrained(path, **from_pretrained_kwargs)
    if peft_cfg.is_file():
        from peft import PeftModel

        with known_warnings_silenced():  # PEFT's two harmless warnings (console.KNOWN_WARNINGS), only in here
            return PeftModel.from_pretrained(model, str(adapter_dir)).merge_and_unload()
    cfg = json.loads(ours.read_text())
    if cfg.get("format") != _FORMAT:
        raise InputError(f"{ours}: format {cfg.get('format')!r} is not {_FORMAT!r}; re-export with this version")
    mask = Mask.load(adapter_dir / cfg["mask_file"])
    if mask.sha256 != cfg["mask_sha256"]:
        raise InputError(f"{adapter_dir}: the mask file does not match the recorded hash; re-export the adapter")
    apply_mask(model, mask, cfg["scale"])
    return model
