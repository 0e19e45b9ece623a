"""The ``mathneuro-edit`` command line: thin commands that parse, call the Python API, and report.

Here: the error boundary, the group, and the commands that make an edit (``run``, ``calibrate``, ``mask``,
``export``, ``eval``); :mod:`.study` holds those that study a model or an edit (``inspect``, ``sweep``,
``consistency``, ``dequantize``, ``plan``), :mod:`.publish` the publishing ones (``card``, ``push``, ``verify``,
``reproduce``), and :mod:`.options` the options and helpers they share.

The exit statuses (``EXIT_*``; docs/publishing.md, "Exit codes", says what each means) are distinct so scripts can
tell them apart. Tracebacks only with ``MATHNEURO_EDIT_DEBUG=1``; no message ever shows a Hub token. Nothing heavy
(torch, transformers) is imported before a command runs, so ``--help`` is fast.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from .._version import __version__
from ..errors import InputError, MathNeuroEditError
from .options import JSON_META, RecipeJob, emit_json, json_opt, recipe_command, workers_opt
from .publish import card, push, reproduce, verify
from .study import consistency, dequantize, inspect, plan, sweep

DEBUG_ENV = "MATHNEURO_EDIT_DEBUG"
EXIT_OK, EXIT_DIFFERS, EXIT_INPUT, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


def _error_message(exc: BaseException) -> tuple[int, str]:
    """The one table that maps exceptions to an exit status and a one-line message."""
    from ..errors import LockMismatchError, Terminated
    from ..util.outdir import as_space_error

    if isinstance(exc, LockMismatchError):  # a check found a difference (the lock disagrees with its own hash)
        return EXIT_DIFFERS, str(exc)
    if isinstance(exc, InputError):
        return EXIT_INPUT, str(exc)
    disk = isinstance(exc, OSError) or type(exc).__name__ == "SafetensorError"  # ENOSPC / EDQUOT / EROFS
    if disk and (space := as_space_error(exc, getattr(exc, "filename", None) or "the output", None)):
        return EXIT_INPUT, str(space)
    if isinstance(exc, (FileNotFoundError, NotADirectoryError, IsADirectoryError)):
        return EXIT_INPUT, f"{exc.filename or exc}: {exc.strerror or 'not found'}; check the path"
    if isinstance(exc, PermissionError):
        return EXIT_INPUT, f"{exc.filename}: permission denied; choose a writable location"
    if type(exc).__name__ == "SafetensorError":
        return EXIT_INPUT, f"corrupt or unreadable safetensors file ({exc}); re-download or re-create it"
    if isinstance(exc, Terminated):
        import signal

        return 128 + exc.signum, f"terminated by {signal.Signals(exc.signum).name}; no output was left behind"
    if isinstance(exc, KeyboardInterrupt):
        return EXIT_INTERRUPTED, "interrupted; no output was left behind"
    if isinstance(exc, MathNeuroEditError):
        return EXIT_INTERNAL, str(exc)
    return EXIT_INTERNAL, (
        f"internal error: {type(exc).__name__}: {exc}; set {DEBUG_ENV}=1 for the traceback and report it"
    )


def usage_line(exc: click.UsageError, prog: str) -> str:
    """click's usage error as one line: the command, what is wrong, and where the help is (click prints three lines:
    the usage, a hint, then the error).

    Example:
        >>> group = click.Context(click.Group("mathneuro-edit"), info_name="mathneuro-edit")
        >>> ctx = click.Context(click.Command("verify"), info_name="verify", parent=group)
        >>> usage_line(click.BadParameter("Directory 'x' does not exist.", ctx, param_hint="'OUT'"), "mathneuro-edit")
        "mathneuro-edit verify: Invalid value for 'OUT': Directory 'x' does not exist; see mathneuro-edit verify --help"
    """
    where = exc.ctx.command_path if exc.ctx is not None else prog
    return f"{where}: {' '.join(exc.format_message().split()).rstrip('.')}; see {where} --help"


class _Group(click.Group):
    def main(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().main(*args, **kwargs)
        except SystemExit as exc:
            import sys

            hub = sys.modules.get("mathneuro_edit.publish.hub_requests")
            if hub is not None and hub.requests_left_running():  # an interrupted push: its stalled upload threads
                sys.stdout.flush()  # would hold the process open until they time out (65 s); the line is printed
                sys.stderr.flush()
                os._exit(exc.code if isinstance(exc.code, int) else EXIT_INTERNAL)
            raise

    def invoke(self, ctx: click.Context) -> Any:
        from ..util.console import library_output_safe
        from ..util.outdir import install_signal_handlers

        try:  # SIGTERM / SIGHUP clean up like Ctrl-C; the libraries' lines redacted and escaped as ours
            with install_signal_handlers(), library_output_safe():
                return super().invoke(ctx)
        except click.UsageError as exc:  # a missing option, a path that is not there: one line, as every input error
            code, line = exc.exit_code, usage_line(exc, ctx.info_name or "mathneuro-edit")
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException, SystemExit):
            raise  # SystemExit: verify / reproduce already printed their report and chose the status
        except BaseException as exc:  # noqa: BLE001 - the CLI's one error boundary
            from ..util.console import terminal_safe
            from ..util.scrub import scrub_token

            code, message = _error_message(exc)
            if os.environ.get(DEBUG_ENV):  # the traceback too, and the same exit status
                import traceback

                click.echo(scrub_token("".join(traceback.format_exception(exc))).rstrip(), err=True)
            line = terminal_safe(scrub_token(" ".join(message.split())))  # printed, never obeyed (ESC, bidi)
        if ctx.meta.get(JSON_META):  # --json: stdout holds one JSON document, the error's too
            import json

            click.echo(json.dumps({"ok": False, "error": line, "exit_status": code}))
        click.echo(f"error: {line}", err=True)
        ctx.exit(code)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="mathneuro-edit")
def main() -> None:
    """Find and edit the math-specific weights of language models (MathNeuro, arXiv 2410.16930).

    Without RECIPE, commands use the embedded default (recipes/quickstart.yaml): the shipped model organism
    and its synthetic data, offline.
    """


@click.command()
@click.option(
    "--out", type=click.Path(file_okay=False), help="output folder (must not exist; required unless --dry-run)"
)
@click.option("--overwrite", is_flag=True, help="replace an existing output folder once the new one is complete")
@click.option("--dry-run", is_flag=True, help="print the resource plan and validate the recipe; run nothing (no --out)")
@click.option(
    "--from-sweep",
    "from_sweep",
    type=click.Path(file_okay=False),
    metavar="SWEEP_DIR",
    help="use the setting (top_k, scale) that this sweep confirmed; the lock and card record the evidence",
)
@workers_opt
@json_opt
@recipe_command
def run(
    job: RecipeJob,
    out: str | None,
    overwrite: bool,
    dry_run: bool,
    from_sweep: str | None,
    workers: int,
    as_json: bool,
) -> None:
    """Run a recipe end to end: calibrate, mask, evaluate, export, lock and card."""
    if out is None and not dry_run:
        raise click.UsageError("Missing option '--out' (only --dry-run runs without one)", click.get_current_context())
    if from_sweep:
        fixed = [
            item for item in job.sets if item.partition("=")[0].strip() in ("mask.top_k", "edit.scale", "edit.prune")
        ]
        if fixed:
            raise InputError(
                f"--set {fixed[0]}: --from-sweep takes top_k and the edit from the sweep; drop the --set "
                "or drop --from-sweep"
            )
    r = job.recipe()
    if from_sweep and dry_run:
        from ..runs.sweep.evidence import read_sweep, recipe_from_sweep

        r = recipe_from_sweep(r, read_sweep(from_sweep))
    if dry_run:
        from ..runs.plan import plan_recipe

        p = plan_recipe(r)
        p.check_outputs(r)  # validation: exit 2
        if as_json:
            emit_json({"ok": True, "dry_run": True, "plan": p.to_dict()})
        else:
            click.echo(p.to_text())
        return
    job.claim(out, r, "dir", sweep_folder=from_sweep)  # a sweep is an input: never written
    how = {"overwrite": overwrite, "progress": job.progress, "echo": job.stages(), "workers": workers}
    if from_sweep:
        from ..runs.sweep.evidence import run_from_sweep

        result = run_from_sweep(r, from_sweep, out, **how)
        shown, note = {"from_sweep": from_sweep}, f" (setting confirmed by {from_sweep})"
    else:
        from ..runs.pipeline import run_recipe

        result = run_recipe(r, out, **how)
        shown, note = {}, ""
    if as_json:
        emit_json({"ok": True, **result.to_dict(), **shown})
        return
    click.echo(f"{result.out_dir}  mask {result.mask_sha256[:12]}  {result.selected:,}/{result.total:,} weights{note}")


@click.command()
@click.option("--out", required=True, type=click.Path(file_okay=False), help="folder for *.stats.safetensors")
@recipe_command
def calibrate(job: RecipeJob, out: str) -> None:
    """Compute the statistics of the recipe's math set and each general set.

    Data-parallel: `torchrun --nproc-per-node N -m mathneuro_edit.cli calibrate RECIPE --out DIR`.
    """
    r = job.recipe()
    inputs = job.claim(out, r, "dir")  # a bad recipe or --out answers before torch is imported
    echo = job.stages()
    from ..runs.single_steps import calibrate_to_folder

    for path in calibrate_to_folder(
        r, out, inputs=inputs, progress=job.progress, echo=echo, rank_zero=os.environ.get("RANK", "0") == "0"
    ):
        click.echo(path)


@click.command()
@click.option(
    "--stats",
    "stats_dir",
    required=True,
    type=click.Path(exists=True, file_okay=False),
    help="folder written by `calibrate` (math.stats.safetensors, general-*.stats.safetensors)",
)
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="mask file to write")
@click.option(
    "--top-k",
    "top_k",
    type=float,
    metavar="FRACTION",
    help="fraction of each matrix (or row) kept, in (0, 1]; replaces the recipe's mask.top_k (and --set mask.top_k)",
)
@recipe_command
def mask(job: RecipeJob, stats_dir: str, out: str, top_k: float | None) -> None:
    """Derive a mask from saved statistics (any top_k, no forward pass)."""
    r = job.recipe()
    if top_k is not None:  # not as --set mask.top_k=X: a float written back as YAML, 1e-05, would read as a string
        from ..recipe.types import check_top_k

        try:
            check_top_k(top_k)  # the recipe's own rule: (0, 1], with its hint
        except ValueError as e:
            raise InputError(f"--top-k: {e}") from None
        r = r.model_copy(update={"mask": r.mask.model_copy(update={"top_k": top_k})})
    job.claim(out, r, "file", statistics=stats_dir)
    echo = job.stages()
    from ..runs.single_steps import mask_from_stats

    m = mask_from_stats(r, stats_dir, out, progress=job.progress, echo=echo)
    click.echo(f"{out}  {m.selected:,}/{m.total:,} weights ({100 * m.selected / m.total:.3f}%)  sha256 {m.sha256}")


@click.command()
@click.option(
    "--mask",
    "mask_path",
    required=True,
    type=click.Path(exists=True, dir_okay=False),
    help="mask file written by `run` (mask.safetensors) or `mask`",
)
@click.option("--out", required=True, type=click.Path(file_okay=False), help="output folder (must not exist)")
@click.option(
    "--adapter",
    is_flag=True,
    help="write a PEFT adapter instead of a full checkpoint (the same as --set outputs.checkpoint=false --set "
    "outputs.adapter=true; without it, the recipe's outputs decide: the checkpoint when outputs.checkpoint is true, "
    "else the adapter)",
)
@click.option(
    "--gguf",
    "gguf_type",
    metavar="TYPE",
    help="also write OUT/model-TYPE.gguf for llama.cpp: F32, F16, "
    "BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, a K-quant made by llama.cpp (Q6_K, Q5_K_M, Q4_K_M, ...), a list "
    "('[Q8_0, Q4_K_M]'), or base (a GGUF base's own type; default: the recipe's outputs.gguf)",
)
@click.option("--overwrite", is_flag=True, help="replace an existing output folder once the new one is complete")
@workers_opt
@recipe_command
def export(
    job: RecipeJob, mask_path: str, out: str, adapter: bool, gguf_type: str | None, overwrite: bool, workers: int
) -> None:
    """Bake the recipe's edit into a checkpoint (streamed, + GGUF with --gguf) or an adapter, with its lock and card."""
    if adapter and gguf_type:
        raise InputError("--gguf is written from a checkpoint: drop --adapter, or drop --gguf")
    # the recipe keys each flag stands for (validated by the recipe): the lock then says what this folder holds
    as_adapter = ("outputs.checkpoint=false", "outputs.adapter=true", "outputs.gguf=null") if adapter else ()
    r = job.recipe(*as_adapter, *([f"outputs.gguf={gguf_type}"] if gguf_type else []))
    job.claim(out, r, "dir", mask=mask_path)
    echo = job.stages()
    from ..runs.pipeline import export_recipe
    from ..runs.steps.export import output_kinds

    kind = output_kinds(r)[0]  # the checkpoint when outputs.checkpoint is true, else the adapter
    folder = export_recipe(
        r, mask_path, out, kind=kind, overwrite=overwrite, progress=job.progress, workers=workers, echo=echo
    )
    click.echo(folder)


