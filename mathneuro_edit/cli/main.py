"""The ``mathneuro-edit`` command line: thin commands that parse, call the Python API, and report.

Exit status (docs/publishing.md), distinct so scripts can tell them apart:

- 0: success;
- 1: a check found a difference (``verify``, ``reproduce``: the report names what differs);
- 2: bad input (one line: what, where, how to fix);
- 3: internal error, or a failure of the environment that is not the input (network, the Hub's 5xx);
- 130: interrupted (Ctrl-C; 128 + N for signal N, e.g. 143 for SIGTERM).

Tracebacks only with ``MATHNEURO_EDIT_DEBUG=1``; no message ever shows a Hub token. Nothing heavy (torch, transformers) is imported before a
command runs, so ``--help`` is fast.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from .._version import __version__
from ..errors import InputError, MathNeuroEditError
from .publish import JSON_META, json_requested

DEBUG_ENV = "MATHNEURO_EDIT_DEBUG"
EXIT_OK, EXIT_DIFFERS, EXIT_INPUT, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


def _error_message(exc: BaseException) -> tuple[int, str]:
    """The one table that maps exceptions to an exit status and a one-line message."""
    from ..errors import LockMismatchError, Terminated
    from ..util.outdir import as_space_error

    if isinstance(exc, LockMismatchError):  # a check found a difference (the lock disagrees with its own hash)
        return EXIT_DIFFERS, str(exc)
    if isinstance(exc, InputError):
        return 2, str(exc)
    disk = isinstance(exc, OSError) or type(exc).__name__ == "SafetensorError"  # ENOSPC / EDQUOT / EROFS
    if disk and (space := as_space_error(exc, getattr(exc, "filename", None) or "the output", None)):
        return 2, str(space)
    if isinstance(exc, (FileNotFoundError, NotADirectoryError, IsADirectoryError)):
        return 2, f"{exc.filename or exc}: {exc.strerror or 'not found'}; check the path"
    if isinstance(exc, PermissionError):
        return 2, f"{exc.filename}: permission denied; choose a writable location"
    if type(exc).__name__ == "SafetensorError":
        return 2, f"corrupt or unreadable safetensors file ({exc}); re-download or re-create it"
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
        from ..util.outdir import install_signal_handlers

        try:
            with install_signal_handlers():  # SIGTERM / SIGHUP clean up like Ctrl-C
                return super().invoke(ctx)
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


def _recipe(path: str | None, sets: tuple[str, ...]):
    from ..recipe.io import load_recipe, quickstart_recipe

    return load_recipe(path, sets) if path else quickstart_recipe(sets)


def _check_out(out: str, recipe: Any, recipe_path: str | None, kind: str, **more: str | None) -> list:
    """The one output-claiming rule (:func:`~mathneuro_edit.util.outdir.check_output`): ``--out`` may not be,
    contain or lie inside any input (the recipe's base and data files, the recipe file, and ``more``: statistics,
    mask, ...), and must be a regular file or folder path. Returns the inputs (for the writer's own check)."""
    from ..util.outdir import check_output

    inputs = [
        *recipe.local_inputs(),
        *([("recipe", recipe_path)] if recipe_path else []),
        *[(what.replace("_", " "), p) for what, p in more.items() if p],
    ]
    check_output(out, inputs, kind=kind)
    return inputs


def _echo(quiet: bool, verbose: bool = False):
    """The stage printer's sink (stderr; nothing under ``--quiet``), with the libraries kept quiet for the rest of
    the command unless ``--verbose`` (their bars and the known-harmless warnings; restored when it ends)."""
    from ..util.console import quiet_libraries

    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        ctx.with_resource(quiet_libraries(verbose and not quiet))  # closed when the command's context ends
    return (lambda s: None) if quiet else (lambda s: click.echo(s, err=True))


def _bars(quiet: bool) -> bool:
    from ..util.console import bars_wanted

    return bars_wanted(quiet)


recipe_arg = click.argument("recipe", required=False, type=click.Path(dir_okay=False))
set_opt = click.option(
    "--set",
    "sets",
    multiple=True,
    metavar="KEY=VALUE",
    help="override a recipe key, e.g. --set mask.top_k=0.01 (repeatable)",
)
_quiet = click.option("--quiet", "-q", is_flag=True, help="no progress bars or stage lines")
_verbose = click.option(
    "--verbose", "-v", is_flag=True, help="also the libraries' own progress bars and every warning they print"
)


def quiet_opt(f: Any) -> Any:
    """``--quiet`` and ``--verbose`` (the command receives both)."""
    return _quiet(_verbose(f))


json_opt = click.option(
    "--json",
    "as_json",
    is_flag=True,
    callback=json_requested,
    help="print one JSON document on stdout (stage lines stay on stderr)",
)


def emit_json(data: Any) -> None:
    """One JSON document on stdout (``--json``)."""
    import json

    click.echo(json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False, default=str))


