"""Releasing a run: rewrite its cards, push one artifact to the Hub, verify what a folder holds.

What ``mathneuro-edit card``, ``push`` and ``verify`` run: each takes the run folder (``OUT``, holding
``checkpoint/`` or ``adapter/``, ``mask.safetensors`` and the lock) and names what it expected when it is given
the wrong folder (one of its subfolders, say). The CLI parses, calls one of these and prints what they return.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..engine.edit_map import Setting, show_setting
from ..engine.mask import Mask
from ..errors import InputError
from ..layout import LOCK_NAME, MASK_NAME
from ..organism import organism_path
from ..outputs.registry import OUTPUTS, output_dirs, output_of_folder
from ..publish.base_card import base_card_fields
from ..publish.card import card_for_folder, summarize_edit
from ..publish.integrity import check_local_files_against_lock
from ..publish.lock import check_base_weights, check_private, read_lock, write_lock
from ..publish.lock_policy import lock_base, validate_lock
from ..publish.run_files import seal_cards
from ..recipe.io import recipe_from_dict
from ..util.console import Stages, terminal_safe
from ..util.paths import LOCAL
from ..weights.audit import VerifyReport
from ..weights.base import base_reference, resolve_base
from ..weights.checkpoint import open_checkpoint
from ..weights.gguf_reader import dequantize_gguf, gguf_source
from .card_sets import apply_card_sets, check_card_sets
from .verdict import devices_note

__all__ = ["rewrite_cards", "verify_run", "RunVerification", "run_folder_hint"]


def run_folder_hint(folder: Path) -> str:
    """``; this is the checkpoint/ folder of a run: pass the run folder PARENT`` for a run's sub-folder, else ``""``."""
    if folder.name in output_dirs() and (folder.parent / MASK_NAME).is_file():
        return f"; this is the {folder.name}/ folder of a run: pass the run folder {folder.parent}"
    return ""


def rewrite_cards(run_dir: str | Path, base: str | None = None, sets: Sequence[str] = ()) -> list[Path]:
    """Rewrite the model cards (and locks) of a run folder's outputs from its lock, mask and eval.json; returns the
    README.md files written, one per output folder.

    ``base``: a local base folder the lock redacted (only a lock of an older version needs it); ``sets``: card
    settings applied to the lock and the cards (:mod:`.card_sets`); a key that would change the weights or that no
    card shows is an InputError, before anything is written.
    """
    folder = Path(run_dir)
    if not (folder / MASK_NAME).is_file() or not (folder / LOCK_NAME).is_file():
        hint = run_folder_hint(folder) or (
            "; pass the run folder written by `mathneuro-edit run` (it holds checkpoint/ or adapter/, the mask and "
            "the lock)"
        )
        raise InputError(f"{folder}: no mask.safetensors and {LOCK_NAME} here{hint}")
    lock = read_lock(folder)
    validate_lock(lock, str(folder / LOCK_NAME))  # every field against the recipe hash
    lock_base(lock, base)  # a lock never names a local base folder to read: --base does
    card_sets = check_card_sets(sets)  # refuses a key that decides the weights, before anything is written
    if card_sets:  # the lock says what the cards say (written below, with the cards)
        lock = apply_card_sets(lock, card_sets, where=f"{folder / LOCK_NAME}: card --set")
    overrides = (f"base.model={base}",) if base else ()
    # the card needs no data file (the lock records them), so redacted paths stay redacted unless given
    recipe = recipe_from_dict(dict(lock["recipe"]), overrides, where=f"{folder / LOCK_NAME}: recipe")
    if base:
        check_base_weights(lock, base)
    base_ref = None if recipe.base.model == LOCAL else base_reference(recipe.base)
    if not isinstance(lock.get("edit_summary"), dict):  # a lock of an older version: count from the base
        if base_ref is None:
            raise InputError(
                "the lock's base is a local folder (redacted for privacy) and the card needs its "
                "parameter count; pass --base PATH"
            )
        ckpt = open_checkpoint(resolve_base(base_ref, revision=recipe.base.revision))
        n_params = sum(math.prod(e.shape) for e in ckpt.tensors.values())
        lock = {**lock, "edit_summary": summarize_edit(Mask.load(folder / MASK_NAME).counts(), model_params=n_params)}
        write_lock(folder, lock)
    license_ = (base_card_fields(base_ref, recipe.base.revision) or None) if base_ref else None
    subs = [folder / s for s in output_dirs() if (folder / s).is_dir()]
    if not subs:
        raise InputError(
            f"{folder}: no checkpoint/ or adapter/ folder; pass the run folder written by `mathneuro-edit run`"
        )

    def render(sub: Path, _lock: Any) -> str:  # under the lock seal_cards wrote into sub
        text = card_for_folder(sub, license=license_).content
        check_private(text, recipe, "the model card")
        return text

    # the lock and the cards together: the lock's run_files records each card (publish/run_files.py)
    seal_cards(lock, [(f"{sub.name}/", sub) for sub in subs], folder, render)
    return [sub / "README.md" for sub in subs]


