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
        base_card_fields,
        card_for_folder,
        summarize_edit,
        write_card,
    )
    from ..publish.lock import (
        check_base_weights,
        check_private,
        lock_base,
        read_lock,
        validate_lock,
        write_lock,
    )
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
    license_ = (base_card_fields(base_ref, recipe.base.revision) or None) if base_ref else None
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
         dry_run: bool, gguf: bool = False, commit_message: str | None = None, create_pr: bool = False,
         as_json: bool = False) -> None:
    """Make a Hub repo equal to one artifact of a run (token from HF_TOKEN or `hf auth login`).

    The uploaded card is rendered for the target repo (it loads `from_pretrained("you/name")`); the local
    folder is not changed.
    """
    from ..layout import LOCK_NAME
    from ..publish.hub import default_repo_id, push_to_hub
    from ..publish.lock import read_lock

    if adapter and gguf:
        raise InputError("--adapter and --gguf are two repos: push one at a time")
    kind = "adapter" if adapter else "gguf" if gguf else "checkpoint"
    folder = Path(out)
    sub = folder / (ADAPTER_DIR if adapter else CHECKPOINT_DIR)
    if sub.is_dir():
        folder = sub
    elif adapter:
        raise InputError(f"{out}: no adapter/ folder; run with outputs.adapter: true or push the folder itself")
    if not (folder / LOCK_NAME).is_file():
        raise InputError(f"{out}: no {LOCK_NAME} here; pass the run folder written by `mathneuro-edit run` "
                         "(or a folder written by `export`)")
    if kind == "checkpoint" and (folder / "adapter_config.json").is_file():
        kind = "adapter"  # an `export --adapter` folder
    hub = read_lock(folder)["recipe"].get("hub") or {}  # the recipe's hub section fills what the flags leave out
    if not repo_id and hub.get("repo_id"):
        repo_id = default_repo_id(str(hub["repo_id"]), kind)  # one repo per artifact
    if not repo_id and not dry_run:
        raise InputError(f"no target repo: pass --repo-id you/name or set hub.repo_id in the recipe (the {kind} "
                         "goes to " + {"checkpoint": "<id>", "adapter": "<id>-adapter", "gguf": "<id>-GGUF"}[kind]
                         + ")")
    if private is None and hub.get("private"):
        private = True
    revision = revision or hub.get("revision")
    result = push_to_hub(folder, repo_id, kind=kind, private=private, revision=revision, dry_run=dry_run,
                         commit_message=commit_message, create_pr=create_pr)
    if as_json:
        _emit_json(result.to_dict())
    else:
        click.echo(result.describe())


def _emit_json(data: Any) -> None:
    """One JSON document on stdout (``--json``)."""
    import json

    click.echo(json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False, default=str))


def verify(out: str, base: str | None, mask_path: str | None, scale: float | None, quiet: bool = False,
           echo: Callable[[str], None] = lambda s: None, as_json: bool = False,
           trust_remote_code: bool = False) -> None:
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
    say = (lambda s: None) if as_json else click.echo
    audits = []
    for t in targets:
        stages.start(f"audit {t.name}/ against the base, mask and scale x{scale:g}")
        report = verify_export(t, base, mask_path, scale, trust_remote_code=trust, progress=bars_wanted(quiet))
        say(report.summary())
        audits.append(report)
        if not report.ok:
            failed.append(t.name)
    files = None
    lock_dir = folder if (folder / LOCK_NAME).is_file() else None
    if lock_dir is not None:  # the per-file check reproduce makes too: every file against the lock's sha256
        from ..publish.integrity import check_local_files_against_lock

        files = check_local_files_against_lock(folder, read_lock(lock_dir))
        say(files.to_text())
        if not files.ok:
            failed.append("files")
    if as_json:
        _emit_json({"ok": not failed, "failed": failed, "files_checked": files.to_dict() if files else None,
                    "audits": [{"folder": str(a.out_dir), "kind": a.kind, "ok": a.ok, "checked": a.checked,
                                "edited": a.edited, "mismatches": a.mismatches, "missing": a.missing,
                                "extra": a.extra, "also_audited": a.audited} for a in audits]})
    elif failed:
        what = [f for f in failed if f != "files"]
        parts = ([f"{', '.join(what)} differ(s) from the base + mask + scale"] if what else []) + \
            (["files differ from the lock's sha256"] if "files" in failed else [])
        click.echo(f"verify: FAILED: {'; '.join(parts)} (details above)")
    if failed:
        sys.exit(1)