workers_opt = click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="output shards written at once (threads; peak memory grows with N)",
)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="mathneuro-edit")
def main() -> None:
    """Find and edit the math-specific weights of language models (MathNeuro, arXiv 2410.16930).

    Without RECIPE, commands use the embedded default (recipes/quickstart.yaml): the shipped model organism
    and its synthetic data, offline.
    """


@main.command()
@recipe_arg
@click.option("--out", required=True, type=click.Path(file_okay=False), help="output folder (must not exist)")
@click.option("--overwrite", is_flag=True, help="replace an existing output folder once the new one is complete")
@click.option("--dry-run", is_flag=True, help="print the resource plan and validate the recipe; run nothing")
@click.option(
    "--from-sweep",
    "from_sweep",
    type=click.Path(file_okay=False),
    metavar="SWEEP_DIR",
    help="use the setting (top_k, scale) that this sweep confirmed; the lock and card record the evidence",
)
@workers_opt
@set_opt
@quiet_opt
@json_opt
def run(
    recipe: str | None,
    out: str,
    overwrite: bool,
    dry_run: bool,
    from_sweep: str | None,
    workers: int,
    sets: tuple[str, ...],
    quiet: bool,
    verbose: bool,
    as_json: bool,
) -> None:
    """Run a recipe end to end: calibrate, mask, evaluate, export, lock and card."""
    if from_sweep:
        fixed = [item for item in sets if item.partition("=")[0].strip() in ("mask.top_k", "edit.scale", "edit.prune")]
        if fixed:
            raise InputError(
                f"--set {fixed[0]}: --from-sweep takes top_k and the edit from the sweep; drop the --set "
                "or drop --from-sweep"
            )
    r = _recipe(recipe, sets)
    if from_sweep:
        from ..runs.sweep_release import read_sweep, recipe_from_sweep, run_from_sweep

        if dry_run:
            r = recipe_from_sweep(r, read_sweep(from_sweep))
        else:
            result = run_from_sweep(
                r,
                from_sweep,
                out,
                overwrite=overwrite,
                progress=_bars(quiet),
                echo=_echo(quiet, verbose),
                workers=workers,
            )
            if as_json:
                emit_json({"ok": True, **result.to_dict(), "from_sweep": from_sweep})
                return
            click.echo(
                f"{result.out_dir}  mask {result.mask_sha256[:12]}  {result.selected:,}/{result.total:,} "
                f"weights (setting confirmed by {from_sweep})"
            )
            return
    if dry_run:
        from ..runs.plan import plan_recipe

        p = plan_recipe(r)
        p.check_outputs(adapter=r.outputs.adapter, gguf=r.outputs.gguf is not None)  # validation: exit 2
        if as_json:
            emit_json({"ok": True, "dry_run": True, "plan": p.to_dict()})
        else:
            click.echo(p.to_text())
        return
    from ..runs.pipeline import run_recipe

    _check_out(out, r, recipe, "dir")
    echo = _echo(quiet, verbose)
    result = run_recipe(r, out, overwrite=overwrite, progress=_bars(quiet), echo=echo, workers=workers)
    if as_json:
        emit_json({"ok": True, **result.to_dict()})
        return
    click.echo(f"{result.out_dir}  mask {result.mask_sha256[:12]}  {result.selected:,}/{result.total:,} weights")


