"""Writing safetensors shards for :mod:`.checkpoint_writer`: streamed tensor by tensor (no tensor whole in memory;
unedited bytes copied kernel-side), several shards at once.

Threads, not processes: the work is file reads, ``copy_file_range``, torch elementwise ops and file writes, which
all release the GIL; threads also share the mask and the plan without pickling them.
"""

from __future__ import annotations

import json
import math
import os
import struct
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import torch

from ..engine.apply import check_scale, edited_values, scale_of
from ..engine.edit_map import Setting
from ..errors import InputError
from ..util.tensor_files import DTYPE_OF_CODE, FLOAT_CODES
from .checkpoint import Checkpoint
from .edit_plan import EditPlan, row_blocks

__all__ = [
    "write_all",
    "copy_range",
    "write_safetensors",
    "tensor_bytes",
    "write_edited",
    "write_shard",
    "run_jobs",
    "check_workers",
    "Stopped",
    "CASTABLE",
    "cast_code",
]

# outputs.dtype: the floating-point formats a checkpoint's weights may be cast between (other tensors, such as
# integer buffers or float64 ones, keep their type and bytes)
CASTABLE = frozenset(FLOAT_CODES.values())

Job = TypeVar("Job")

# EditPlan.mask_slice converts a fused mask (e.g. MoE gate_up_proj) once and hands out its pieces from a cache
# shared by the tensors it maps to, which may be in different shards: the cache is not thread-safe, so
# conversions go through this lock (entries stored in the checkpoint's own layout need no lock).
_PLAN_LOCK = threading.Lock()


class Stopped(Exception):
    """Raised inside a job when another job failed: it stops writing as soon as possible."""


def check_workers(workers: Any) -> int:
    """Validate a number of parallel workers: an int >= 1 (``bool`` is refused).

    Example:
        >>> check_workers(4)
        4
    """
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise InputError(f"workers: must be an integer >= 1, got {workers!r}; e.g. workers=4 to write 4 shards at once")
    return workers


def _check(stop: threading.Event | None) -> None:
    if stop is not None and stop.is_set():
        raise Stopped()


def write_all(f: BinaryIO, data: bytes | memoryview) -> None:
    """Write all of ``data`` (an unbuffered file may take it in several calls)."""
    view = memoryview(data).cast("B")
    while view:
        k = f.write(view)
        view = view[k:]


def copy_range(src: Path, start: int, length: int, dst: BinaryIO) -> None:
    """Copy ``length`` bytes of ``src`` from ``start`` to the current position of ``dst`` (kernel-side if possible)."""
    with open(src, "rb", buffering=0) as fi:
        fi.seek(start)
        while length > 0 and hasattr(os, "copy_file_range"):
            try:
                k = os.copy_file_range(fi.fileno(), dst.fileno(), min(length, 1 << 30))
            except OSError:  # e.g. an old kernel or filesystem without support: fall back to read/write
                break
            if k == 0:
                break
            length -= k
        while length > 0:
            chunk = fi.read(min(length, 1 << 24))  # 16 MiB: large enough to be fast, small enough for memory
            if not chunk:
                raise InputError(f"{src}: file ended early (truncated download?); re-download the base")
            write_all(dst, chunk)
            length -= len(chunk)


def write_safetensors(
    path: Path,
    specs: Sequence[tuple[str, str, tuple[int, ...], int]],
    produce: Callable[[str, BinaryIO], None],
    metadata: dict[str, str],
) -> None:
    """Write a safetensors file tensor by tensor: ``produce(name, f)`` writes each tensor's ``nbytes`` in turn, in
    the order of ``specs`` ``(name, safetensors dtype code, shape, nbytes)``.

    The format is an 8-byte little-endian header size, a JSON header (dtype, shape, data offsets per tensor,
    and ``__metadata__``), then the data; so the header can be written first when the sizes are known.
    """
    header: dict[str, Any] = {"__metadata__": metadata}
    offset = 0
    for name, dtype, shape, nbytes in specs:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # pad with spaces to 8 bytes, as the reference writer does (aligned data)
    with open(path, "wb", buffering=0) as f:
        write_all(f, struct.pack("<Q", len(raw)) + raw)
        for name, _, _, nbytes in specs:
            before = f.tell()
            produce(name, f)
            if f.tell() - before != nbytes:
                raise AssertionError(f"{path}: {name} wrote {f.tell() - before} bytes, expected {nbytes}")


def tensor_bytes(t: torch.Tensor) -> memoryview:
    """The raw little-endian bytes of a tensor (as safetensors stores them)."""
    return memoryview(t.contiguous().reshape(-1).view(torch.uint8).numpy())


def _mask_slice(plan: EditPlan, name: str, mask_name: str) -> torch.Tensor:
    if mask_name in plan.direct:  # the stored mask itself, unpacked: no shared state
        return plan.mask_slice(name, mask_name)
    with _PLAN_LOCK:
        return plan.mask_slice(name, mask_name)


def cast_code(stored: str, dtype: str | None) -> str | None:
    """The safetensors code a tensor stored as ``stored`` is written as under ``outputs.dtype`` code ``dtype``
    (``None``: keep it): only F32/BF16/F16 tensors are cast, and only to another of those.

    Example:
        >>> cast_code("F32", "BF16"), cast_code("I64", "BF16"), cast_code("BF16", "BF16"), cast_code("F32", None)
        ('BF16', None, None, None)
    """
    return dtype if dtype is not None and stored in CASTABLE and stored != dtype else None