def reproduce(source: str, out: str | None, base: str | None, sets: tuple[str, ...], quiet: bool,
              echo: Callable[..., Any] = lambda quiet, verbose=False: None, verbose: bool = False,
              keep: bool = False, as_json: bool = False, trust_remote_code: bool = False) -> None:
    """Check the files of a lock's folder or Hub repo, re-run the lock and compare every hash (exit 1 if any
    differs)."""
    echo(quiet or as_json, verbose)  # the libraries' bars and known warnings: silent unless --verbose
    from ..runs.reproduce import reproduce as reproduce_lock
    from ..util.console import bars_wanted

    report = reproduce_lock(source, out_dir=out, base=base, overrides=sets, progress=bars_wanted(quiet or as_json),
                            keep=keep, trust_remote_code=trust_remote_code)
    if as_json:
        _emit_json(report.to_dict())
    else:
        click.echo(report.to_text())
    if not report.ok:
        sys.exit(1)


def register(group: click.Group, *, set_opt: Callable, quiet_opt: Callable, echo: Callable[..., Any]) -> None:
    """Add ``card``, ``push``, ``verify`` and ``reproduce`` to the CLI group (options shared with the others)."""
    base_opt = click.option("--base", help="local base folder, when the lock's local base path was redacted")
    json_opt = click.option("--json", "as_json", is_flag=True, help="print one JSON document on stdout")
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
    @click.option("--adapter", is_flag=True, help="push the run's adapter/ (PEFT) to its own repo")
    @click.option("--gguf", is_flag=True, help="push the run's GGUF files to their own repo")
    @click.option("--repo-id", help="target Hub repo (default from the recipe's hub.repo_id: <id> for the "
                                    "checkpoint, <id>-adapter, <id>-GGUF)")
    @click.option("--private/--public", default=None, help="set the repo's visibility (default: the recipe's "
                                                          "hub.private for a new repo; an existing one is left as is)")
    @click.option("--revision", "--branch", "revision", help="branch to push to, created from main if missing "
                                                             "(default: the recipe's hub.revision or main)")
    @click.option("--commit-message", help="the commit's summary (the recipe sha256 is appended)")
    @click.option("--create-pr", is_flag=True, help="open a pull request instead of committing to the branch")
    @click.option("--dry-run", is_flag=True, help="show the full plan (adds, deletes, sizes); change nothing")
    @json_opt
    def push_cmd(out: str, adapter: bool, gguf: bool, repo_id: str | None, private: bool | None,
                 revision: str | None, commit_message: str | None, create_pr: bool, dry_run: bool,
                 as_json: bool) -> None:
        """Make a Hub repo equal to one artifact of a run: the checkpoint, --adapter or --gguf.

        One commit adds the artifact's files and deletes every file the repo holds that the artifact does not
        (.gitattributes is kept). The uploaded card is rendered for the target repo; the local folder is not
        changed. Token from HF_TOKEN or `hf auth login`; never printed.
        """
        push(out, repo_id, private, revision, adapter, dry_run, gguf=gguf, commit_message=commit_message,
             create_pr=create_pr, as_json=as_json)

    @group.command("verify")
    @click.argument("out", type=existing_dir)
    @click.option("--base", help="base model folder or Hub id (default: from the run folder's lock)")
    @click.option("--mask", "mask_path", type=click.Path(exists=True, dir_okay=False))
    @click.option("--scale", type=float, help="the applied scale (default: from the lock)")
    @trust_opt
    @quiet_opt
    @json_opt
    def verify_cmd(out: str, base: str | None, mask_path: str | None, scale: float | None, trust_remote_code: bool,
                   quiet: bool, verbose: bool, as_json: bool) -> None:
        """Audit an export tensor by tensor against the base, mask and scale, and every file against the lock's
        sha256 (exit 1 on any mismatch)."""
        verify(out, base, mask_path, scale, quiet, echo(quiet or as_json, verbose), as_json=as_json,
               trust_remote_code=trust_remote_code)

    @group.command("reproduce")
    @click.argument("source")
    @click.option("--out", type=click.Path(file_okay=False), help="folder for the re-run (default: a temporary "
                                                                  "folder, deleted afterwards)")
    @click.option("--keep", is_flag=True, help="keep the temporary re-run folder (its path is printed)")
    @base_opt
    @trust_opt
    @set_opt
    @quiet_opt
    @json_opt
    def reproduce_cmd(source: str, out: str | None, keep: bool, base: str | None, trust_remote_code: bool,
                      sets: tuple[str, ...], quiet: bool, verbose: bool, as_json: bool) -> None:
        """Check the files you have against a lock, then re-run it and compare every hash (exit 1 if any
        differs).

        SOURCE: an output folder, a lock file, a model card or a Hub repo id. A folder's files are checked by
        sha256, a Hub repo's by the LFS sha256 the Hub reports. Local data files the lock redacted:
        --set data.math.path=FILE (checked by sha256)."""
        reproduce(source, out, base, sets, quiet, echo, verbose, keep=keep, as_json=as_json,
                  trust_remote_code=trust_remote_code)
