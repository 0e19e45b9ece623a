"""What ``reproduce`` and ``verify`` conclude, in words: which of the statistics, the mask and the weights held, and
on which devices.

What a recipe promises across devices (the lock's ``device``): the mask and the output weights are the product and
must be the same bits; the statistics are float sums whose order differs between a CPU and a GPU (and between GPU
kernels), so they may differ in the last bits without changing the selection. A verdict therefore names each:

- ``yes, bit for bit``: statistics, mask and output weights all equal the lock's;
- ``same mask and output weights; the statistics differ in float rounding (made on cuda, checked on cpu)``: the
  product reproduced; the sums did not, and the report says by how much when the run's statistics files are at hand;
- ``NO: the mask differs: ...``: the selection changed (the weights with it), naming the matrices and counts;
- ``yes, bit for bit: the mask and every output file; ...``: the statistics' hash is not the lock's, but nothing
  shows their values differ (the same kind of device, and the run's own statistics files not at hand to compare).

A statistics hash also covers its header (the library versions, where the data came from): hashed again with the
lock's versions, equal sums give the lock's hash, so newer libraries alone are not called a difference.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from ..engine.devices import device_type
from ..engine.mask import Mask
from ..errors import InputError
from ..layout import MASK_NAME, STATS_DIR
from .steps.mask import Statistics

__all__ = [
    "StatsComparison",
    "devices_note",
    "compare_statistics",
    "with_versions",
    "max_relative_difference",
    "mask_difference",
    "run_files_near",
]


def devices_note(made_on: Any, checked_on: Any) -> str:
    """``made on cuda, checked on cpu`` from two lock ``device`` records (``an unrecorded device`` for a lock
    written before the device was recorded, or by ``export``).

    Example:
        >>> devices_note({"type": "cuda", "name": "NVIDIA H200"}, {"type": "cpu", "name": "x86_64"})
        'made on cuda, checked on cpu'
    """
    made = device_type(made_on) or "an unrecorded device"
    return f"made on {made}, checked on {device_type(checked_on) or 'an unrecorded device'}"


@dataclass(frozen=True)
class StatsComparison:
    """The re-run's statistics against the lock's: ``match`` by sha256 (``None``: the lock records none), and the
    largest relative difference of their values when the run's own statistics files were at hand."""

    match: bool | None
    max_relative: float | None = None
    versions_only: bool = False  # equal once the library versions their header records are the lock's

    def values_differ(self, across_devices: bool) -> bool:
        """Whether the sums themselves differ: measured (the run's own files at hand), or, unmeasured, expected
        because the run was made on another kind of device. A hash that differs for another reason (the header's
        library versions, the data's provenance) is not a difference of values."""
        if self.match is not False:
            return False
        return self.max_relative > 0 if self.max_relative is not None else across_devices

    def clause(self, where: str, across_devices: bool = False) -> str:
        """``the statistics differ in float rounding (largest relative difference 2.4e-07; made on cuda, checked
        on cpu)``, or that they match, or why the hash alone cannot tell; ``where``: the devices note."""
        if self.match is None:
            return f"the lock records no statistics hash ({where})"
        if self.match and self.versions_only:
            return (
                "the statistics match bit for bit; only the library versions their header records changed "
                f"(see the notes; {where})"
            )
        if self.match:
            return f"the statistics match bit for bit ({where})"
        if self.values_differ(across_devices):
            size = f"largest relative difference {self.max_relative:.2g}; " if self.max_relative is not None else ""
            return f"the statistics differ in float rounding ({size}{where})"
        if self.max_relative == 0:
            return (
                "the statistics' values match bit for bit; their header is not the lock's (it records the library "
                f"versions and where the data came from; {where})"
            )
        return (
            "the statistics' sha256 is not the lock's and their values are not at hand to compare (pass the run "
            f"folder, which holds them; {where})"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "match": self.match,
            "max_relative_difference": self.max_relative,
            "only_the_recorded_versions_differ": self.versions_only,
        }


def max_relative_difference(a: Statistics, b: Statistics) -> float:
    """The largest ``|a - b| / max(|a|, |b|)`` over every sum of two runs' statistics (0 where both are 0).

    Raises:
        InputError: the two are not statistics of the same targets and sets.
    """
    pairs = list(zip([a.math, *a.general], [b.math, *b.general]))
    if len(a.general) != len(b.general) or any(x is None or y is None for x, y in pairs):
        raise InputError("the two statistics folders hold different sets; they are not of the same recipe")
    worst = 0.0
    for x, y in pairs:
        assert x is not None and y is not None
        if set(x.norm_sum) != set(y.norm_sum):
            raise InputError("the two statistics folders score different targets; they are not of the same recipe")
        for name in x.norm_sum:
            for p, q in ((x.norm_sum[name], y.norm_sum[name]), (x.sq_sum[name], y.sq_sum[name])):
                scale = torch.maximum(p.abs(), q.abs())
                diff = (p - q).abs()
                rel = torch.where(scale > 0, diff / scale.clamp_min(torch.finfo(torch.float32).tiny), diff)
                worst = max(worst, float(rel.max()) if rel.numel() else 0.0)
    return worst


