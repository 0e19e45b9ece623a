"""Data-parallel calibration over processes and machines with ``torch.distributed`` (launched by ``torchrun``).

Every rank holds a full copy of the model (placed as the user likes: one GPU per rank, or CPU) and the full list
of calibration texts. :func:`calibrate_distributed`:

1. splits the texts deterministically by :func:`shard_texts`: rank ``r`` of ``W`` takes the contiguous block
   ``texts[r * n // W : (r + 1) * n // W]`` (blocks differ in size by at most one text; the split depends only
   on ``n`` and ``W``, never on timing);
2. checks that every rank got the same texts, model and settings (a sha256 compared across ranks);
3. runs the existing :func:`~mathneuro_edit.engine.calibration.calibrate` on its block;
4. sums the statistics (``norm_sum``, ``sq_sum``, ``token_count``, token and truncation counts) onto rank 0 with
   one ``torch.distributed.reduce`` per dtype, and fixes the provenance so that the result is the statistics of
   the FULL list, as a single process computes them (same keys, ``texts_sha256`` of the full list); the sums
   differ from single-process ones only by float32 summation order.

Failure handling: after each step the ranks exchange one flag each (a ``(W,)`` int64 all-reduce), so that a rank
that raises makes every rank raise (the failing rank its own error, the others a :class:`MathNeuroEditError`
naming it). A rank that dies or hangs leaves the others blocked in a collective only until the process group's
timeout (``timeout_s``, set at ``init_process_group``), after which they raise a clear error; ``torchrun`` then
stops the remaining workers and exits non-zero.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch import nn

from ..errors import InputError, MathNeuroEditError
from ..util.hashing import texts_sha256
from .calibration import calibrate
from .stats import ActivationStats
from .targets import model_fingerprint

__all__ = ["init_distributed", "local_device", "shard_texts", "calibrate_distributed", "DEFAULT_TIMEOUT_S"]

# Why 30 minutes: the ranks meet after calibrating their blocks, and a slow rank may finish that much later on a
# long run; torch's own default for gloo is the same. Lower it in tests, raise it for very long runs.
DEFAULT_TIMEOUT_S = 1800.0

T = TypeVar("T")


def init_distributed(*, timeout_s: float = DEFAULT_TIMEOUT_S, backend: str | None = None) -> tuple[int, int]:
    """Initialise ``torch.distributed`` from ``torchrun``'s environment, once; return ``(rank, world_size)``.

    ``(0, 1)`` in a plain process (no ``WORLD_SIZE`` in the environment), where nothing is initialised; an already
    initialised group is used as it is (its own timeout applies). ``timeout_s``: how long a collective waits for the
    other ranks; ``backend``: nccl when CUDA is available (one GPU per rank, chosen by ``LOCAL_RANK``), else gloo.

    Raises:
        MathNeuroEditError: the ranks could not meet within ``timeout_s``.

    Example:
        >>> init_distributed()  # in a plain python process
        (0, 1)
    """
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    if "WORLD_SIZE" not in os.environ or not dist.is_available():
        return 0, 1
    if timeout_s <= 0:
        raise InputError(f"timeout_s: must be > 0 seconds, got {timeout_s}")
    backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    try:
        dist.init_process_group(backend=backend, timeout=timedelta(seconds=timeout_s))
    except (RuntimeError, TimeoutError, ValueError) as e:
        raise MathNeuroEditError(
            f"torch.distributed: rank {os.environ.get('RANK', '?')} could not join the process group within "
            f"{timeout_s:g}s ({_first_line(e)}); check that every rank started, MASTER_ADDR/MASTER_PORT and the network"
        ) from None
    return dist.get_rank(), dist.get_world_size()


def local_device() -> torch.device:
    """The device of this rank: ``cuda:LOCAL_RANK`` when CUDA is available, else ``cpu``."""
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    return torch.device("cpu")


def shard_texts(texts: Sequence[str], rank: int, world_size: int) -> list[str]:
    """The contiguous block of ``texts`` that ``rank`` calibrates: ``texts[rank*n//W : (rank+1)*n//W]``.

    Example:
        >>> [shard_texts(list("abcde"), r, 2) for r in range(2)]
        [['a', 'b'], ['c', 'd', 'e']]
    """
    if not 0 <= rank < world_size:
        raise InputError(f"rank {rank} is not in [0, {world_size}); check RANK and WORLD_SIZE")
    n = len(texts)
    return list(texts[rank * n // world_size : (rank + 1) * n // world_size])


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:300] if text else type(e).__name__


def _collective(fn: Callable[[], T], what: str, rank: int) -> T:
    """Run a collective; turn a timeout or a vanished peer into one clear error."""
    try:
        return fn()
    except RuntimeError as e:  # gloo/nccl timeouts, closed connections (DistBackendError is a RuntimeError)
        raise MathNeuroEditError(
            f"calibrate_distributed: rank {rank}: {what} failed while waiting for the other ranks "
            f"({_first_line(e)}); another rank crashed, hung or ran past the timeout: see its log"
        ) from None


def _check_all_ok(error: BaseException | None, step: str, rank: int, world: int, device: torch.device) -> None:
    """Exchange one failure flag per rank; raise on every rank if any rank failed at ``step``."""
    flags = torch.zeros(world, dtype=torch.int64, device=device)  # (world,) 1 = that rank failed
    flags[rank] = int(error is not None)
    _collective(lambda: dist.all_reduce(flags), f"sharing the status of {step}", rank)
    failed = [r for r, f in enumerate(flags.tolist()) if f]
    if error is not None:
        raise error
    if failed:
        raise MathNeuroEditError(
            f"calibrate_distributed: rank(s) {', '.join(map(str, failed))} of {world} failed during {step} "
            f"(their own error is in their log); rank {rank} stops too"
        )


def _agreement_digest(model: nn.Module, texts: list[str], kwargs: dict[str, Any]) -> torch.Tensor:
    """sha256 of (texts, model layout, settings) as a ``(32,)`` int64 tensor, compared across ranks."""
    h = hashlib.sha256(texts_sha256(texts).encode())
    h.update(model_fingerprint(model).encode())
    h.update(json.dumps(kwargs, sort_keys=True, default=str).encode())
    return torch.tensor(list(h.digest()), dtype=torch.int64)


def calibrate_distributed(
    model: nn.Module,
    tokenizer: Any,
    texts: Sequence[str],
    *,
    out: str | Path | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    **calibrate_kwargs: Any,
) -> ActivationStats | None:
    """Calibrate data-parallel: each rank its block of ``texts``, statistics summed onto rank 0.

    Run every rank with the same arguments, e.g. ``torchrun --nproc-per-node 8 my_script.py``. In a plain
    process (no ``torchrun``, ``torch.distributed`` not initialised) this is
    :func:`~mathneuro_edit.engine.calibration.calibrate`.

    Args:
        model: this rank's copy of the model, already on its device (e.g. ``model.to(local_device())``).
        texts: the FULL list of calibration texts, identical on every rank (checked).
        out: if given, rank 0 writes the statistics there (atomic :meth:`ActivationStats.save`).
        timeout_s: process-group timeout when this call initialises ``torch.distributed``.
        **calibrate_kwargs: ``max_length``, ``batch_size``, ``include``, ``exclude``, ``include_tied_lm_head``,
            ``progress`` (shown on rank 0 only), as for ``calibrate``.

    Returns:
        On rank 0, the statistics of the full list (module docstring, step 4); ``None`` on the other ranks.

    Raises:
        InputError: fewer texts than ranks, or ranks given different texts, models or settings (on every rank).
        MathNeuroEditError: another rank failed or did not answer within the timeout.

    Example:
        >>> stats = calibrate_distributed(model, tok, texts, out="math.stats.safetensors")  # doctest: +SKIP
    """
    if isinstance(texts, str) or not isinstance(texts, Sequence):
        raise InputError("texts: must be a list of strings, got a single string or non-sequence; wrap it in a list")
    texts = list(texts)
    rank, world = init_distributed(timeout_s=timeout_s)
    # a plain process: no collectives (under torchrun, even a single rank goes through them)
    if not (dist.is_available() and dist.is_initialized()):
        stats = calibrate(model, tokenizer, texts, **calibrate_kwargs)
        if out is not None:
            stats.save(out)
        return stats
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
    kwargs = dict(calibrate_kwargs)
    kwargs["progress"] = bool(kwargs.get("progress", True)) and rank == 0

    # 1. same texts, model and settings everywhere: a mismatch would silently mix different statistics
    _check_agreement(model, texts, kwargs, rank, world, device)

    # 2. each rank its contiguous block
    local: ActivationStats | None = None
    error: BaseException | None = None
    try:
        local = calibrate(model, tokenizer, shard_texts(texts, rank, world), **kwargs)
    except Exception as e:  # reported to every rank below, then re-raised here
        error = e
    _check_all_ok(error, "calibration", rank, world, device)
    assert local is not None

    # 3. one reduce per dtype: float32 sums (norm then sq, in target order) and int64 counts + totals
    names, floats, counts = _reduce_to_rank0(local, rank, device)

    result: ActivationStats | None = None
    error = None
    if rank == 0:
        try:
            result = _unflatten(local, names, floats.cpu(), counts.cpu())
            result.meta.update(num_samples=len(texts), texts_sha256=texts_sha256(texts))
            if out is not None:
                result.save(out)
        except Exception as e:
            error = e
    _check_all_ok(error, "writing the statistics", rank, world, device)
    return result


def _unflatten(local: ActivationStats, names: list[str], floats: torch.Tensor, counts: torch.Tensor) -> ActivationStats:
    """Rebuild per-target tensors from the reduced flat buffers (inverse of :func:`_reduce_to_rank0`'s concatenation)."""
    shapes = [local.targets[n].stat_shape for n in names]  # (groups, d_in)
    parts = floats.split([g * d for g, d in shapes] * 2)
    norm = {n: p.reshape(shape).clone() for n, p, shape in zip(names, parts, shapes)}
    sq = {n: p.reshape(shape).clone() for n, p, shape in zip(names, parts[len(names) :], shapes)}
    count = {n: p.clone() for n, p in zip(names, counts.split([g for g, _ in shapes] + [2]))}
    off = sum(g for g, _ in shapes)
    meta = dict(local.meta)
    meta["num_tokens"], meta["truncated_samples"] = int(counts[off]), int(counts[off + 1])
    return ActivationStats(norm, sq, count, dict(local.targets), meta)


def _check_agreement(
    model: nn.Module, texts: list[str], kwargs: dict[str, Any], rank: int, world: int, device: torch.device
) -> None:
    """Every rank holds the same texts, model and settings (their digests' minimum equals their maximum), and
    at least one text per rank; refused alike on every rank."""
    digest = _agreement_digest(model, texts, {k: v for k, v in kwargs.items() if k != "progress"}).to(device)
    lo, hi = digest.clone(), digest.clone()
    _collective(lambda: dist.all_reduce(lo, op=dist.ReduceOp.MIN), "comparing inputs", rank)
    _collective(lambda: dist.all_reduce(hi, op=dist.ReduceOp.MAX), "comparing inputs", rank)
    if not torch.equal(lo, hi):
        raise InputError(
            "calibrate_distributed: ranks were given different texts, models or calibrate settings; "
            "pass the same full list and arguments on every rank"
        )
    if len(texts) < world:  # after the comparison: every rank decides alike
        raise InputError(f"texts: {len(texts)} samples for {world} ranks; give at least one sample per rank")


def _reduce_to_rank0(
    local: ActivationStats, rank: int, device: torch.device
) -> tuple[list[str], torch.Tensor, torch.Tensor]:
    """This rank's statistics summed onto rank 0: ``(target names, float32 sums, int64 counts and totals)``."""
    names = list(local.targets)
    floats = torch.cat([local.norm_sum[n].reshape(-1) for n in names] + [local.sq_sum[n].reshape(-1) for n in names])
    meta = local.meta
    counts = torch.cat(
        [local.token_count[n].reshape(-1) for n in names]
        + [torch.tensor([meta["num_tokens"], meta["truncated_samples"]], dtype=torch.int64)]
    )
    floats, counts = floats.to(device), counts.to(device)
    _collective(lambda: dist.reduce(floats, dst=0), "summing statistics", rank)
    _collective(lambda: dist.reduce(counts, dst=0), "summing statistics", rank)
    return names, floats, counts
