"""Reproduce a published edit from its lock (an output folder, a lock file, a model card or a Hub repo): first check
the files you have, then re-run the lock and compare hashes.

1. The files you have (:mod:`mathneuro_edit.publish.integrity`, shared with ``verify``), before the re-run: for a
   local folder the sha256 of every file the lock records (the outputs, and its ``run_files``: the mask, the
   statistics, the evaluation, the cards) against the files present; for a Hub repo the LFS sha256 the Hub
   reports. Missing, extra and changed files are named, the first found first.
2. The re-run: the mask, every output weight file and the statistics against the lock; what each must match across
   devices, and the verdict's words, are :mod:`.verdict`'s. The report names the library versions that changed.

Without ``out_dir`` the re-run goes to a temporary folder that is deleted afterwards (``keep=True`` keeps it).
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..engine.mask import Mask
from ..errors import InputError
from ..layout import LOCK_NAME, MASK_NAME, STATS_DIR
from ..publish.integrity import FileCheck, check_hub_files_against_lock, check_local_files_against_lock
from ..publish.lock import check_base_weights, check_local_files, library_versions, read_lock, recipe_from_lock
from ..publish.lock_policy import validate_lock
from ..util.console import Stages, terminal_safe
from ..util.hashing import sha256_file
from ..util.paths import is_local_path
from ..util.scrub import scrub_token
from .pipeline import run_recipe
from .steps.mask import Statistics
from .verdict import (
    Rerun,
    StatsComparison,
    Verdict,
    another_device,
    compare_statistics,
    devices_note,
    mask_difference,
    reproduce_verdict,
    run_files_near,
)

__all__ = ["ReproduceReport", "read_any_lock", "reproduce", "check_source_files", "is_hub_source"]

_LOCK_BLOCK = re.compile(r"```yaml\n(lock_version:.*?)\n```", re.DOTALL)


def read_any_lock(source: str | Path) -> dict[str, Any]:
    """Read a lock from an output folder, a ``*.lock.yaml`` file, a model card (``README.md``), or a Hub model
    repo published by ``mathneuro-edit push`` (``user/name``: its lock file is downloaded); InputError if none."""
    p = Path(source)
    if is_hub_source(source):
        return read_lock(_download_lock(str(source)))
    if p.is_dir():
        if (p / LOCK_NAME).is_file():
            return read_lock(p)
        if (p / "README.md").is_file():
            p = p / "README.md"
    if p.suffix.lower() == ".md" and p.is_file():
        text = p.read_text(encoding="utf-8")
        m = _LOCK_BLOCK.search(text)
        if not m:  # today's cards name the lock file beside them, with its sha256
            return _lock_beside_card(p, text)
        tmp = Path(tempfile.mkdtemp()) / LOCK_NAME
        tmp.write_text(m.group(1))
        return read_lock(tmp)
    return read_lock(p)


_LOCK_NAMED = re.compile(r"`mathneuro_recipe\.lock\.yaml` in this (?:repo|folder) \(sha256 `([0-9a-f]{64})`\)")


def _lock_beside_card(card: Path, text: str) -> dict[str, Any]:
    """The lock file a card names, beside it, checked against the sha256 the card states."""
    named = _LOCK_NAMED.search(text)
    lock = card.parent / LOCK_NAME
    if named is None:
        raise InputError(f"{card}: this model card names no mathneuro-edit lock; pass the output folder")
    if not lock.is_file():
        raise InputError(f"{card}: the card names {LOCK_NAME}, which is not beside it; pass the output folder")
    if sha256_file(lock) != named.group(1):
        raise InputError(
            f"{lock}: its sha256 is not the one the card states ({named.group(1)[:12]}...); the lock "
            "or the card was changed after the run"
        )
    return read_lock(lock)


def _download_lock(repo_id: str) -> Path:
    """The lock file of a Hub model repo (through huggingface_hub's cache)."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import (
        EntryNotFoundError,
        HfHubHTTPError,
        HFValidationError,
        LocalEntryNotFoundError,
        OfflineModeIsEnabled,
    )

    from ..publish.hub_requests import hub_fault

    def the_hubs_fault(e: BaseException) -> None:  # a 5xx, no network, an unreadable answer: exit 3, one line
        fault = hub_fault(repo_id, e, f"downloading its {LOCK_NAME}")
        if fault is not None:
            raise fault from None

    try:
        return Path(hf_hub_download(repo_id, LOCK_NAME, repo_type="model"))
    except LocalEntryNotFoundError as e:  # huggingface_hub's word for a 5xx too, not only for offline
        the_hubs_fault(e)
        raise InputError(
            f"{repo_id}: not a local path, and the Hub cannot be reached (offline?) nor is its lock in "
            "the cache; connect, or pass the output folder"
        ) from None
    except EntryNotFoundError:
        raise InputError(f"{repo_id}: the Hub repo has no {LOCK_NAME}; it was not pushed by mathneuro-edit") from None
    except (HfHubHTTPError, HFValidationError, OfflineModeIsEnabled, OSError) as e:
        the_hubs_fault(e)
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise InputError(
            f"{repo_id}: not a local path, and its lock cannot be downloaded from the Hub "
            f"({scrub_token(first)}); pass the output folder"
        ) from None
    except (KeyError, ValueError) as e:  # an answer huggingface_hub cannot read (a redirect without Location)
        the_hubs_fault(e)
        raise