def write_edited(
    plan: EditPlan,
    ckpt: Checkpoint,
    name: str,
    scale: Setting,
    write: Callable[[memoryview], None],
    stop: threading.Event | None = None,
    cast: str | None = None,
) -> None:
    """Stream the edited tensor ``name`` to ``write`` in blocks of rows (~4 MiB: bounded memory).

    Each block is ``where(mask, edited_values(block), block)``: the one definition of an edited value
    (:func:`~mathneuro_edit.engine.apply.edited_values`), selected by the mask. The edit is elementwise, so this equals
    :meth:`EditPlan.edited_rows` (``scale_masked``) bit for bit, in about half the time of boolean indexing, which
    gathers and scatters (:func:`~mathneuro_edit.weights.audit.verify` recomputes with ``scale_masked``: another path).
    ``stop`` (set when another job failed) is checked before each block. ``cast`` (a safetensors code, e.g.
    ``"BF16"``; ``outputs.dtype``) rounds each finished block to that type: the edit is made in the base's own
    type (a dequantized GGUF's float32) and the result cast, so an adapter over the base, merged and cast, equals
    the checkpoint bit for bit.
    """
    scale = check_scale(scale)
    # each (*shape) bool and the matrix's scale (a scale map: its own, engine.apply.scale_of)
    masks = [(_mask_slice(plan, name, m), scale_of(scale, m)) for m in plan.edits.get(name, ())]
    e = ckpt.tensors[name]
    for rows in row_blocks(e.shape, e.nbytes // max(math.prod(e.shape), 1), 1 << 22):
        _check(stop)
        t = ckpt.read(name, rows)  # (rows in the block, *shape[1:])
        for m, s in masks:
            t = torch.where(m[rows] if e.shape else m, edited_values(t, s), t)
        write(tensor_bytes(t if cast is None else t.to(DTYPE_OF_CODE[cast])))


def write_shard(
    path: Path,
    names: Sequence[str],
    ckpt: Checkpoint,
    plan: EditPlan,
    scale: Setting,
    metadata: dict[str, str],
    stop: threading.Event | None = None,
    dtype: str | None = None,
) -> None:
    """Write one output shard of the checkpoint tensors ``names``: edited ones via :func:`write_edited`, the others
    copied byte for byte (or, when ``dtype``, ``outputs.dtype``'s safetensors code, casts them, read and rounded
    block by block). ``stop`` set (another job failed): raise :class:`Stopped` before the next tensor or block.
    """

    def produce(name: str, f: BinaryIO) -> None:
        _check(stop)
        e = ckpt.tensors[name]
        cast = cast_code(e.dtype, dtype)
        if name in plan.edits or cast is not None:
            write_edited(plan, ckpt, name, scale, lambda data: write_all(f, data), stop=stop, cast=cast)
        elif ckpt.kind == "safetensors":
            copy_range(e.file, e.start, e.nbytes, f)
        else:
            write_all(f, ckpt.raw_bytes(name))

    specs = [(n, *written_type(ckpt, n, dtype)) for n in names]
    write_safetensors(path, specs, produce, metadata)


def written_type(ckpt: Checkpoint, name: str, dtype: str | None) -> tuple[str, tuple[int, ...], int]:
    """``(safetensors code, shape, nbytes)`` of tensor ``name`` as written under ``dtype`` (see :func:`cast_code`)."""
    e = ckpt.tensors[name]
    cast = cast_code(e.dtype, dtype)
    if cast is None:
        return e.dtype, e.shape, e.nbytes
    return cast, e.shape, math.prod(e.shape) * DTYPE_OF_CODE[cast].itemsize


def run_jobs(
    jobs: Sequence[Job],
    fn: Callable[[Job, threading.Event], None],
    *,
    workers: int = 1,
    done: Callable[[Job], None] | None = None,
) -> None:
    """Run ``fn(job, stop)`` for every job, at most ``workers`` at a time (threads), stopping all on the first error.

    With ``workers == 1`` (or one job) the jobs run in order in the calling thread. Otherwise they are started in
    order on a pool of ``min(workers, len(jobs))`` threads; when one raises (or the caller is interrupted), jobs
    not yet started are cancelled, ``stop`` is set so running jobs raise :class:`Stopped` at their next check,
    every thread is joined, and then the first error is raised: nothing writes after this function returns.

    ``fn`` should check ``stop.is_set()`` regularly; ``done(job)`` is called in the calling thread after each job
    completes (e.g. a progress bar update).

    Example:
        >>> out: list[int] = []
        >>> run_jobs([1, 2, 3], lambda job, stop: out.append(job), workers=2)
        >>> sorted(out)
        [1, 2, 3]
    """
    workers = check_workers(workers)
    stop = threading.Event()
    n = min(workers, len(jobs))
    done = done or (lambda job: None)
    if n <= 1:
        for job in jobs:
            fn(job, stop)
            done(job)
        return
    pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix="mathneuro-edit-shard")
    try:
        pending = {pool.submit(fn, job, stop): job for job in jobs}
        while pending:
            finished, _ = wait(pending, return_when=FIRST_EXCEPTION)
            for fut in finished:  # a failed job raises here; its error is the one reported
                job = pending.pop(fut)
                fut.result()
                done(job)
    except BaseException:
        stop.set()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)  # join every thread before the caller cleans up
