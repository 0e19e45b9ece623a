"""Masks: which weights are math-specific, and the :class:`Mask` artifact that carries them.

Selection rule (one matrix at a time; an expert of a fused MoE weight counts as its own matrix):

- score = ``|W| * stat`` in float32, ``stat`` the per-input-feature statistic broadcast over rows;
- top-k: the ``k = int(n * top_k)`` highest scores (:func:`k_of`, the released code's rule) of the matrix
  (``granularity="matrix"``, the paper's, ``n = d_out * d_in``) or of each output row (``"row"``, Wanda's
  per-output comparison, ``n = d_in``);
- ties at the threshold are broken by position: the lower flat index (row-major in the canonical
  ``(d_out, d_in)`` view) wins, so the same inputs give the same mask bit for bit on any machine;
- ``mathneuro``: top-k on math minus the union of top-k on every general set; ``wanda``: top-k on math alone;
  ``random``: as many entries per matrix as ``mathneuro`` selects, uniformly at random from a generator seeded
  by ``sha256(seed, name, expert)`` (independent of iteration order).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from ..errors import InputError
from .stats import read_safetensors_with_meta, write_safetensors_with_meta
from .targets import Target, canonical_view
from .top_k_rule import is_top_k, top_k_error
from .topk import top_fraction, top_fraction_flat

if TYPE_CHECKING:
    from .stats import ActivationStats

__all__ = ["Mask", "as_mask", "k_of", "random_like", "check_mask_args", "find_math_params"]

Method = Literal["mathneuro", "wanda", "random", "general"]
Granularity = Literal["matrix", "row"]
_FORMAT = "mathneuro-edit/mask/v1"


def _unpack(bits: torch.Tensor, numel: int) -> torch.Tensor:
    # A view, not astype(bool): unpackbits gives 0/1 bytes, valid bools as they are, and a copy doubled the peak
    # of unpacking an 8B model's lm_head mask (0.5 GB more).
    return torch.from_numpy(np.unpackbits(bits.numpy(), count=numel, bitorder="little").view(np.bool_))


# Why the stored data is checked against the claimed shapes before anything is built from them: a mask file is an
# input (shared, downloaded, edited); a 304-byte file claiming a 60000 x 60000 entry made the loader allocate 4.1 GB
# (the entry unpacked to hash it) before it was refused, and one listing an index 500 times was counted as 500
# edited weights on the card (issue 41).
_MASK_FIX = "the file is corrupt or was edited: recreate it with `mathneuro-edit mask`"
_HASH_BLOCK = 1 << 20  # packed bytes of an index-stored entry hashed at a time (8 Mi weights, 8 MB of bools)
# Why bounds on the claimed weights: the content hash covers every claimed weight (an index-stored entry's zeros
# too, 1 bit each, ~1 GB/s), so a 300-byte file claiming [10^12, 10^12] hashed for hours (issue 48). The largest
# matrix of any released model is a few billion weights (a 256k x 16k embedding: 4.2e9; a stacked MoE expert
# tensor: ~1.6e9), the largest model ~2e12 weights: 16x and 1x headroom.
_MAX_ENTRY_WEIGHTS = 1 << 36  # 68.7e9 weights, 8 GiB of packed bits
_MAX_MASK_WEIGHTS = 1 << 41  # 2.2e12 weights, 256 GiB of packed bits
_POPCOUNT = np.array([bin(i).count("1") for i in range(256)], dtype=np.uint8)


def _shown_count(n: int) -> str:
    """A count as an error line shows it: with separators, or ``about 1e+24`` past 15 digits."""
    return f"{n:,}" if n < 10**15 else f"about {float(n):.0e}"


def _shown_shape(shape: tuple[int, ...]) -> str:
    """A claimed shape as an error line shows it: its first 8 sizes, each cut like :func:`_shown_count`."""
    shown = [str(d) if d < 10**15 else f"{float(d):.0e}" for d in shape[:8]]
    return "[" + ", ".join(shown + (["..."] if len(shape) > 8 else [])) + "]"


def _entry_count(where: str, shape: tuple[int, ...], kind: str, data: torch.Tensor) -> int:
    """The selected weights of one stored entry, after checking its data against its claimed shape.

    ``bits``: exactly ``ceil(numel / 8)`` uint8 bytes, the padding bits past the last weight zero; ``idx``: int32
    or int64 positions inside the shape, strictly increasing, as :meth:`Mask.save` writes them (so each weight is
    counted once). Costs the stored data's size, never the claimed shape's."""
    if any(d < 0 for d in shape):
        raise InputError(f"{where} claims shape {list(shape)}, a negative size; {_MASK_FIX}")
    numel = math.prod(shape)  # a Python int: no overflow, nothing allocated
    if numel > _MAX_ENTRY_WEIGHTS:
        raise InputError(
            f"{where} claims shape {_shown_shape(shape)} ({_shown_count(numel)} weights), more than any model's "
            f"matrix holds (at most {_MAX_ENTRY_WEIGHTS:,}); {_MASK_FIX}"
        )
    if kind == "bits":
        want = (numel + 7) // 8
        if data.dtype != torch.uint8 or data.dim() != 1 or data.numel() != want:
            raise InputError(
                f"{where} claims shape {list(shape)} ({numel:,} weights: {want:,} bytes of bits) but stores "
                f"{data.numel():,} {str(data.dtype).removeprefix('torch.')} values; {_MASK_FIX}"
            )
        raw = data.numpy()
        if want and numel % 8 and int(raw[-1]) >> (numel % 8):
            raise InputError(f"{where} selects bits past its {numel:,} weights; {_MASK_FIX}")
        return int(_POPCOUNT[raw].sum(dtype=np.int64))
    if kind != "idx":
        raise InputError(f"{where} is stored as {kind!r}, not as bits or idx; {_MASK_FIX}")
    if data.dtype not in (torch.int32, torch.int64) or data.dim() != 1:
        raise InputError(
            f"{where} stores its indices as a {data.dtype} tensor of shape {list(data.shape)}; {_MASK_FIX}"
        )
    if data.numel() > numel:
        raise InputError(f"{where} lists {data.numel():,} indices for its {numel:,} weights; {_MASK_FIX}")
    idx = data.long()
    repeat = (idx[1:] <= idx[:-1]).nonzero()
    if repeat.numel():  # a forged list counts one weight many times (the card's count) unless refused
        i = int(repeat[0])
        before, at = int(idx[i]), int(idx[i + 1])
        what = f"index {at:,} more than once" if at == before else f"index {at:,} after {before:,}"
        raise InputError(f"{where} lists {what} (each selected weight once, in increasing order); {_MASK_FIX}")
    if idx.numel() and (int(idx[0]) < 0 or int(idx[-1]) >= numel):
        bad = int(idx[0]) if int(idx[0]) < 0 else int(idx[-1])
        raise InputError(f"{where} lists index {bad:,}, outside its {numel:,} weights; {_MASK_FIX}")
    return int(idx.numel())


def _stored_sha256(shapes: Mapping[str, tuple[int, ...]], store: Mapping[str, tuple[str, torch.Tensor]]) -> str:
    """:attr:`Mask.sha256`: names, shapes and selected bits, from the stored form (an index-stored entry is packed
    block by block, never unpacked to its full bool tensor: that unpack of a claimed 60000 x 60000 entry was the
    4.1 GB)."""
    h = hashlib.sha256(_FORMAT.encode())
    zeros = memoryview(bytes(_HASH_BLOCK))
    for name in sorted(store):
        shape = shapes[name]
        h.update(f"\n{name}:{shape}\n".encode())
        kind, data = store[name]
        if kind == "bits":
            h.update(data.numpy().tobytes())
            continue
        numel, idx = math.prod(shape), data.long().numpy()
        nbytes = (numel + 7) // 8
        for lo in range(0, nbytes, _HASH_BLOCK):
            hi = min(lo + _HASH_BLOCK, nbytes)
            a, b = np.searchsorted(idx, [lo * 8, hi * 8])
            if a == b:  # no selected weight in this block: its packed bytes are zeros
                h.update(zeros[: hi - lo])
                continue
            bits = np.zeros(min(hi * 8, numel) - lo * 8, dtype=np.bool_)
            bits[idx[a:b] - lo * 8] = True
            h.update(np.packbits(bits, bitorder="little").tobytes())
    return h.hexdigest()


class Mask(Mapping[str, torch.Tensor]):
    """A read-only mapping ``parameter name -> bool tensor`` (True = selected), with provenance.

    Stored compactly (per tensor, bit-packed or as flat indices, whichever is smaller); a value is unpacked
    to a full bool tensor of the parameter's shape on access.

    Example:
        >>> m = Mask({"w": torch.tensor([[True, False], [False, False]])}, {"method": "mathneuro"})
        >>> m["w"].sum().item(), m.counts()["w"]
        (1, (1, 4))
    """

    def __init__(self, tensors: Mapping[str, torch.Tensor], meta: Mapping[str, Any] | None = None) -> None:
        self._shapes: dict[str, tuple[int, ...]] = {}
        self._store: dict[str, tuple[str, torch.Tensor]] = {}  # name -> ("bits"|"idx", data)
        self._counts: dict[str, int] = {}
        for name, t in tensors.items():
            self._add(name, t.to(torch.bool))
        self.meta: dict[str, Any] = dict(meta or {})
        self._sha: str | None = None

    def _add(self, name: str, t: torch.Tensor) -> None:
        flat = t.reshape(-1).cpu()
        numel, count = flat.numel(), int(torch.count_nonzero(flat))
        idx_dtype = torch.int32 if numel < 2**31 else torch.int64
        idx_bytes = count * (4 if idx_dtype == torch.int32 else 8)
        if idx_bytes < (numel + 7) // 8:  # indices are smaller below ~1/32 (int32) density
            self._store[name] = ("idx", flat.nonzero().squeeze(1).to(idx_dtype))
        else:
            self._store[name] = ("bits", torch.from_numpy(np.packbits(flat.numpy(), bitorder="little")))
        self._shapes[name] = tuple(t.shape)
        self._counts[name] = count

    # Mapping protocol
    def __getitem__(self, name: str) -> torch.Tensor:
        kind, data = self._store[name]
        shape = self._shapes[name]
        numel = math.prod(shape)
        if kind == "bits":
            return _unpack(data, numel).reshape(shape)
        flat = torch.zeros(numel, dtype=torch.bool)
        flat[data.long()] = True
        return flat.reshape(shape)

    def __iter__(self) -> Iterator[str]:
        return iter(self._store)

    def __len__(self) -> int:
        return len(self._store)

    def __repr__(self) -> str:
        sel, tot = self.total()
        return f"Mask({len(self)} tensors, {sel}/{tot} selected, method={self.meta.get('method')!r})"

    def shape_of(self, name: str) -> tuple[int, ...]:
        """Shape of the parameter ``name`` (without unpacking)."""
        return self._shapes[name]

    def counts(self) -> dict[str, tuple[int, int]]:
        """Per tensor: ``(selected, total)``."""
        return {n: (self._counts[n], math.prod(s)) for n, s in self._shapes.items()}

    def total(self) -> tuple[int, int]:
        """``(selected, total)`` over all tensors of the mask."""
        c = self.counts().values()
        return sum(a for a, _ in c), sum(b for _, b in c)

    @property
    def sha256(self) -> str:
        """Content hash: names, shapes and selected bits (not the provenance metadata)."""
        if self._sha is None:
            self._sha = _stored_sha256(self._shapes, self._store)
        return self._sha

    def save(self, path: str | Path) -> Path:
        """Write the mask as a safetensors file (compact tensors + JSON metadata); atomic."""
        tensors = {f"{kind}/{name}": data.contiguous() for name, (kind, data) in self._store.items()}
        header = {"shapes": {n: list(s) for n, s in self._shapes.items()}, "meta": self.meta, "sha256": self.sha256}
        return write_safetensors_with_meta(Path(path), tensors, _FORMAT, header)

    @classmethod
    def load(cls, path: str | Path) -> Mask:
        """Read a mask written by :meth:`save`, checked against its claimed shapes (:func:`_entry_count`) and content
        hash (:func:`_stored_sha256`) before anything is built from them: a forged file costs its own size."""
        tensors, header = read_safetensors_with_meta(path, _FORMAT, "mask")
        mask = cls.__new__(cls)
        try:
            mask._shapes = {n: tuple(int(d) for d in s) for n, s in header["shapes"].items()}
            mask._store = {key.split("/", 1)[1]: (key.split("/", 1)[0], data) for key, data in tensors.items()}
            if set(mask._store) != set(mask._shapes):
                raise KeyError(sorted(set(mask._store) ^ set(mask._shapes))[0])
            mask.meta, recorded = header["meta"], header["sha256"]
            if not isinstance(mask.meta, dict):
                raise TypeError("meta is not a mapping")
        except (KeyError, TypeError, ValueError, AttributeError, RuntimeError, IndexError) as e:
            raise InputError(
                f"{path}: malformed mask header ({type(e).__name__}: {str(e)[:80]}); {_MASK_FIX}"
            ) from None
        mask._counts = {
            n: _entry_count(f"{path}: mask entry {n!r}", mask._shapes[n], *mask._store[n]) for n in mask._shapes
        }
        total = sum(math.prod(shape) for shape in mask._shapes.values())  # each entry already bounded
        if total > _MAX_MASK_WEIGHTS:
            raise InputError(
                f"{path}: the mask's {len(mask._shapes):,} entries claim {_shown_count(total)} weights, more than "
                f"any model holds (at most {_MAX_MASK_WEIGHTS:,}); {_MASK_FIX}"
            )
        mask._sha = _stored_sha256(mask._shapes, mask._store)
        if mask._sha != recorded:
            raise InputError(f"{path}: mask content does not match its recorded sha256; the file is corrupt")
        # keep the stored order of the original (safetensors sorts keys)
        mask._store = {n: mask._store[n] for n in mask._shapes}
        return mask


def k_of(top_k: float, n: int) -> int:
    """Entries kept per matrix (or row) of ``n`` entries: ``int(n * top_k)``, the released code's rule.

    Why this expression exactly: the released MathNeuro code computes ``keep_num = int(num_params * keep_ratio)``
    (a float64 multiply, then truncation toward zero), so a faithful mask keeps exactly that many entries, and
    none when the product is below 1 (a matrix smaller than ``1 / top_k`` contributes nothing).

    Example:
        >>> k_of(0.05, 4096), k_of(0.1, 30), k_of(0.05, 19)
        (204, 3, 0)
    """
    return min(n, int(n * top_k))


def _top_masks(scores: torch.Tensor, top_ks: Sequence[float], granularity: Granularity) -> list[torch.Tensor]:
    """``scores`` is one matrix ``(d_out, d_in)``; returns its top-k bool mask for each ``top_k``."""
    if granularity == "row":
        return [top_fraction(scores, k_of(k, scores.shape[1])) for k in top_ks]
    flat = scores.reshape(-1)
    return [m.reshape(scores.shape) for m in top_fraction_flat(flat, [k_of(k, flat.numel()) for k in top_ks])]


def _general_specific(
    general: torch.Tensor, math_top: torch.Tensor, math_specific: torch.Tensor, granularity: Granularity
) -> torch.Tensor:
    """Per matrix (or row), as many entries as ``math_specific`` holds: the highest ``general`` scores outside
    ``math_top`` (ties to the lower index). All ``(d_out, d_in)``.

    Example:
        >>> g = torch.tensor([[4.0, 3.0, 2.0, 1.0]])
        >>> _general_specific(g, torch.tensor([[True, False, False, True]]), torch.tensor([[False] * 3 + [True]]),
        ...                   "matrix").tolist()
        [[False, True, False, False]]
    """
    rows = general if granularity == "row" else general.reshape(1, -1)  # (groups, entries)
    counts = (math_specific if granularity == "row" else math_specific.reshape(1, -1)).sum(1, keepdim=True)
    masked = rows.masked_fill(math_top.reshape(rows.shape), -math.inf)
    order = torch.argsort(masked, dim=1, descending=True, stable=True)  # (groups, entries)
    rank = torch.empty_like(order).scatter_(1, order, torch.arange(rows.shape[1], device=order.device).expand_as(order))
    return (rank < counts).reshape(general.shape)


def seed_for(seed: int, name: str, group: int) -> int:
    """The seed of one random group (``method="random"``): from the run's seed, the parameter and the group alone."""
    digest = hashlib.sha256(f"{seed}:{name}:{group}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


def random_like(sel: torch.Tensor, seed: int, name: str, group: int) -> torch.Tensor:
    """``method="random"``: as many entries as ``sel`` holds, drawn uniformly by the group's own generator."""
    count, n = int(torch.count_nonzero(sel)), sel.numel()
    rng = torch.Generator().manual_seed(seed_for(seed, name, group))
    flat = torch.zeros(n, dtype=torch.bool)
    flat[torch.randperm(n, generator=rng)[:count]] = True
    return flat.reshape(sel.shape)


def _scores(weight: torch.Tensor, stat: torch.Tensor, name: str) -> torch.Tensor:
    s = weight.to(torch.float32, copy=True).abs_().mul_(stat.to(weight.device, torch.float32).unsqueeze(0))
    # one reduction instead of an elementwise isfinite: max() propagates NaN and shows inf
    if not torch.isfinite(s.max()):
        raise InputError(
            f"{name}: non-finite importance scores (NaN/inf in the weights or statistics); check the model"
        )
    return s  # (d_out, d_in) float32


def _check_stats(
    targets: Mapping[str, Target],
    params: Mapping[str, torch.Tensor],
    stats: ActivationStats,
    label: str,
    math_norm: Mapping[str, torch.Tensor] | None = None,
) -> None:
    for name, t in targets.items():
        if name not in params:
            raise InputError(
                f"{label}: statistics for {name!r}, which is not a parameter of this model; "
                "the statistics come from another model: recalibrate on this one"
            )
        # a lazy mapping (loading.weights_from_checkpoint/model_weights) gives shapes without reading tensors
        shape = tuple(params.shape_of(name) if hasattr(params, "shape_of") else params[name].shape)
        own = stats.targets.get(name, t)  # this set's own record: math and general may come from different models
        if shape != own.shape or shape != t.shape:
            bad = own.shape if own.shape != shape else t.shape
            raise InputError(
                f"{label}: {name!r} has shape {bad} in the statistics but {shape} in the "
                "model; the statistics come from another model: recalibrate on this one"
            )
        if name not in stats.norm_sum:
            raise InputError(f"{label}: no statistics for {name!r}; calibrate all sets with the same targets")
        ref = math_norm.get(name) if math_norm is not None else None
        if ref is not None and tuple(stats.norm_sum[name].shape) != tuple(ref.shape):
            raise InputError(
                f"{label}: {name!r} has statistics of shape {tuple(stats.norm_sum[name].shape)} but "
                f"{tuple(ref.shape)} in math_stats; the sets come from different models: calibrate all on this one"
            )


def check_mask_args(top_ks: Sequence[float], method: str, granularity: str, statistic: str) -> None:
    """Refuse a ``top_k`` outside (0, 1] and an unknown method, granularity or statistic (one line each)."""
    for top_k in top_ks:
        if not is_top_k(top_k):
            raise top_k_error(top_k)
    if method not in ("mathneuro", "wanda", "random", "general"):
        raise InputError(f"method: must be mathneuro, wanda, random or general, got {method!r}")
    if granularity not in ("matrix", "row"):
        raise InputError(f"granularity: must be matrix or row, got {granularity!r}")
    if statistic not in ("l2", "wanda"):
        raise InputError(f"statistic: must be l2 or wanda, got {statistic!r}")


def find_math_params(
    model: nn.Module | Mapping[str, torch.Tensor],
    math_stats: ActivationStats,
    general_stats: ActivationStats | Sequence[ActivationStats] | None,
    *,
    top_k: float | Sequence[float],
    method: Method = "mathneuro",
    granularity: Granularity = "matrix",
    seed: int = 0,
    statistic: Literal["l2", "wanda"] = "l2",
    progress: bool = False,
    device: str | torch.device | None = None,
) -> Mask | list[Mask]:
    """Find the math-specific weights (MathNeuro) from saved statistics, without forward passes.

    Why 10 parameters: the model (or its weights) and the math and general statistics, then seven keyword-only
    options, each one documented choice (``top_k`` required, the others with a default).

    Args:
        model: the model the statistics were computed on (or a mapping ``name -> weight``).
        general_stats: one or several non-math sets (a weight in the top-k of any is excluded); may be ``None`` for
            ``method="wanda"``.
        top_k: fraction of each matrix (or row) in (0, 1]: one value gives one :class:`Mask`; a sequence of
            values (a sweep) gives a list of masks, one per value, in order, from one pass: each matrix's scores
            (and, with ``granularity="matrix"``, its score histogram) are computed once for all values, so 8
            values cost little more than one, and every mask is identical to the one value's call.
        method: ``"mathneuro"``, ``"wanda"`` (math top-k alone), ``"random"`` (same count per matrix as
            mathneuro, at random) or ``"general"`` (the control of the opposite selection: per matrix or row, as
            many weights as mathneuro selects, the highest by importance on the first general set among the weights
            outside the math top-k; with one general set these are exactly its top-k minus the math top-k, the
            *general*-specific weights, of similar magnitude to the math-specific ones).
        granularity: ``"matrix"`` (the paper's) or ``"row"``.
        statistic: ``"l2"`` (the paper's) or ``"wanda"`` (:meth:`~.stats.ActivationStats.statistic`).
        device: where the scores and the selection are computed, one matrix at a time (``"cuda"``: a GPU's
            milliseconds instead of a CPU's seconds per matrix); ``None``: each weight's own device. The mask is
            the same bits on every device: float32 scores (one exact multiply each), an integer histogram select
            and a stable sort for the ties (the lower index wins).

    Returns:
        A :class:`Mask` with one entry per target, carrying its provenance in ``mask.meta`` (``top_k`` a number),
        or a list of them (``top_k`` a sequence).

    Example:
        >>> mask = find_math_params(model, math_stats, general_stats, top_k=0.05)  # doctest: +SKIP
        >>> masks = find_math_params(model, math_stats, general_stats, top_k=[0.01, 0.05])  # doctest: +SKIP
        >>> [m.meta["top_k"] for m in masks]  # doctest: +SKIP
        [0.01, 0.05]
    """
    # a str is a Sequence too: it stays one value, refused by check_mask_args with the value as given
    several = isinstance(top_k, Sequence) and not isinstance(top_k, (str, bytes))
    top_ks = list(top_k) if several else [top_k]
    if not top_ks:
        raise InputError(f"top_k: must be in (0, 1] or a non-empty sequence of such values, got {top_k!r}")
    check_mask_args(top_ks, method, granularity, statistic)
    generals = _general_sets(general_stats, method)
    params = _checked_params(model, math_stats, generals)
    select = _Selection(top_ks, method, granularity, seed, statistic, device, math_stats, generals)
    masks = _selected(select, math_stats, params, len(top_ks), progress)
    for mask, value in zip(masks, top_ks):
        mask.meta = {
            "method": method,
            "top_k": value,
            "granularity": granularity,
            "seed": seed,
            "statistic": statistic,
            "model_fingerprint": math_stats.meta.get("model_fingerprint"),
            "math_stats_sha256": math_stats.sha256,
            "general_stats_sha256": [general.sha256 for general in generals],
        }
    return masks if several else masks[0]


def _selected(
    select: _Selection, math_stats: ActivationStats, params: Mapping[str, torch.Tensor], count: int, progress: bool
) -> list[Mask]:
    """The ``count`` masks ``select`` gives, one matrix at a time, each entry in its parameter's own layout."""
    masks = [Mask({}, {}) for _ in range(count)]
    with torch.no_grad():
        for name, t in tqdm(math_stats.targets.items(), desc="masks", disable=not progress, leave=False, unit="tensor"):
            for mask, parts in zip(masks, select.parts(name, t, params[name])):
                # back from the canonical view to the parameter's own layout
                if t.kind == "linear":
                    mask._add(name, parts[0])
                elif t.kind == "conv1d":
                    mask._add(name, parts[0].t())
                else:
                    stacked = torch.stack(parts)  # (experts, d_out, d_in)
                    mask._add(name, stacked.transpose(1, 2) if t.transposed else stacked)
    return masks


def _general_sets(
    general_stats: ActivationStats | Sequence[ActivationStats] | None, method: str
) -> list[ActivationStats]:
    """The non-math sets as a list; refused when the method needs one and none is given."""
    if method == "wanda":
        return []  # the paper's ablation: the math top-k alone, nothing subtracted
    if general_stats is None or isinstance(general_stats, Sequence):
        generals = list(general_stats or [])
    else:
        generals = [general_stats]
    if not generals:
        raise InputError(f"method {method!r} needs general_stats (at least one non-math set)")
    return generals


def _checked_params(
    model: nn.Module | Mapping[str, torch.Tensor], math_stats: ActivationStats, generals: list[ActivationStats]
) -> Mapping[str, torch.Tensor]:
    """The model's parameters by name, once every set's statistics are proven to be of this model."""
    # a Mapping is used as it is (not copied into a dict): a lazy one then holds one weight in memory at a time
    params: Mapping[str, torch.Tensor] = (
        dict(model.named_parameters(remove_duplicate=False)) if isinstance(model, nn.Module) else model
    )
    targets = math_stats.targets
    _check_stats(targets, params, math_stats, "math_stats")
    for i, general in enumerate(generals):
        if set(general.targets) != set(targets):
            diff = sorted(set(general.targets) ^ set(targets))[0]
            raise InputError(
                f"general_stats[{i}]: targets differ from math_stats (first: {diff!r}); "
                "calibrate every set with the same include/exclude"
            )
        _check_stats(targets, params, general, f"general_stats[{i}]", math_stats.norm_sum)
    return params


@dataclass(frozen=True)
class _Selection:
    """How every target is selected: the ``top_k`` values, the method and its settings, the statistics."""

    top_ks: list[float]
    method: str
    granularity: Granularity
    seed: int
    statistic: str
    device: str | torch.device | None
    math_stats: ActivationStats
    generals: list[ActivationStats]

    def parts(self, name: str, t: Target, weight: torch.Tensor) -> list[list[torch.Tensor]]:
        """Per ``top_k``: one ``(d_out, d_in)`` CPU mask per group of the target, in its canonical view."""
        top_ks, granularity, statistic = self.top_ks, self.granularity, self.statistic
        view = canonical_view(weight.detach(), t)  # (groups, d_out, d_in)
        per_k: list[list[torch.Tensor]] = [[] for _ in top_ks]
        for g in range(t.groups):
            w = view[g] if self.device is None else view[g].to(self.device)  # (d_out, d_in); the stats follow it
            sels = _top_masks(_scores(w, self.math_stats.statistic(name, statistic)[g], name), top_ks, granularity)
            tops = [m.clone() for m in sels] if self.method == "general" else []
            for gs in self.generals:
                gens = _top_masks(_scores(w, gs.statistic(name, statistic)[g], name), top_ks, granularity)
                for sel, gen in zip(sels, gens):
                    sel &= gen.logical_not_()  # in place: no extra matrix-sized temporary
            for i, sel in enumerate(sels):
                if self.method == "random":
                    sel = random_like(sel, self.seed, name, g)
                elif self.method == "general":
                    general = _scores(w, self.generals[0].statistic(name, statistic)[g], name)
                    sel = _general_specific(general, tops[i], sel, granularity)
                per_k[i].append(sel.reshape(w.shape).cpu())
        return per_k


def as_mask(mask: Any) -> Any:
    """Accept a :class:`~mathneuro_edit.engine.mask.Mask`, a path to a saved mask, or a mapping of bool tensors."""
    if isinstance(mask, Mask):
        return mask
    if isinstance(mask, (str, Path)):
        return Mask.load(mask)
    if isinstance(mask, Mapping):
        return Mask(mask)
    raise InputError(f"mask: expected a Mask, a mask file path or a mapping of bool tensors, got {type(mask).__name__}")