@main.command()
@recipe_arg
@click.option("--out", required=True, type=click.Path(file_okay=False), help="folder for *.stats.safetensors")
@set_opt
@quiet_opt
def calibrate(recipe: str | None, out: str, sets: tuple[str, ...], quiet: bool, verbose: bool) -> None:
    """Compute the statistics of the recipe's math set and each general set.

    Data-parallel: `torchrun --nproc-per-node N -m mathneuro_edit.cli calibrate RECIPE --out DIR`.
    """
    echo = _echo(quiet, verbose)  # the libraries' bars and known warnings: silent unless --verbose
    from ..runs.stages import calibrate_to_folder

    r = _recipe(recipe, sets)
    inputs = _check_out(out, r, recipe, "dir")
    for path in calibrate_to_folder(
        r, out, inputs=inputs, progress=_bars(quiet), echo=echo, rank_zero=os.environ.get("RANK", "0") == "0"
    ):
        click.echo(path)


@main.command()
@recipe_arg
@click.option(
    "--stats",
    "stats_dir",
    required=True,
    type=click.Path(exists=True, file_okay=False),
    help="folder written by `calibrate` (math.stats.safetensors, general-*.stats.safetensors)",
)
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="mask file to write")
@set_opt
@quiet_opt
def mask(recipe: str | None, stats_dir: str, out: str, sets: tuple[str, ...], quiet: bool, verbose: bool) -> None:
    """Derive a mask from saved statistics (any top_k, no forward pass)."""
    echo = _echo(quiet, verbose)  # the libraries' bars and known warnings: silent unless --verbose
    from ..runs.stages import mask_from_stats

    r = _recipe(recipe, sets)
    _check_out(out, r, recipe, "file", statistics=stats_dir)
    m = mask_from_stats(r, stats_dir, out, progress=_bars(quiet), echo=echo)
    click.echo(f"{out}  {m.selected:,}/{m.total:,} weights ({100 * m.selected / m.total:.3f}%)  sha256 {m.sha256}")


@main.command()
@recipe_arg
@click.option("--mask", "mask_path", required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--out", required=True, type=click.Path(file_okay=False))
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
    "BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, or base (a GGUF base's own type; default: the recipe's "
    "outputs.gguf)",
)
@click.option("--overwrite", is_flag=True)
@workers_opt
@set_opt
@quiet_opt
def export(
    recipe: str | None,
    mask_path: str,
    out: str,
    adapter: bool,
    gguf_type: str | None,
    overwrite: bool,
    workers: int,
    sets: tuple[str, ...],
    quiet: bool,
    verbose: bool,
) -> None:
    """Bake the recipe's edit into a checkpoint (streamed, + GGUF with --gguf) or an adapter, with its lock and card."""
    _echo(quiet, verbose)  # the libraries' bars and known warnings: silent unless --verbose
    from ..runs.pipeline import export_recipe

    if adapter and gguf_type:
        raise InputError("--gguf is written from a checkpoint: drop --adapter, or drop --gguf")
    if adapter:  # the recipe keys it stands for: the lock then says what this folder holds
        sets = (*sets, "outputs.checkpoint=false", "outputs.adapter=true", "outputs.gguf=null")
    r = _recipe(recipe, (*sets, f"outputs.gguf={gguf_type}") if gguf_type else sets)  # validated by the recipe
    _check_out(out, r, recipe, "dir", mask=mask_path)
    folder = export_recipe(
        r, mask_path, out, adapter=not r.outputs.checkpoint, overwrite=overwrite, progress=_bars(quiet), workers=workers
    )
    click.echo(folder)


@main.command("eval")
@recipe_arg
@click.option(
    "--mask",
    "mask_path",
    type=click.Path(exists=True, dir_okay=False),
    help="evaluate base AND edited (with KL); without it, the base only",
)
@click.option("--out", type=click.Path(dir_okay=False), help="write the results as JSON (eval.json)")
@set_opt
@quiet_opt
@json_opt
def eval_cmd(
    recipe: str | None,
    mask_path: str | None,
    out: str | None,
    sets: tuple[str, ...],
    quiet: bool,
    verbose: bool,
    as_json: bool,
) -> None:
    """Evaluate math exact match and general loss / KL, before and after an edit."""
    echo = _echo(quiet, verbose)  # the libraries' bars and known warnings: silent unless --verbose
    from ..layout import EVAL_NAME
    from ..runs.stages import evaluate_recipe

    r = _recipe(recipe, sets)
    target = None
    if out:
        target = Path(out) / EVAL_NAME if Path(out).is_dir() else Path(out)  # a folder: eval.json in it
        _check_out(str(target), r, recipe, "file", mask=mask_path)
    results = evaluate_recipe(r, mask_path, target, progress=_bars(quiet), echo=echo)
    if as_json:  # the eval.json document (without per-problem predictions)
        emit_json({"ok": True, "eval_json": None if target is None else str(target), "results": results.to_dict()})
        return
    click.echo(results.to_markdown())