@dataclass
class RunVerification:
    """What :func:`verify_run` found: one audit per output folder, the per-file check against the lock (when the
    folder holds one), and the names of what failed (output folders, ``"files"``, ``"mask"``).

    ``made_on`` is the lock's ``device`` record (``None``: no lock, or one written before devices were recorded),
    ``checked_on`` the device the audits recomputed the edited tensors on; ``mask_sha256`` the audited mask's and
    ``lock_mask_sha256`` the lock's (``None``: no lock read).
    """

    audits: list[VerifyReport]
    files: Any = None
    failed: list[str] = field(default_factory=list)
    made_on: dict[str, str] | None = None
    checked_on: str = "cpu"
    mask_sha256: str | None = None
    lock_mask_sha256: str | None = None

    @property
    def ok(self) -> bool:
        return not self.failed

    def failure_line(self) -> str:
        """``verify: FAILED: ...`` naming what differs (empty when everything matched)."""
        if not self.failed:
            return ""
        parts = []
        if "mask" in self.failed:
            parts.append(
                f"the mask is not the lock's (sha256 {str(self.mask_sha256)[:12]}..., the lock records "
                f"{str(self.lock_mask_sha256)[:12]}...)"
            )
        if what := [f for f in self.failed if f not in ("files", "mask")]:
            parts.append(f"{', '.join(what)} differ(s) from the base + mask + scale")
        if "files" in self.failed:
            differ = (self.files.differences() if self.files else {}).items()
            parts.append(
                f"files differ from the lock's sha256: {', '.join(f'{terminal_safe(p)} ({s})' for p, s in differ)}"
            )
        return f"verify: FAILED: {'; '.join(parts)} (details above)"

    def verdict_line(self) -> str:
        """The last line: ``verify: OK: ...`` saying what held and on which devices, or :meth:`failure_line`.

        Why it names the devices: a lock made on a GPU is verified on a CPU as often as not; the weights and the
        mask are the same bits on both (the edit is elementwise), the statistics are not recomputed here.
        """
        if self.failed:
            return self.failure_line()
        if self.lock_mask_sha256 is None:
            return "verify: OK: the output weights are the base with this mask and scale applied, bit for bit"
        unchecked = ", ".join(map(terminal_safe, self.files.unchecked() if self.files else []))
        return (
            "verify: OK: the mask and the output weights are the lock's, bit for bit "
            f"({devices_note(self.made_on, {'type': self.checked_on})}; the statistics are not recomputed: "
            "`reproduce` does that)"
            + (f"; not checked (the lock records no sha256 of them): {unchecked}" if unchecked else "")
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "failed": self.failed,
            "verdict": self.verdict_line(),
            "devices": {"made_on": self.made_on, "checked_on": self.checked_on},
            "mask": {"sha256": self.mask_sha256, "lock_sha256": self.lock_mask_sha256},
            "files_checked": self.files.to_dict() if self.files else None,
            "audits": [
                {"folder": str(a.out_dir), **{k: getattr(a, k) for k in _AUDIT_KEYS}}
                | {"also_audited": a.audited, "gguf_survival": a.gguf_survival}
                for a in self.audits
            ],
        }


_AUDIT_KEYS = ("kind", "ok", "checked", "edited", "mismatches", "missing", "extra")  # verify --json, in this order