def compare_statistics(
    recorded: Any,
    again: Statistics,
    original: Statistics | None = None,
    lock_versions: Mapping[str, Any] | None = None,
) -> StatsComparison:
    """The lock's ``stats_sha256`` against the re-run's statistics ``again``, and (the run's own ``original`` given)
    how far their values are apart.

    Why the versions: a statistics file's hash covers its header, which records the tool's, torch's and
    transformers' versions; a re-run under newer libraries with the same sums has another hash. Hashed again with
    the lock's ``versions`` in place of today's, equal sums give the lock's hash exactly.
    """
    if not recorded:
        return StatsComparison(None)
    if recorded == again.sha256:
        return StatsComparison(True, 0.0)
    if lock_versions and recorded == with_versions(again, lock_versions).sha256:
        return StatsComparison(True, 0.0, versions_only=True)
    worst = max_relative_difference(original, again) if original is not None else None
    return StatsComparison(False, worst)


def with_versions(stats: Statistics, versions: Mapping[str, Any]) -> Statistics:
    """``stats`` whose headers record ``versions`` (a lock's: ``tool``, ``torch``, ``transformers``) instead."""
    recorded = {"mathneuro_edit": versions.get("tool"), "torch": versions.get("torch"),
                "transformers": versions.get("transformers")}  # fmt: skip

    def one(s: Any) -> Any:
        return None if s is None else replace(s, meta={**s.meta, "versions": recorded})

    return Statistics(one(stats.math), [one(g) for g in stats.general], stats.records, stats.device)


def mask_difference(lock_mask: Mask, rerun_mask: Mask, limit: int = 3) -> str:
    """The weights two masks select differently, in words: ``7 weights selected differently in 2 of 28 matrices
    (model.layers.0.mlp.up_proj.weight: 3 only in the lock's mask, 4 only in the re-run's; ...)``.

    Example:
        >>> a = Mask({"w": torch.tensor([True, False, False])}); b = Mask({"w": torch.tensor([False, True, False])})
        >>> print(mask_difference(a, b))
        2 weights selected differently in 1 of 1 matrices (w: 1 only in the lock's mask, 1 only in the re-run's)
    """
    names = sorted(set(lock_mask) | set(rerun_mask))
    parts: list[str] = []
    total = changed = 0
    for name in names:
        if name not in lock_mask or name not in rerun_mask:
            changed += 1
            parts.append(f"{name}: only in the {'re-run' if name not in lock_mask else 'lock'}'s mask")
            continue
        a, b = lock_mask[name], rerun_mask[name]
        if a.shape != b.shape:
            changed += 1
            parts.append(f"{name}: shape {list(a.shape)} in the lock's mask, {list(b.shape)} in the re-run's")
            continue
        only_a, only_b = int((a & ~b).sum()), int((b & ~a).sum())
        if only_a or only_b:
            changed += 1
            total += only_a + only_b
            parts.append(f"{name}: {only_a} only in the lock's mask, {only_b} only in the re-run's")
    more = f"; {len(parts) - limit} more" if len(parts) > limit else ""
    return (
        f"{total} weights selected differently in {changed} of {len(names)} matrices ({'; '.join(parts[:limit])}{more})"
    )


def run_files_near(source: str | Path, lock: Mapping[str, Any]) -> tuple[Mask | None, Statistics | None]:
    """The run's own mask and statistics beside a local source (a run folder, or a file or sub-folder in one),
    each only when its sha256 is the lock's: what names a mask difference and sizes a statistics difference.
    ``(None, None)`` for a Hub repo or a lock file alone."""
    p = Path(source)
    if not p.exists():
        return None, None
    folders = [p] if p.is_dir() else []
    folders += [p.parent, p.parent.parent] if p.is_file() else [p.parent]
    mask = stats = None
    for folder in folders:
        if mask is None and (folder / MASK_NAME).is_file():
            try:
                found = Mask.load(folder / MASK_NAME)
            except InputError:
                found = None
            mask = found if found is not None and found.sha256 == lock.get("mask_sha256") else None
        if stats is None and (folder / STATS_DIR).is_dir():
            try:
                found_stats = Statistics.load(folder / STATS_DIR)
            except InputError:
                found_stats = None
            if found_stats is not None and found_stats.sha256 == lock.get("stats_sha256"):
                stats = found_stats
    return mask, stats
