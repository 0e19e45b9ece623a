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
  shows their values differ (the same kind of device, and the run's own statistics files not at hand to compare);
- ``NO: the files you have differ from the lock: mask.safetensors (changed), ...``: a file the lock records (an
  output, or one of its ``run_files``: the mask, the statistics, the evaluation, a card) is not the one the run
  wrote, the first found named first, whatever the re-run gives;
- ``NO: same mask and output weights, but the statistics differ on the same kind of device ...``: float rounding is
  another device's; on the same device (the same type and model) the sums must be the same bits. A lock that
  records no device is never taken for another device: its verdict says it cannot tell;
- ``yes for every file the lock records ...; not checked ...``: a lock written before ``run_files`` records no
  sha256 of some files present (the mask, the statistics, ...): they are named, and the verdict is not "bit for
  bit".

:func:`reproduce_verdict` decides, from the recorded and found hashes, the re-run and the two devices alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from ..engine.devices import device_type
from ..engine.mask import Mask
from ..errors import InputError
from ..layout import MASK_NAME, STATS_DIR
from ..publish.integrity import compare_files
from ..util.console import terminal_safe
from .steps.mask import Statistics

__all__ = [
    "StatsComparison",
    "Rerun",
    "Verdict",
    "reproduce_verdict",
    "another_device",
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
    made, checked = device_type(made_on) or "an unrecorded device", device_type(checked_on) or "an unrecorded device"
    if made == checked and another_device(made_on, checked_on):  # two models of one kind: name them
        made, checked = f"{made} ({made_on['name']})", f"{checked} ({checked_on['name']})"
    return f"made on {made}, checked on {checked}"


def another_device(made_on: Any, checked_on: Any) -> bool | None:
    """Whether two lock ``device`` records are different devices (another type, or another model of it: an H100
    and an H200 may add in another order); ``None`` when either is not recorded (a lock written before devices
    were, or by ``export``): unknown, never taken for another device.

    Example:
        >>> h200, cpu = {"type": "cuda", "name": "NVIDIA H200"}, {"type": "cpu", "name": "x86_64"}
        >>> another_device(h200, cpu), another_device(cpu, dict(cpu)), another_device(None, cpu)
        (True, False, None)
    """
    made, checked = device_type(made_on), device_type(checked_on)
    if made is None or checked is None:
        return None
    names = [r.get("name") for r in (made_on, checked_on)]
    return made != checked or (None not in names and names[0] != names[1])


@dataclass(frozen=True)
class StatsComparison:
    """The re-run's statistics against the lock's: ``match`` by sha256 (``None``: the lock records none), and the
    largest relative difference of their values when the run's own statistics files were at hand."""

    match: bool | None
    max_relative: float | None = None
    versions_only: bool = False  # equal once the library versions their header records are the lock's

    def values_differ(self, across_devices: bool | None) -> bool:
        """Whether the sums themselves differ: measured (the run's own files at hand), or, unmeasured, expected
        because the run was made on another device (``across_devices``, :func:`another_device`). A hash that
        differs for another reason (the header's library versions, the data's provenance) is not a difference of
        values."""
        if self.match is not False:
            return False
        return self.max_relative > 0 if self.max_relative is not None else across_devices is True

    def clause(self, where: str, across_devices: bool | None = False) -> str:
        """``the statistics differ in float rounding (largest relative difference 2.4e-07; made on cuda, checked
        on cpu)`` (another device only: on the same one, or an unrecorded one, the difference is said without
        that excuse), or that they match, or why the hash alone cannot tell; ``where``: the devices note."""
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
            if across_devices is None:
                return (
                    f"the statistics differ ({size}{where}); the lock records no device, so whether another "
                    "device's float rounding explains it cannot be told"
                )
            if not across_devices:
                return (
                    f"the statistics differ on the same device ({size}{where}), where they must be the same "
                    "bits: not another device's float rounding"
                )
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


@dataclass(frozen=True)
class Rerun:
    """The re-run against the lock: its mask's match (and the difference in words, when the run's own mask was at
    hand), each recorded output file's state (``match``, ``differs``, ``missing``; ``extra``: written now, not
    recorded, listed but not a failure), and its statistics against the lock's."""

    mask_match: bool
    files: Mapping[str, str] = field(default_factory=dict)
    stats: StatsComparison = StatsComparison(None)
    mask_change: str | None = None

    @property
    def ok(self) -> bool:
        return self.mask_match and all(v in ("match", "extra") for v in self.files.values())


@dataclass(frozen=True)
class Verdict:
    """What ``reproduce`` concludes: ``ok`` (exit 0) and the words after ``reproduced: ``."""

    ok: bool
    text: str


def reproduce_verdict(
    recorded: Mapping[str, str | None] | None,
    found: Mapping[str, str] | None,
    rerun: Rerun,
    made_on: Any,
    checked_on: Any,
) -> Verdict:
    """The verdict of ``reproduce``: never ``yes`` when a file, the mask or an output differs, nor when the
    statistics differ on the same device; never ``bit for bit`` when a file present could not be checked.

    ``recorded``: ``{path: sha256}`` the lock records of the files checked (a ``None`` value: a file the lock should
    record but does not, as in a lock written before ``run_files``; ``None``: a lock file alone, no files), against
    ``found`` (:func:`~mathneuro_edit.publish.integrity.compare_files`); ``made_on``, ``checked_on``: the lock's and
    the re-run's ``device`` records.

    Example:
        >>> rerun = Rerun(True, {"checkpoint/model.safetensors": "match"}, StatsComparison(True, 0.0))
        >>> cpu = {"type": "cpu", "name": "x86_64"}
        >>> reproduce_verdict({"mask.safetensors": "a"}, {"mask.safetensors": "b"}, rerun, cpu, cpu).text
        'NO: the files you have differ from the lock: mask.safetensors (changed)'
        >>> reproduce_verdict({"mask.safetensors": "a"}, {"mask.safetensors": "a"}, rerun, cpu, cpu).text
        'yes, bit for bit (made on cpu, checked on cpu)'
    """
    states = compare_files(found or {}, recorded) if recorded is not None else {}
    bad = [f"{terminal_safe(p)} ({s})" for p, s in states.items() if s not in ("match", "unchecked")]
    if bad:
        return Verdict(False, f"NO: the files you have differ from the lock: {', '.join(bad)}")
    where, across = devices_note(made_on, checked_on), another_device(made_on, checked_on)
    stats = rerun.stats.clause(where, across)
    if not rerun.mask_match:
        what = rerun.mask_change or "its sha256 is not the lock's (the run's mask file is not here to name the weights)"
        return Verdict(False, f"NO: the mask differs: {what}; {stats}")
    if not rerun.ok:
        diff = ", ".join(f"{p} ({s})" for p, s in sorted(rerun.files.items()) if s not in ("match", "extra"))
        return Verdict(False, f"NO: same mask, but the output files differ: {diff}; {stats}")
    unchecked = [terminal_safe(p) for p, s in states.items() if s == "unchecked"]
    not_checked = f"; not checked (the lock records no sha256 of them): {', '.join(unchecked)}" if unchecked else ""
    if rerun.stats.values_differ(across):
        if across is False:
            return Verdict(False, f"NO: same mask and output weights, but {stats}{not_checked}")
        return Verdict(True, f"same mask and output weights; {stats}{not_checked}")
    if unchecked:
        matched = "mask, statistics and output files" if rerun.stats.match else "mask and output files"
        after = f" ({where})" if rerun.stats.match else f"; {stats}"
        return Verdict(
            True, f"yes for every file the lock records: the re-run's {matched} match it{after}{not_checked}"
        )
    if rerun.stats.match is False:  # the hash alone differs (its header), or cannot tell: the product is the same
        return Verdict(True, f"yes, bit for bit: the mask and every output file; {stats}")
    return Verdict(True, f"yes, bit for bit ({where})")


def max_relative_difference(a: Statistics, b: Statistics) -> float:
    """The largest ``|a - b| / max(|a|, |b|)`` over every sum of two runs' statistics (0 where both are 0); two
    statistics of other targets or sets are refused."""
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
    parts: list[str] = []  # one per matrix that differs
    total = 0
    for name in names:
        if name not in lock_mask or name not in rerun_mask:
            parts.append(f"{name}: only in the {'re-run' if name not in lock_mask else 'lock'}'s mask")
            continue
        a, b = lock_mask[name], rerun_mask[name]
        if a.shape != b.shape:
            parts.append(f"{name}: shape {list(a.shape)} in the lock's mask, {list(b.shape)} in the re-run's")
            continue
        only_a, only_b = int((a & ~b).sum()), int((b & ~a).sum())
        if only_a or only_b:
            total += only_a + only_b
            parts.append(f"{name}: {only_a} only in the lock's mask, {only_b} only in the re-run's")
    shown = "; ".join(parts[:limit]) + (f"; {len(parts) - limit} more" if len(parts) > limit else "")
    return f"{total} weights selected differently in {len(parts)} of {len(names)} matrices ({shown})"


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
            mask = _if_recorded(Mask.load, folder / MASK_NAME, lock.get("mask_sha256"))
        if stats is None and (folder / STATS_DIR).is_dir():
            stats = _if_recorded(Statistics.load, folder / STATS_DIR, lock.get("stats_sha256"))
    return mask, stats


def _if_recorded(load: Any, path: Path, sha256: Any) -> Any:
    """What ``load`` reads from ``path`` when it can and its sha256 is the lock's (``sha256``), else ``None``."""
    try:
        found = load(path)
    except InputError:
        return None
    return found if found.sha256 == sha256 else None