@click.command("eval")
@click.option(
    "--mask",
    "mask_path",
    type=click.Path(exists=True, dir_okay=False),
    help="evaluate base AND edited (with KL); without it, the base only",
)
@click.option("--out", type=click.Path(dir_okay=False), help="write the results as JSON (eval.json)")
@json_opt
@recipe_command
def eval_cmd(job: RecipeJob, mask_path: str | None, out: str | None, as_json: bool) -> None:
    """Evaluate math exact match and general loss / KL, before and after an edit."""
    from ..layout import EVAL_NAME

    r = job.recipe()
    target = None
    if out:
        target = Path(out) / EVAL_NAME if Path(out).is_dir() else Path(out)  # a folder: eval.json in it
        job.claim(str(target), r, "file", mask=mask_path)
    echo = job.stages()
    from ..runs.single_steps import evaluate_recipe

    results = evaluate_recipe(r, mask_path, target, progress=job.progress, echo=echo)
    if as_json:  # the eval.json document (without per-problem predictions)
        emit_json({"ok": True, "eval_json": None if target is None else str(target), "results": results.to_dict()})
        return
    click.echo(results.to_markdown())


# The one registration style: every command is a module-level click command (here: those that make an edit;
# cli/study.py: those that study one; cli/publish.py: those that publish one), added to the group here.
_EDIT = (run, calibrate, mask, export, eval_cmd)
_STUDY = (inspect, sweep, consistency, dequantize, plan)
_PUBLISH = (card, push, verify, reproduce)
for _command in (*_EDIT, *_STUDY, *_PUBLISH):
    main.add_command(_command)
