"""The publishing commands of the CLI: ``card``, ``push``, ``verify``, ``reproduce`` (kept apart from
:mod:`mathneuro_edit.cli.main` so each module stays small; :func:`register` adds them to the ``mathneuro-edit`` group).

Each names what it expected when it is given the wrong folder: the run folder (``OUT``, holding
``checkpoint/`` or ``adapter/``, ``mask.safetensors`` and the lock), not one of its subfolders.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from ..errors import InputError
from ..layout import ADAPTER_DIR, CHECKPOINT_DIR, MASK_NAME, OUTPUT_DIRS

__all__ = ["register"]

_SUBS = OUTPUT_DIRS


def _run_folder_hint(folder: Path) -> str:
    """`` (pass the run folder PARENT)`` when ``folder`` is the checkpoint/ or adapter/ of a run, else ``""``."""
    if folder.name in _SUBS and (folder.parent / MASK_NAME).is_file():
        return f"; this is the {folder.name}/ folder of a run: pass the run folder {folder.parent}"
    return ""


def card(run_dir: str, base: str | None, sets: tuple[str, ...]) -> None:
    """Rewrite the model cards of a run folder from its lock, mask and eval.json."""
    import math

    from ..engine.mask import Mask
    from ..layout import LOCK_NAME
    from ..publish.card import (
        card_for_folder,
        license_from_base,
        summarize_edit,
        write_card,
    )
    from ..publish.lock import check_base_weights, check_private, lock_base, read_lock, validate_lock, write_lock
    from ..recipe.io import recipe_from_dict
    from ..util.paths import LOCAL
    from ..weights.base import base_reference, resolve_base
    from ..weights.checkpoint import open_checkpoint

    folder = Path(run_dir)
    if not (folder / MASK_NAME).is_file() or not (folder / LOCK_NAME).is_file():
        raise InputError(f"{folder}: no mask.safetensors and {LOCK_NAME} here{_run_folder_hint(folder)}"
                         if _run_folder_hint(folder) else
                         f"{folder}: no mask.safetensors and {LOCK_NAME} here; pass the run folder written by "
                         "`mathneuro-edit run` (it holds checkpoint/ or adapter/, the mask and the lock)")
    lock = read_lock(folder)
    validate_lock(lock, str(folder / LOCK_NAME))  # every field against the recipe hash
    lock_base(lock, base)  # a lock never names a local base folder to read: --base does
    overrides = tuple(sets) + ((f"base.model={base}",) if base else ())
    # the card needs no data file (the lock records them), so redacted paths stay redacted unless given
    recipe = recipe_from_dict(dict(lock["recipe"]), overrides, where=f"{folder / LOCK_NAME}: recipe")
    if base:
        check_base_weights(lock, base)
    base_ref = None if recipe.base.model == LOCAL else base_reference(recipe)
    if not isinstance(lock.get("edit_summary"), dict):  # a lock of an older version: count from the base
        if base_ref is None:
            raise InputError("the lock's base is a local folder (redacted for privacy) and the card needs its "
                             "parameter count; pass --base PATH")
        ckpt = open_checkpoint(resolve_base(base_ref, revision=recipe.base.revision))
        n_params = sum(math.prod(e.shape) for e in ckpt.tensors.values())
        lock = {**lock, "edit_summary": summarize_edit(Mask.load(folder / MASK_NAME).counts(),
                                                       model_params=n_params)}
        write_lock(folder, lock)
    license_ = license_from_base(base_ref, recipe.base.revision) if base_ref else None
    subs = [folder / s for s in _SUBS if (folder / s).is_dir()]
    if not subs:
        raise InputError(f"{folder}: no checkpoint/ or adapter/ folder; pass the run folder written by "
                         "`mathneuro-edit run`")
    for sub in subs:
        write_lock(sub, lock)
        text = card_for_folder(sub, license=license_)
        check_private(text.content, recipe, "the model card")
        write_card(sub, text)
        click.echo(sub / "README.md")


def push(out: str, repo_id: str | None, private: bool | None, revision: str | None, adapter: bool,
         dry_run: bool) -> None:
    """Push an output folder to the Hugging Face Hub (token from HF_TOKEN or `hf auth login`).

    The uploaded card is rendered for the target repo (it loads `from_pretrained("you/name")`); the local
    folder is not changed.
    """
    from ..layout import LOCK_NAME
    from ..publish.hub import push_to_hub
    from ..publish.lock import read_lock

    folder = Path(out)
    sub = folder / (ADAPTER_DIR if adapter else CHECKPOINT_DIR)
    if sub.is_dir():
        folder = sub
    elif adapter:
        raise InputError(f"{out}: no adapter/ folder; run with outputs.adapter: true or push the folder itself")
    if not (folder / LOCK_NAME).is_file():
        raise InputError(f"{out}: no {LOCK_NAME} here; pass the run folder written by `mathneuro-edit run` "
                         "(or a folder written by `export`)")
    hub = read_lock(folder)["recipe"].get("hub") or {}  # the recipe's hub section fills what the flags leave out
    repo_id = repo_id or hub.get("repo_id")
    if not repo_id:
        raise InputError("no target repo: pass --repo-id you/name or set hub.repo_id in the recipe")
    private = bool(hub.get("private", False)) if private is None else private
    revision = revision or hub.get("revision")
    click.echo(push_to_hub(folder, repo_id, private=private, revision=revision, dry_run=dry_run).describe())


def verify(out: str, base: str | None, mask_path: str | None, scale: float | None, quiet: bool = False,
           echo: Callable[[str], None] = lambda s: None, trust_remote_code: bool = False) -> None:
    """Audit an export tensor by tensor against the base, mask and scale (exit 1 on any mismatch).

    ``echo`` receives one stage line per audited folder; a bar over its tensors follows on a terminal.
    """
    from ..layout import LOCK_NAME
    from ..publish.lock import lock_base, read_lock, validate_lock
    from ..util.console import Stages, bars_wanted
    from ..util.paths import LOCAL
    from ..weights.adapter import MATHNEURO_CONFIG
    from ..weights.audit import verify as verify_export

    folder = Path(out)
    targets = [folder / s for s in _SUBS if (folder / s).is_dir()] or [folder]
    expected = (f"expected a run folder (with checkpoint/ or adapter/, mask.safetensors and {LOCK_NAME}) or a "
                "model folder written by `export`; pass the run folder")
    if targets == [folder] and not any((folder / n).is_file()
                                       for n in ("config.json", "adapter_config.json", MATHNEURO_CONFIG)):
        raise InputError(f"{folder}: not a mathneuro-edit output (no model or adapter files); {expected}")
    recorded: dict = {}
    if base is None or scale is None or mask_path is None:
        run_dir = folder if (folder / LOCK_NAME).is_file() and targets == [folder] and not \
            (folder.parent / MASK_NAME).is_file() else (folder if targets[0] != folder else folder.parent)
        if not (run_dir / LOCK_NAME).is_file():
            raise InputError(f"{folder}: no {LOCK_NAME} to read the base, mask and scale from; {expected}, "
                             "or give --base, --mask and --scale")
        lock = read_lock(run_dir)
        validate_lock(lock, f"{run_dir / LOCK_NAME}")  # every field against the recipe hash, before anything runs
        recorded = lock["recipe"]  # only base and edit are needed: data paths may stay redacted
        if base is None:
            base = lock_base(lock, base)  # a lock never names a local folder to read
            if base == LOCAL:
                raise InputError("the lock's base is a local folder (redacted for privacy); pass --base PATH")
            if recorded["base"].get("gguf_file"):  # a Hub repo's GGUF file: its dequantized folder
                from ..weights.gguf_reader import dequantize_gguf, gguf_source

                gguf = gguf_source(base, recorded["base"]["gguf_file"], recorded["base"].get("revision"))[0]
                base = str(dequantize_gguf(gguf))
            if base == "organism":
                from ..organism import organism_path

                base = str(organism_path())
        if scale is None:
            scale = 0.0 if recorded["edit"].get("prune") else float(recorded["edit"]["scale"])
        if mask_path is None:
            mask_path = str(run_dir / MASK_NAME)
            if not Path(mask_path).is_file():
                raise InputError(f"{run_dir}: no mask.safetensors (a folder written by `export` does not hold "
                                 "its mask); pass --mask MASK, the file `export` was given")
    trust = trust_remote_code  # the command line's, never the lock's
    failed = []
    stages = Stages(len(targets), echo)
    for t in targets:
        stages.start(f"audit {t.name}/ against the base, mask and scale x{scale:g}")
        report = verify_export(t, base, mask_path, scale, trust_remote_code=trust, progress=bars_wanted(quiet))
        click.echo(report.summary())
        if not report.ok:
            failed.append(t.name)
    if failed:
        click.echo(f"verify: FAILED: {', '.join(failed)} differ(s) from the base + mask + scale (details above)")
        sys.exit(1)


def reproduce(source: str, out: str | None, base: str | None, sets: tuple[str, ...], quiet: bool,
              echo: Callable[..., Any] = lambda quiet, verbose=False: None, verbose: bool = False,
              trust_remote_code: bool = False) -> None:
    """Re-run a lock (output folder, lock file, model card or Hub repo) and compare every hash (exit 1 if any
    differs)."""
    echo(quiet, verbose)  # the libraries' bars and known warnings: silent unless --verbose
    from ..runs.reproduce import reproduce as reproduce_lock
    from ..util.console import bars_wanted

    report = reproduce_lock(source, out_dir=out, base=base, overrides=sets, progress=bars_wanted(quiet),
                            trust_remote_code=trust_remote_code)
    click.echo(report.to_text())
    if not report.ok:
        sys.exit(1)


def register(group: click.Group, *, set_opt: Callable, quiet_opt: Callable, echo: Callable[..., Any]) -> None:
    """Add ``card``, ``push``, ``verify`` and ``reproduce`` to the CLI group (options shared with the others)."""
    base_opt = click.option("--base", help="local base folder, when the lock's local base path was redacted")
    trust_opt = click.option("--trust-remote-code", is_flag=True, help="run the base repository's own Python code "
                             "(never taken from a lock; only for repositories you trust)")
    existing_dir = click.Path(exists=True, file_okay=False)

    @group.command("card")
    @click.argument("run_dir", type=existing_dir)
    @base_opt
    @set_opt
    def card_cmd(run_dir: str, base: str | None, sets: tuple[str, ...]) -> None:
        """Rewrite the model cards of a run folder from its lock, mask and eval.json.

        --base / --set give back paths the lock redacted (only needed for a lock of an older version).
        """
        card(run_dir, base, sets)

    @group.command("push")
    @click.argument("out", type=existing_dir)
    @click.option("--repo-id", help="target Hub repo, e.g. you/model-math-boost (default: the recipe's hub.repo_id)")
    @click.option("--private", is_flag=True, default=None, help="create the repo private (default: the recipe's "
                                                                "hub.private)")
    @click.option("--revision", help="branch to push to, created if missing (default: the recipe's hub.revision "
                                     "or main)")
    @click.option("--adapter", is_flag=True, help="push the run's adapter/ rather than its checkpoint/")
    @click.option("--dry-run", is_flag=True, help="show what would be uploaded; touch nothing")
    def push_cmd(out: str, repo_id: str | None, private: bool | None, revision: str | None, adapter: bool,
                 dry_run: bool) -> None:
        """Push an output folder to the Hugging Face Hub (token from HF_TOKEN or `hf auth login`).

        The uploaded card is rendered for the target repo; the local folder is not changed.
        """
        push(out, repo_id, private, revision, adapter, dry_run)

    @group.command("verify")
    @click.argument("out", type=existing_dir)
    @click.option("--base", help="base model folder or Hub id (default: from the run folder's lock)")
    @click.option("--mask", "mask_path", type=click.Path(exists=True, dir_okay=False))
    @click.option("--scale", type=float, help="the applied scale (default: from the lock)")
    @trust_opt
    @quiet_opt
    def verify_cmd(out: str, base: str | None, mask_path: str | None, scale: float | None, trust_remote_code: bool,
                   quiet: bool, verbose: bool) -> None:
        """Audit an export tensor by tensor against the base, mask and scale (exit 1 on any mismatch)."""
        verify(out, base, mask_path, scale, quiet, echo(quiet, verbose), trust_remote_code)

    @group.command("reproduce")
    @click.argument("source")
    @click.option("--out", type=click.Path(file_okay=False), help="folder for the re-run (default: a temp folder)")
    @base_opt
    @trust_opt
    @set_opt
    @quiet_opt
    def reproduce_cmd(source: str, out: str | None, base: str | None, trust_remote_code: bool, sets: tuple[str, ...],
                      quiet: bool, verbose: bool) -> None:
        """Re-run a lock (output folder, lock file, model card or Hub repo id) and compare every hash (exit 1
        if any differs). Local data files the lock redacted: --set data.math.path=FILE (checked by sha256)."""
        reproduce(source, out, base, sets, quiet, echo, verbose, trust_remote_code)