@main.command()
@click.argument("path", type=click.Path(dir_okay=False))
@click.option("--plot", type=click.Path(dir_okay=False), help="save the per-layer distribution of a mask as PNG")
@json_opt
def inspect(path: str, plot: str | None, as_json: bool) -> None:
    """Show a mask or statistics file as a per-tensor table."""
    from ..runs.inspect import (
        load_artifact,
        mask_dict,
        mask_table,
        plot_layer_distribution,
        stats_dict,
        stats_table,
    )
    from ..util.outdir import check_output

    if plot:
        check_output(plot, [("inspected file", path)], kind="file", label="--plot")
    kind, obj = load_artifact(path)
    if plot and kind != "mask":  # before the table: an error is the only output of a failed command
        raise InputError(f"{path}: --plot needs a mask file, this is a statistics file; drop --plot or pass a mask")
    if as_json:
        data = mask_dict(obj) if kind == "mask" else stats_dict(obj)
        if plot:
            data["plot"] = str(plot_layer_distribution(obj, plot))
        emit_json(data)
        return
    click.echo(mask_table(obj) if kind == "mask" else stats_table(obj))
    if plot:
        from ..util.outdir import claim

        with claim(plot):  # one writer per --plot; the PNG itself is written atomically
            click.echo(plot_layer_distribution(obj, plot))