def is_hub_source(source: str | Path) -> bool:
    """Whether ``source`` names a Hub repo (``user/name`` that is not a local path)."""
    return not Path(source).exists() and not is_local_path(str(source)) and str(source).count("/") == 1


def check_source_files(source: str | Path, lock: dict[str, Any]) -> FileCheck | None:
    """The per-file check of what ``source`` names: a Hub repo, a folder, or the folder of a card/lock file that
    sits beside its outputs; ``None`` for a lock file alone (no files to check)."""
    if is_hub_source(source):
        return check_hub_files_against_lock(str(source), lock)
    p = Path(source)
    if p.is_file():
        p = p.parent
        if not (p / LOCK_NAME).is_file():
            return None
    return check_local_files_against_lock(p, lock)


@dataclass
class ReproduceReport:
    """The files you have against the lock, then a re-run against the lock, file by file."""

    out_dir: Path
    mask_match: bool
    # path -> "match" | "differs" | "missing" | "extra" (written now, not recorded: e.g. the adapter of a run whose
    # lock came from a standalone `export` of the checkpoint; listed, but not a failure)
    files: dict[str, str] = field(default_factory=dict)
    version_changes: dict[str, tuple[str, str]] = field(default_factory=dict)
    present: FileCheck | None = None  # the files you have (None: a lock file alone was given)
    kept: bool = True  # False: the re-run's temporary folder was deleted
    stats: StatsComparison = StatsComparison(None)
    made_on: dict[str, str] | None = None  # the lock's device record
    checked_on: dict[str, str] | None = None  # the re-run's
    mask_change: str | None = None  # the mask difference in words (when the run's own mask file was at hand)

    @property
    def rerun_ok(self) -> bool:
        return Rerun(self.mask_match, self.files).ok

    @property
    def ok(self) -> bool:
        return self.decide().ok

    def to_text(self) -> str:
        lines = [
            self.present.to_text()
            if self.present is not None
            else "files: none checked (a lock file alone was given; pass the folder or repo to check its files)"
        ]
        lines.append(f"re-run against the lock: mask {'match' if self.mask_match else 'DIFFERS'}")
        lines += [f"  {state:8s} {terminal_safe(path)}" for path, state in sorted(self.files.items())]
        lines.append(self.stats.clause(devices_note(self.made_on, self.checked_on), self.across_devices))
        lines += [f"note: {lib} was {was}, now {now}" for lib, (was, now) in self.version_changes.items()]
        where = str(self.out_dir) if self.kept else "re-run deleted; --keep or --out keeps it"
        lines.append(f"reproduced: {self.verdict()} ({where})")
        return "\n".join(lines)

    def decide(self) -> Verdict:
        """:func:`~.verdict.reproduce_verdict` of this report: the files you have, the re-run, the two devices."""
        rerun = Rerun(self.mask_match, self.files, self.stats, self.mask_change)
        recorded, found = (self.present.recorded, self.present.found) if self.present is not None else (None, None)
        return reproduce_verdict(recorded, found, rerun, self.made_on, self.checked_on)

    def verdict(self) -> str:
        """What held, in words (:meth:`decide`'s)."""
        return self.decide().text

    @property
    def across_devices(self) -> bool | None:
        """Whether the run was made on another device than the re-run's (``None``: either is not recorded)."""
        return another_device(self.made_on, self.checked_on)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "reproduced": self.ok,
            "files_checked": self.present.to_dict() if self.present is not None else None,
            "rerun": {
                "ok": self.rerun_ok,
                "mask_match": self.mask_match,
                "files": dict(sorted(self.files.items())),
                "out_dir": str(self.out_dir) if self.kept else None,
            },
            "version_changes": {k: {"was": a, "now": b} for k, (a, b) in self.version_changes.items()},
            "statistics": {**self.stats.to_dict(), "values_differ": self.stats.values_differ(self.across_devices)},
            "mask_difference": self.mask_change,
            "devices": {"made_on": self.made_on, "checked_on": self.checked_on},
            "verdict": self.verdict(),
        }


