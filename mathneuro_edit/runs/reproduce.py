"""Reproduce a published edit from its lock (an output folder, a lock file, or a model card) and compare hashes.

Same machine and library versions: the mask and every output weight file must match bit for bit. Across
machines or versions, floating-point differences can change near-threshold selections; the report says which
files differ and which versions changed.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..layout import LOCK_NAME
from ..publish.lock import (
    check_base_weights,
    check_local_files,
    library_versions,
    read_lock,
    recipe_from_lock,
    validate_lock,
)
from ..util.paths import is_local_path
from .pipeline import run_recipe

__all__ = ["ReproduceReport", "read_any_lock", "reproduce"]

_LOCK_BLOCK = re.compile(r"```yaml\n(lock_version:.*?)\n```", re.DOTALL)


def read_any_lock(source: str | Path) -> dict[str, Any]:
    """Read a lock from an output folder, a ``*.lock.yaml`` file, a model card (``README.md``), or a Hub model
    repo published by ``mathneuro-edit push`` (``user/name``: its lock file is downloaded).

    Raises:
        InputError: nothing lock-like there.
    """
    p = Path(source)
    if not p.exists() and not is_local_path(str(source)) and str(source).count("/") == 1:
        return read_lock(_download_lock(str(source)))
    if p.is_dir():
        if (p / LOCK_NAME).is_file():
            return read_lock(p)
        if (p / "README.md").is_file():
            p = p / "README.md"
    if p.suffix.lower() == ".md" and p.is_file():
        m = _LOCK_BLOCK.search(p.read_text(encoding="utf-8"))
        if not m:
            raise InputError(f"{p}: this model card holds no mathneuro-edit lock block; pass the output folder")
        tmp = Path(tempfile.mkdtemp()) / LOCK_NAME
        tmp.write_text(m.group(1))
        return read_lock(tmp)
    return read_lock(p)


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

    try:
        return Path(hf_hub_download(repo_id, LOCK_NAME, repo_type="model"))
    except LocalEntryNotFoundError:
        raise InputError(f"{repo_id}: not a local path, and the Hub cannot be reached (offline?) nor is its lock in "
                         "the cache; connect, or pass the output folder") from None
    except EntryNotFoundError:
        raise InputError(f"{repo_id}: the Hub repo has no {LOCK_NAME}; it was not pushed by mathneuro-edit") from None
    except (HfHubHTTPError, HFValidationError, OfflineModeIsEnabled, OSError) as e:
        raise InputError(f"{repo_id}: not a local path, and its lock cannot be downloaded from the Hub "
                         f"({str(e).splitlines()[0] if str(e) else type(e).__name__}); pass the output folder") from None


@dataclass
class ReproduceReport:
    """File-by-file comparison of a re-run against a lock."""

    out_dir: Path
    mask_match: bool
    # path -> "match" | "differs" | "missing" | "extra" (written now, not recorded: e.g. the adapter of a run whose
    # lock came from a standalone `export` of the checkpoint; listed, but not a failure)
    files: dict[str, str] = field(default_factory=dict)
    version_changes: dict[str, tuple[str, str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.mask_match and all(v in ("match", "extra") for v in self.files.values())

    def to_text(self) -> str:
        lines = [f"mask: {'match' if self.mask_match else 'DIFFERS'}"]
        lines += [f"{state:8s} {path}" for path, state in sorted(self.files.items())]
        for lib, (was, now) in self.version_changes.items():
            lines.append(f"note: {lib} was {was}, now {now}")
        lines.append(f"reproduced: {'yes, bit for bit' if self.ok else 'NO'} ({self.out_dir})")
        return "\n".join(lines)


def reproduce(
    source: str | Path,
    *,
    out_dir: str | Path | None = None,
    base: str | None = None,
    overrides: tuple[str, ...] = (),
    progress: bool = True,
    trust_remote_code: bool = False,
) -> ReproduceReport:
    """Re-run the recipe of a lock and compare the mask and output hashes with the recorded ones.

    Args:
        source: an output folder, a lock file, or a model card.
        out_dir: where to write the re-run (default: a temporary folder, kept for inspection).
        base: a local base folder, for locks whose local base path was redacted (its weights are checked).
        overrides: ``key=value`` for other redacted paths (``data.math.path=...``).
        progress: progress bars.
        trust_remote_code: the user's own opt-in (``--trust-remote-code``) to run the base repository's code; a
            lock never turns it on (:func:`~mathneuro_edit.publish.lock.check_lock_settings`).

    Returns:
        A :class:`ReproduceReport`.
    """
    lock = read_any_lock(source)
    validate_lock(lock, f"{source}: lock")  # every field against the recipe hash, before anything runs
    extra = tuple(overrides) + ((f"base.model={base}",) if base else ())
    recipe = recipe_from_lock(lock, extra, trust_remote_code=trust_remote_code)
    if base:
        check_base_weights(lock, base)
    check_local_files(lock, recipe)  # a wrong data file is named before the run, not reported as "differs" after
    out = Path(out_dir) if out_dir else Path(tempfile.mkdtemp(prefix="mathneuro-reproduce-")) / "out"
    result = run_recipe(recipe, out, progress=progress)
    recorded: dict[str, str] = lock.get("outputs", {})
    states = {p: ("match" if result.files.get(p) == sha else "missing" if p not in result.files else "differs")
              for p, sha in recorded.items()}
    states.update({p: "extra" for p in result.files if p not in recorded})
    now = library_versions()
    changes = {k: (v, now.get(k, "?")) for k, v in (lock.get("versions") or {}).items() if now.get(k) != v}
    return ReproduceReport(out, result.mask_sha256 == lock.get("mask_sha256"), states, changes)