def _floats(option: str, text: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise InputError(f"{option}: {text!r} is not a comma-separated list of numbers, e.g. 0.01,0.05") from None
    if not values:
        raise InputError(f"{option}: give at least one value")
    return values


@main.command()
@recipe_arg
@click.option("--out", required=True, type=click.Path(file_okay=False))
@click.option(
    "--top-k",
    "top_ks",
    default=None,
    help="comma-separated top_k fractions (the same as --set 'sweep.top_k=[...]'; default: the recipe's "
    "sweep.top_k, else 0.001,0.01,0.05,0.1,0.15)",
)
@click.option(
    "--scale",
    "scales",
    default=None,
    help="comma-separated scales, 0 prunes (the same as --set 'sweep.scale=[...]'; default: the recipe's "
    "sweep.scale, else 0,1.05,1.1,1.2)",
)
@click.option(
    "--kl-budget",
    type=float,
    default=None,
    help="largest general KL a chosen setting may have (the same as --set sweep.kl_budget=X; default: "
    "the recipe's, 0.05)",
)
@click.option("--overwrite", is_flag=True)
@set_opt
@quiet_opt
@json_opt
def sweep(
    recipe: str | None,
    out: str,
    top_ks: str | None,
    scales: str | None,
    kl_budget: float | None,
    overwrite: bool,
    sets: tuple[str, ...],
    quiet: bool,
    verbose: bool,
    as_json: bool,
) -> None:
    """Choose a (top_k, scale) edit on selection problems, confirm it on other problems; write sweep.csv/json/png.

    Sizes, budget and level: the recipe's sweep section (--set sweep.selection_samples=N, ...).
    """
    echo = _echo(quiet, verbose)  # the libraries' bars and known warnings: silent unless --verbose
    from ..layout import SWEEP_CSV, SWEEP_JSON, SWEEP_PNG
    from ..runs.sweep import run_sweep

    r = _recipe(recipe, (*sets, f"sweep.kl_budget={kl_budget!r}") if kl_budget is not None else sets)
    _check_out(out, r, recipe, "dir")
    result = run_sweep(
        r,
        out,
        top_ks=None if top_ks is None else _floats("--top-k", top_ks),
        scales=None if scales is None else _floats("--scale", scales),
        overwrite=overwrite,
        progress=_bars(quiet),
        echo=echo,
    )
    if as_json:  # the sweep.json document as written (NaN-free), and where the files are
        import json

        files = [str(Path(out) / f) for f in (SWEEP_CSV, SWEEP_JSON, SWEEP_PNG) if (Path(out) / f).is_file()]
        emit_json(
            {
                "ok": True,
                "out_dir": str(out),
                "files": files,
                "recommendation": result.recommendation,
                "sweep": json.loads((Path(out) / SWEEP_JSON).read_text(encoding="utf-8")),
            }
        )
        return
    click.echo(result.to_text())
    click.echo(result.recommendation)
    click.echo(
        f"wrote {Path(out) / SWEEP_CSV} (every column), {SWEEP_JSON}"
        + (f", {SWEEP_PNG}" if (Path(out) / SWEEP_PNG).is_file() else "")
    )


@main.command()
@recipe_arg
@click.option("--out", required=True, type=click.Path(file_okay=False))
@click.option(
    "--sizes",
    default=None,
    help="comma-separated calibration samples per set (the same as --set 'consistency.sizes=[...]'; default: the "
    "recipe's consistency.sizes, 1,4,16)",
)
@click.option(
    "--repeats",
    type=int,
    default=None,
    help="random draws per size (the same as --set consistency.repeats=N; default: the recipe's, 3)",
)
@click.option("--overwrite", is_flag=True)
@set_opt
@quiet_opt
def consistency(
    recipe: str | None,
    out: str,
    sizes: str | None,
    repeats: int | None,
    overwrite: bool,
    sets: tuple[str, ...],
    quiet: bool,
    verbose: bool,
) -> None:
    """Mask overlap across random calibration subsets vs the full data (the paper's data-efficiency figure)."""
    echo = _echo(quiet, verbose)  # the libraries' bars and known warnings: silent unless --verbose
    from ..runs.consistency import run_consistency

    if sizes is not None:  # a shortcut for the recipe key
        if any(v < 1 or v != int(v) for v in _floats("--sizes", sizes)):  # 1.5 is not a number of samples
            raise InputError(
                f"--sizes: {sizes!r}: each size is a number of calibration samples, an integer >= 1, e.g. 1,4,16"
            )
        sets = (*sets, f"consistency.sizes=[{','.join(str(int(v)) for v in _floats('--sizes', sizes))}]")
    if repeats is not None:
        sets = (*sets, f"consistency.repeats={repeats}")
    r = _recipe(recipe, sets)
    _check_out(out, r, recipe, "dir")
    rows = run_consistency(r, out, overwrite=overwrite, progress=_bars(quiet), echo=echo)
    click.echo("samples  vs-full(mean)  vs-full(min)  between-draws")
    for r in rows:
        between = "-" if r.overlap_between_draws_mean is None else f"{r.overlap_between_draws_mean:.3f}"
        click.echo(
            f"{r.samples:>7}  {r.overlap_with_full_mean:>13.3f}  {r.overlap_with_full_min:>12.3f}  {between:>13}"
        )


@main.command()
@click.argument("model")
@click.option("--gguf-file", help="the .gguf file inside MODEL when MODEL is a Hub repo or a folder")
@click.option("--revision", help="Hub revision of MODEL")
@_verbose
def dequantize(model: str, gguf_file: str | None, revision: str | None, verbose: bool) -> None:
    """Dequantize a GGUF file once into a cached safetensors folder and print its path (docs/gguf.md)."""
    from ..weights.gguf_reader import dequantize_gguf, gguf_source

    _echo(False, verbose)  # the libraries' bars and load report only with --verbose

    click.echo(str(dequantize_gguf(gguf_source(model, gguf_file, revision)[0])))


@main.command()
@recipe_arg
@set_opt
@click.option(
    "--mask",
    "mask_file",
    type=click.Path(dir_okay=False),
    help="a saved mask of this base: its counts give the exact mask and adapter sizes and their commands' memory",
)
@json_opt
def plan(recipe: str | None, sets: tuple[str, ...], mask_file: str | None, as_json: bool) -> None:
    """Estimate parameters, targets, file sizes and peak memory from config.json alone (no weights)."""
    from ..runs.plan import plan_recipe

    result = plan_recipe(_recipe(recipe, sets), mask_file)
    if as_json:
        emit_json(result.to_dict())
    else:
        click.echo(result.to_text())


from .publish import register as _register_publish  # noqa: E402 - card, push, verify, reproduce

_register_publish(main, set_opt=set_opt, quiet_opt=quiet_opt, echo=_echo)

if __name__ == "__main__":  # pragma: no cover
    main()