def reproduce(
    source: str | Path,
    *,
    out_dir: str | Path | None = None,
    base: str | None = None,
    overrides: tuple[str, ...] = (),
    progress: bool = True,
    keep: bool = False,
    trust_remote_code: bool = False,
    echo: Callable[[str], None] = lambda s: None,
) -> ReproduceReport:
    """Check the files of ``source`` (an output folder, a lock file, a model card, or a Hub repo id) against its
    lock, then re-run the lock's recipe and compare the mask and output hashes with the recorded ones; the
    report's ``ok`` only when the files you have AND the re-run match the lock.

    ``base``: a local base folder for a lock whose local base path was redacted (its weights are checked);
    ``overrides``: ``key=value`` for other redacted paths (``data.math.path=...``); ``trust_remote_code``: the
    user's own opt-in, which a lock never turns on (:func:`~mathneuro_edit.publish.lock_policy.refused_lock_settings`).
    ``echo`` receives the stage lines (``[1/3] check the files of SOURCE against the lock``, then the re-run's own
    stages indented under ``[2/3]``): a re-run takes minutes, never in silence.
    """
    lock = read_any_lock(source)
    validate_lock(lock, f"{source}: lock")  # every field against the recipe hash, before anything runs
    extra = tuple(overrides) + ((f"base.model={base}",) if base else ())
    pinned = (lock.get("base") or {}).get("revision")
    recorded_base = (lock.get("recipe") or {}).get("base") or {}
    if (
        not base
        and isinstance(pinned, str)
        and re.fullmatch(r"[0-9a-f]{40}", pinned)
        and recorded_base.get("revision") is None
        and not recorded_base.get("gguf_file")
        and not any(o.startswith(("base.revision=", "base.model=")) for o in overrides)
    ):
        extra += (f"base.revision={pinned}",)  # the Hub base's commit the run used, not today's main
    recipe = recipe_from_lock(lock, extra, trust_remote_code=trust_remote_code)
    if base:
        check_base_weights(lock, base)
    check_local_files(lock, recipe)  # a wrong data file is named before the run, not reported as "differs" after
    stages = Stages(3, echo)
    stages.start(f"check the files of {source} against the lock")
    present = check_source_files(source, lock)
    stages.note(present.to_text().splitlines()[0] if present is not None else "none: a lock file alone was given")
    temp = None if out_dir else Path(tempfile.mkdtemp(prefix="mathneuro-reproduce-"))
    out = Path(out_dir) if out_dir else temp / "out"  # type: ignore[operator]
    try:
        stages.start(f"re-run the lock's recipe into {out if out_dir else 'a temporary folder'}")
        result = run_recipe(  # the run's own stage lines, indented under this one; the card keeps the evidence
            recipe, out, progress=progress, echo=stages.note, sweep_evidence=lock.get("sweep")
        )
    except BaseException:
        if temp is not None:
            shutil.rmtree(temp, ignore_errors=True)
        raise
    recorded: dict[str, str] = lock.get("outputs", {})
    stages.start(f"compare the mask and {len(recorded)} output file(s) with the lock")
    states = {
        p: ("match" if result.files.get(p) == sha else "missing" if p not in result.files else "differs")
        for p, sha in recorded.items()
    }
    states.update({p: "extra" for p in result.files if p not in recorded})
    now = library_versions()
    changes = {k: (v, now.get(k, "?")) for k, v in (lock.get("versions") or {}).items() if now.get(k) != v}
    mask_match = result.mask_sha256 == lock.get("mask_sha256")
    stats, checked_on, mask_change = _compare_with_the_run(source, lock, out, mask_match)
    kept = temp is None or keep
    if not kept:
        shutil.rmtree(temp, ignore_errors=True)  # type: ignore[arg-type]
    return ReproduceReport(
        out, mask_match, states, changes, present, kept, stats, lock.get("device"), checked_on, mask_change
    )


def _compare_with_the_run(
    source: str | Path, lock: dict[str, Any], out: Path, mask_match: bool
) -> tuple[StatsComparison, dict[str, str] | None, str | None]:
    """The re-run's statistics against the lock's (and their values against the run's own files, when the source
    folder holds them), the re-run's device, and the mask difference in words when the masks differ."""
    again = read_lock(out)
    original_mask, original_stats = run_files_near(source, lock)
    rerun_stats = Statistics.load(out / STATS_DIR)
    stats = compare_statistics(lock.get("stats_sha256"), rerun_stats, original_stats, lock.get("versions"))
    change = None
    if not mask_match and original_mask is not None:
        change = mask_difference(original_mask, Mask.load(out / MASK_NAME))
    return stats, again.get("device"), change
