"""Baked checkpoint: write an edited copy of a Hugging Face model folder, streaming, without loading the model.

The output is a plain Hugging Face folder (docs/formats.md, "Baked checkpoint"; nothing of mathneuro-edit is
needed to load it): the base's tensor names, shapes, dtypes and shard layout (``max_shard_size``: a new layout; a
pickle base is written as safetensors); unedited tensors' bytes copied, never decoded; edited ones
:func:`~mathneuro_edit.engine.apply.scale_masked` on the entries :func:`~.edit_plan.plan_edits` maps the mask to,
then every F32/BF16/F16 tensor cast to ``dtype`` (``outputs.dtype``), which ``config.json`` then names. Every
other file of the base is copied as :func:`published_bytes` publishes it, but for those :func:`support_files` skips
(logged at INFO).

Streaming: one tensor at a time. Unedited bytes go file to file (``copy_file_range``); an edited tensor is read,
edited and written in blocks of rows (~4 MiB), so peak memory is about the largest edited tensor's unpacked mask
(1 byte per entry) plus a few blocks, not a shard or the model.

Parallel: ``workers=N`` writes up to N output shards at once on threads (:func:`~.shards.run_jobs`), byte-identical
to ``workers=1`` (each shard's bytes depend only on the base, the mask and the scale; the index is written once
all shards are done). Peak memory grows with N: up to N edited tensors are in flight, each with its unpacked mask
(1 byte per entry), its blocks and its thread's allocator arena, so budget about N x (largest edited tensor's
entries in bytes + ~60 MiB; measured: docs/performance.md, ``benchmarks/bench_export.py --workers N``); with
``allow_pickle``, each worker memory-maps its own input shard.

Atomic: everything is written into a temporary folder beside ``out_dir`` and renamed when complete; on any
error (in any worker) the other workers are stopped and joined, then the temporary folder is removed; the base
is only ever read.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import os
import shutil
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from .._version import __version__
from ..engine.apply import check_scale
from ..engine.edit_map import Setting
from ..engine.mask import as_mask
from ..errors import InputError
from ..util.config_sizes import model_json_object
from ..util.outdir import atomic_dir
from ..util.tensor_files import FLOAT_CODES
from .base import resolve_base
from .checkpoint import (
    PICKLE_INDEX,
    SAFE_INDEX,
    SAFE_SINGLE,
    SKIPPED_WEIGHT_PATTERNS,
    Checkpoint,
    check_config_file,
    check_config_shapes,
    open_checkpoint,
)
from .edit_plan import EditPlan, meta_model, plan_edits
from .remote_code import check_remote_code
from .shards import check_workers, run_jobs, written_type
from .shards import write_shard as _write_shard  # module attribute: tests replace it to inject failures

__all__ = ["export_checkpoint", "support_files", "published_bytes", "LOCAL_ONLY_TOKENIZER_KEYS"]

# keys transformers writes into a tokenizer_config.json saved from a local or cached copy: true of that copy only
LOCAL_ONLY_TOKENIZER_KEYS = ("is_local", "local_files_only")
_NO_LIMIT = 1e29  # transformers' VERY_LARGE_INTEGER (int(1e30)) as model_max_length means "no limit recorded"

log = logging.getLogger(__name__)


def export_checkpoint(
    base: str | Path,
    mask: Any,
    scale: Setting,
    out_dir: str | Path,
    *,
    overwrite: bool = False,
    max_shard_size: int | str | None = None,
    allow_pickle: bool = False,
    revision: str | None = None,
    progress: bool = False,
    workers: int = 1,
    trust_remote_code: bool = False,
    dtype: str | None = None,
) -> Path:
    """Write the base model with the mask's weights scaled (``scale=0`` prunes) as a plain HF folder ``out_dir``;
    returns its absolute path.

    Args:
        base: a local model folder or a Hub id (downloaded through huggingface_hub's cache).
        mask: a :class:`~mathneuro_edit.engine.mask.Mask` (or the path of a saved one) computed on this base.
        scale: a finite number >= 0; masked weights become ``dtype(float32(w) * float32(scale))``.
        overwrite: replace an existing ``out_dir`` (only once the new one is complete).
        max_shard_size: ``None`` keeps the base's shard layout; else bytes or a string like ``"5GB"``.
        workers, dtype: see the module docstring (``dtype=None`` keeps each tensor's type).

    Refused (InputError): ``out_dir`` exists (without ``overwrite``) or overlaps the base; a pickle base without
    ``allow_pickle``; a mask entry that does not fit the base or cannot be mapped to its tensors.
    """
    scale = check_scale(scale)
    if dtype is not None and dtype not in FLOAT_CODES:
        raise InputError(f"dtype: must be one of {', '.join(FLOAT_CODES)} or None, got {dtype!r}")
    code = FLOAT_CODES[dtype] if dtype is not None else None
    workers = check_workers(workers)
    mask = as_mask(mask)
    scale = check_scale(scale, list(mask))  # a scale map's keys against the edited matrices
    folder = resolve_base(base, revision=revision, allow_pickle=allow_pickle)
    ckpt = open_checkpoint(folder, allow_pickle=allow_pickle)
    check_remote_code(folder, trust_remote_code)  # even when names match: never build an unasked-for class
    # every shard's shapes against config.json, before anything is written
    check_config_file(folder)
    check_config_shapes(ckpt, meta_model(folder, trust_remote_code=trust_remote_code))
    plan = plan_edits(ckpt, mask, trust_remote_code=trust_remote_code)
    layout = _layout(ckpt, max_shard_size, code)
    ours = {
        "mathneuro_edit_version": __version__,
        "mathneuro_edit_mask_sha256": mask.sha256,
        "mathneuro_edit_scale": repr(scale),
        **({"mathneuro_edit_dtype": code} if code is not None else {}),
    }
    total_size = sum(written_type(ckpt, n, code)[2] for n in ckpt.tensors)
    copied, skipped = support_files(folder, ckpt)
    if skipped:
        log.info("not copied from %s: %s", folder, ", ".join(skipped))
    with atomic_dir(out_dir, overwrite=overwrite, protect=[folder], needed=total_size) as tmp:
        _Shards(ckpt, plan, layout, scale, code, ours).write(tmp, workers, progress)
        if len(layout) > 1 or (max_shard_size is None and (folder / SAFE_INDEX).is_file()):
            index_meta = {**ckpt.index_metadata, "total_size": total_size}
            weight_map = {n: shard for shard, names in layout.items() for n in names}
            (tmp / SAFE_INDEX).write_text(json.dumps({"metadata": index_meta, "weight_map": weight_map}, indent=2))
        _copy_support(folder, tmp, copied, dtype)
    return Path(out_dir).expanduser().absolute()


def _copy_support(folder: Path, tmp: Path, copied: list[str], dtype: str | None) -> None:
    """The base's support files (config, tokenizer, ...) into ``tmp``, as :func:`published_bytes` publishes them."""
    for rel in copied:
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        data = published_bytes(folder, rel, dtype)
        if data is None:
            shutil.copyfile(folder / rel, tmp / rel)  # follows the Hub cache's symlinks: real files out
        else:
            (tmp / rel).write_bytes(data)


@dataclass(frozen=True)
class _Shards:
    """The output shards: which tensors each holds (``layout``), how they are edited and cast, their metadata."""

    ckpt: Checkpoint
    plan: EditPlan
    layout: dict[str, list[str]]  # output shard -> tensor names
    scale: Setting
    code: str | None  # outputs.dtype's safetensors code (None: each tensor keeps its type)
    ours: dict[str, str]  # the metadata every shard records about the edit

    def write(self, tmp: Path, workers: int, progress: bool) -> None:
        """Every shard into ``tmp``, ``workers`` at once (the bytes do not depend on how many)."""
        ckpt, layout = self.ckpt, self.layout
        bar = tqdm(total=len(ckpt.tensors), desc="export", unit="tensor", disable=not progress, leave=False)

        def write(shard: str, stop: threading.Event) -> None:
            names = layout[shard]
            first = ckpt.tensors[names[0]].file.name if names else ""
            meta = {**ckpt.shard_metadata.get(first, {}), "format": "pt", **self.ours}
            # a pickle base caches one memory-mapped input shard per Checkpoint: one Checkpoint per thread
            source = replace(ckpt, _pickle_cache=None) if workers > 1 and ckpt.kind == "pickle" else ckpt
            _write_shard(tmp / shard, names, source, self.plan, self.scale, meta, stop=stop, dtype=self.code)

        try:
            run_jobs(list(layout), write, workers=workers, done=lambda shard: bar.update(len(layout[shard])))
        finally:
            bar.close()


def published_bytes(folder: Path, rel: str, dtype: str | None) -> bytes | None:
    """The bytes a copied support file is published with, or ``None`` when it is copied as it is.

    ``tokenizer_config.json`` loses :data:`LOCAL_ONLY_TOKENIZER_KEYS` and a ``model_max_length`` of 1e30 or more
    (what transformers writes when it saves a tokenizer loaded from a local copy or a GGUF: true of that copy, noise
    for a reader); ``config.json`` names ``dtype`` (``outputs.dtype``) in ``dtype`` (and ``torch_dtype`` when it
    has one), at any depth (a multimodal model's ``text_config``). A file that needs no change is ``None`` (copied
    byte for byte). ``verify`` expects exactly these bytes.

    Example:
        >>> published_bytes(Path("no-such-folder"), "generation_config.json", None) is None
        True
    """
    if rel not in ("tokenizer_config.json", "config.json") or (rel == "config.json" and dtype is None):
        return None
    # a FIFO or /dev/zero in its place: one line, never a hang; not a JSON object we can read: copied as it is
    # (transformers reports it to whoever loads it)
    data = model_json_object(folder / rel)
    if data is None:
        return None
    if rel == "tokenizer_config.json":
        drop = [k for k in LOCAL_ONLY_TOKENIZER_KEYS if k in data]
        limit = data.get("model_max_length")
        if isinstance(limit, (int, float)) and not isinstance(limit, bool) and limit >= _NO_LIMIT:
            drop.append("model_max_length")
        if not drop:
            return None
        for k in drop:
            del data[k]
    else:
        _set_dtype(data, dtype)
        data.setdefault("dtype", dtype)
    return (json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")


def _set_dtype(node: Any, dtype: str | None) -> None:
    """Set every ``dtype`` / ``torch_dtype`` that names a floating dtype, in a config and its sub-configs."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k in ("dtype", "torch_dtype") and v in ("float32", "bfloat16", "float16", "float64", "auto"):
                node[k] = dtype
            else:
                _set_dtype(v, dtype)


def _layout(ckpt: Checkpoint, max_shard_size: int | str | None, code: str | None = None) -> dict[str, list[str]]:
    """Output shard name -> tensor names, in file order."""
    if max_shard_size is None:
        out: dict[str, list[str]] = {}
        for name, e in ckpt.tensors.items():
            shard = e.file.name
            if ckpt.kind == "pickle":  # pytorch_model-00001-of-00002.bin -> model-00001-of-00002.safetensors
                stem = Path(shard).stem.removeprefix("pytorch_")
                shard = SAFE_SINGLE if stem in ("model", "pytorch_model") else f"{stem}.safetensors"
            out.setdefault(shard, []).append(name)
        return out
    from transformers.utils.hub import convert_file_size_to_int

    try:
        limit = convert_file_size_to_int(max_shard_size)
    except (ValueError, TypeError):
        raise InputError(f"max_shard_size: {max_shard_size!r} is not a size; use bytes or e.g. '5GB'") from None
    groups: list[list[str]] = [[]]
    size = 0
    for name in ckpt.tensors:  # greedy, in file order; a tensor larger than the limit gets its own shard
        nbytes = written_type(ckpt, name, code)[2]
        if groups[-1] and size + nbytes > limit:
            groups.append([])
            size = 0
        groups[-1].append(name)
        size += nbytes
    if len(groups) == 1:
        return {SAFE_SINGLE: groups[0]}
    return {f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors": g for i, g in enumerate(groups)}


def support_files(folder: Path, ckpt: Checkpoint) -> tuple[list[str], list[str]]:
    """The base's non-weight files to copy, and those skipped (relative POSIX paths). Skipped: names starting with
    ``.``, the top-level ``README.md`` (the model-card step writes its own), weights in other formats
    (:data:`~.checkpoint.SKIPPED_WEIGHT_PATTERNS`), other ``*.safetensors`` files (Mistral's
    ``consolidated.safetensors``) and ``*.index.json`` files: copies of those would disagree with the edit."""
    copied: list[str] = []
    skipped: list[str] = []
    weights = set(ckpt.shards) | {n for n in (SAFE_INDEX, PICKLE_INDEX) if (folder / n).is_file()}  # rewritten
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for fn in sorted(files):
            rel = (Path(root) / fn).relative_to(folder).as_posix()
            if rel in weights:
                continue
            skip = fn.startswith(".") or rel == "README.md" or fn.endswith((".safetensors", ".index.json"))
            skip = skip or any(fnmatch.fnmatch(fn, p) for p in SKIPPED_WEIGHT_PATTERNS)
            (skipped if skip else copied).append(rel)
    return copied, skipped
