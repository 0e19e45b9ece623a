"""The publishing commands of the CLI: ``card``, ``push``, ``verify``, ``reproduce``; each parses, calls one function
of :mod:`mathneuro_edit.runs.release` or :mod:`mathneuro_edit.runs.reproduce`, and prints what it returns."""

from __future__ import annotations

import sys
from collections.abc import Callable

import click

from .options import emit_json, json_report_opt, quiet_opt, require_local, set_opt, stage_echo, verbose_opt

__all__ = ["card", "push", "verify", "reproduce"]

base_opt = click.option("--base", help="local base folder, when the lock's local base path was redacted")
trust_opt = click.option(
    "--trust-remote-code",
    is_flag=True,
    help="run the base repository's own Python code (never taken from a lock; only for repositories you trust)",
)
existing_dir = click.Path(exists=True, file_okay=False)
card_set_opt = click.option(  # not the recipe's --set: a card changes only what it shows
    "--set",
    "sets",
    multiple=True,
    metavar="KEY=VALUE",
    help="change what the cards and the Hub show, in the lock and cards: hub.repo_id, hub.private, hub.revision, "
    "base.hub_id, base.hub_revision, or a source's hub_dataset (e.g. --set hub.repo_id=me/name; repeatable). "
    "A key that decides the weights (data, mask, edit, ...) is refused: re-run the recipe",
)


@click.command()
@click.argument("run_dir", type=existing_dir)
@base_opt
@card_set_opt
@verbose_opt
def card(run_dir: str, base: str | None, sets: tuple[str, ...], verbose: bool) -> None:
    """Rewrite the model cards of a run folder from its lock, mask and eval.json.

    --set changes what the cards show (the lock's recipe too, so a push agrees); --base gives back a base the
    lock redacted (only needed for a lock of an older version).
    """
    from ..runs.release import rewrite_cards

    stage_echo(False, verbose)  # a GGUF base dequantized on first use: transformers' bars only with --verbose
    for path in rewrite_cards(run_dir, base, sets):
        click.echo(path)


def _output_flags(command: Callable) -> Callable:
    """``push``'s flag per registered output a run folder holds besides the first (the checkpoint, pushed without
    a flag): ``--adapter``, ``--gguf``, each named as its output and described from its registry entry, and the
    ``--repo-id`` default listed from the same entries. Why from the registry: a new output gets its flag without
    an edit here."""
    from ..outputs.registry import OUTPUTS

    default, *others = OUTPUTS.values()
    repos = ", ".join(f"<id>{o.repo_suffix} for the {o.name}" for o in (default, *others))
    command = click.option("--repo-id", help=f"target Hub repo (default from the recipe's hub.repo_id: {repos})")(
        command
    )
    for out in reversed(others):  # click lists the options last applied first
        files = "GGUF files" if out.gguf_files else f"{out.folder}/"
        command = click.option(
            f"--{out.name}",
            out.name,
            is_flag=True,
            help=f"push the run's {files} ({out.library}) to their own repo, <id>{out.repo_suffix}",
        )(command)
    return command