def _audit_inputs(
    folder: Path, alone: bool, base: str | None, mask_path: str | None, scale: Setting | None, expected: str
) -> tuple[str | None, str | None, float | None, dict[str, Any] | None]:
    """What ``verify`` audits against: ``(base, mask, scale, lock)``, each as given, else from the lock (``None``
    when all three are given). ``alone``: ``folder`` is itself the output folder (no run sub-folders)."""
    if base is not None and scale is not None and mask_path is not None:
        return base, mask_path, scale, None
    # a run's checkpoint/ or adapter/ reads the run folder's lock and mask; any other folder (a run folder, an
    # `export` folder) its own lock, even when the folder above it happens to hold a mask file
    inside_run = alone and (folder.parent / LOCK_NAME).is_file() and (folder.parent / MASK_NAME).is_file()
    run_dir = folder.parent if inside_run else folder
    if not (run_dir / LOCK_NAME).is_file():
        raise InputError(
            f"{folder}: no {LOCK_NAME} to read the base, mask and scale from; {expected}, "
            "or give --base, --mask and --scale"
        )
    lock = read_lock(run_dir)
    validate_lock(lock, f"{run_dir / LOCK_NAME}")  # every field against the recipe hash, before anything runs
    recorded = lock["recipe"]  # only base and edit are needed: data paths may stay redacted
    if base is None:
        base = lock_base(lock, base)  # a lock never names a local folder to read
        if base == LOCAL:
            raise InputError("the lock's base is a local folder (redacted for privacy); pass --base PATH")
        if recorded["base"].get("gguf_file"):  # a Hub repo's GGUF file: its dequantized folder
            gguf = gguf_source(base, recorded["base"]["gguf_file"], recorded["base"].get("revision"))[0]
            base = str(dequantize_gguf(gguf))
        if base == "organism":
            base = str(organism_path())
    if scale is None:
        written = recorded["edit"]["scale"]  # a number, or a map per layer band and component (validated above)
        scale = 0.0 if recorded["edit"].get("prune") else dict(written) if isinstance(written, dict) else float(written)
    if mask_path is None:
        mask_path = str(run_dir / MASK_NAME)
        if not Path(mask_path).is_file():
            raise InputError(
                f"{run_dir}: no mask.safetensors (a folder written by `export` does not hold "
                "its mask); pass --mask MASK, the file `export` was given"
            )
    return base, mask_path, scale, lock


def verify_run(
    out: str | Path,
    base: str | None = None,
    mask_path: str | None = None,
    scale: Setting | None = None,
    *,
    trust_remote_code: bool = False,
    progress: bool = True,
    echo: Callable[[str], None] = lambda s: None,
    say: Callable[[str], None] = lambda s: None,
) -> RunVerification:
    """Audit every output of a run folder tensor by tensor against the base, mask and scale (from the lock unless
    given; ``trust_remote_code`` never is), and every file against the lock's sha256. ``echo`` receives one stage
    line per audited folder, ``say`` each audit's and the file check's report as it is made.
    """
    folder = Path(out)
    targets = [folder / s for s in output_dirs() if (folder / s).is_dir()] or [folder]
    audited = [t for t in targets if output_of_folder(t).audit is not None]
    expected = (
        f"expected a run folder (with checkpoint/ or adapter/, mask.safetensors and {LOCK_NAME}) or a "
        "model folder written by `export`; pass the run folder"
    )
    if targets == [folder] and not (
        (folder / "config.json").is_file() or any(o.detect(folder) for o in OUTPUTS.values())
    ):
        raise InputError(f"{folder}: not a mathneuro-edit output (no model or adapter files); {expected}")
    base, mask_path, scale, lock = _audit_inputs(folder, targets == [folder], base, mask_path, scale, expected)
    failed, audits, stages = [], [], Stages(len(audited), echo)
    mask = Mask.load(mask_path)  # read once: its sha256 is compared with the lock's below
    for t in audited:
        stages.start(f"audit {t.name}/ against the base, mask and scale x{show_setting(scale)}")
        audit = output_of_folder(t).audit
        report = audit(t, base, mask, scale, trust_remote_code=trust_remote_code, progress=progress)  # never the lock's
        say(report.summary())
        audits.append(report)
        if not report.ok:
            failed.append(t.name)
    files = None
    if (folder / LOCK_NAME).is_file():  # the per-file check reproduce makes too: every file against the lock's sha256
        lock = read_lock(folder)
        files = check_local_files_against_lock(folder, lock)
        say(files.to_text())
        if not files.ok:
            failed.append("files")
    lock_mask = lock.get("mask_sha256") if lock is not None else None
    if lock_mask is not None and lock_mask != mask.sha256:  # the weights may match a mask the lock never made
        failed.insert(0, "mask")
    made_on = lock.get("device") if lock is not None else None
    return RunVerification(
        audits, files, failed, made_on, audits[0].device if audits else "cpu", mask.sha256, lock_mask
    )