@click.command()
@click.argument("out", type=existing_dir)
@_output_flags
@click.option(
    "--private/--public",
    default=None,
    help="set the repo's visibility (default: the recipe's hub.private for a new repo; an existing one is left as is)",
)
@click.option(
    "--revision",
    "--branch",
    "revision",
    help="branch to push to, created from main if missing (default: the recipe's hub.revision or main)",
)
@click.option("--commit-message", help="the commit's summary (the recipe sha256 is appended)")
@click.option("--create-pr", is_flag=True, help="open a pull request instead of committing to the branch")
@click.option("--dry-run", is_flag=True, help="show the full plan (adds, deletes, sizes); change nothing")
@json_report_opt
def push(
    out: str,
    repo_id: str | None,
    private: bool | None,
    revision: str | None,
    commit_message: str | None,
    create_pr: bool,
    dry_run: bool,
    as_json: bool,
    **outputs: bool,
) -> None:
    """Make a Hub repo equal to one artifact of a run: the checkpoint, --adapter or --gguf.

    One commit adds the artifact's files and deletes every file the repo holds that the artifact does not
    (.gitattributes is kept). The uploaded card is rendered for the target repo; the local folder is not
    changed. Token from HF_TOKEN or `hf auth login`; never printed.
    """
    from ..errors import InputError
    from ..publish.hub import push_to_hub

    asked = [name for name, on in outputs.items() if on]  # each flag is named as its output
    if len(asked) > 1:
        raise InputError(f"{' and '.join('--' + k for k in asked)} are separate repos: push one at a time")
    result = push_to_hub(
        out,
        repo_id,
        private=private,
        revision=revision,
        kind=asked[0] if asked else None,
        dry_run=dry_run,
        commit_message=commit_message,
        create_pr=create_pr,
    )
    if as_json:
        emit_json(result.to_dict(), scrub=True)
    else:
        click.echo(result.describe())


@click.command()
@click.argument("out", type=existing_dir)
@click.option("--base", help="base model folder or Hub id (default: from the run folder's lock)")
@click.option("--mask", "mask_path", type=click.Path(exists=True, dir_okay=False))
@click.option("--scale", type=float, help="the applied scale (default: from the lock)")
@trust_opt
@quiet_opt
@json_report_opt
def verify(
    out: str,
    base: str | None,
    mask_path: str | None,
    scale: float | None,
    trust_remote_code: bool,
    quiet: bool,
    verbose: bool,
    as_json: bool,
) -> None:
    """Audit an export tensor by tensor against the base, mask and scale, and every file against the lock's
    sha256 (exit 1 on any mismatch)."""
    echo = stage_echo(quiet or as_json, verbose)  # the libraries' bars and known warnings: silent unless --verbose
    from ..runs.release import verify_run
    from ..util.console import bars_wanted

    result = verify_run(
        out,
        base,
        mask_path,
        scale,
        trust_remote_code=trust_remote_code,
        progress=bars_wanted(quiet),
        echo=echo,
        say=(lambda s: None) if as_json else click.echo,
    )
    if as_json:
        emit_json(result.to_dict())
    else:  # the last line says what held: OK naming the devices, or FAILED naming what differs
        click.echo(result.verdict_line())
    if not result.ok:
        sys.exit(1)


@click.command()
@click.argument("source")
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    help="folder for the re-run (default: a temporary folder, deleted afterwards)",
)
@click.option("--keep", is_flag=True, help="keep the temporary re-run folder (its path is printed)")
@base_opt
@trust_opt
@set_opt
@quiet_opt
@json_report_opt
def reproduce(
    source: str,
    out: str | None,
    keep: bool,
    base: str | None,
    trust_remote_code: bool,
    sets: tuple[str, ...],
    quiet: bool,
    verbose: bool,
    as_json: bool,
) -> None:
    """Check the files you have against a lock, then re-run it and compare every hash (exit 1 if any
    differs).

    SOURCE: an output folder, a lock file, a model card or a Hub repo id. A folder's files are checked by
    sha256, a Hub repo's by the LFS sha256 the Hub reports. Local data files the lock redacted:
    --set data.math.path=FILE (checked by sha256)."""
    require_local(source, "SOURCE")  # a mistyped path answers before torch is imported
    say = stage_echo(quiet, verbose)
    from ..runs.reproduce import reproduce as reproduce_lock
    from ..util.console import bars_wanted

    report = reproduce_lock(
        source,
        out_dir=out,
        base=base,
        overrides=sets,
        progress=bars_wanted(quiet or as_json),
        keep=keep,
        trust_remote_code=trust_remote_code,
        echo=say,
    )
    if as_json:
        emit_json(report.to_dict())
    else:
        click.echo(report.to_text())
    if not report.ok:
        sys.exit(1)
