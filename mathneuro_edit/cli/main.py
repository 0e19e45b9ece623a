"""The ``mathneuro-edit`` command line: thin commands that parse, call the Python API, and report.

Exit status: 0 success; 2 bad input (one line: what, where, how to fix); 1 internal error; 130 interrupted.
Tracebacks only with ``MATHNEURO_EDIT_DEBUG=1``. Nothing heavy (torch, transformers) is imported before a
command runs, so ``--help`` is fast.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from .._version import __version__
from ..errors import InputError, MathNeuroEditError

DEBUG_ENV = "MATHNEURO_EDIT_DEBUG"


def _error_message(exc: BaseException) -> tuple[int, str]:
    """The one table that maps exceptions to an exit status and a one-line message."""
    from ..errors import Terminated
    from ..util.outdir import as_space_error

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
        return 130, "interrupted; no output was left behind"
    if isinstance(exc, MathNeuroEditError):
        return 1, str(exc)
    return 1, f"internal error: {type(exc).__name__}: {exc}; set {DEBUG_ENV}=1 for the traceback and report it"


class _Group(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        from ..util.outdir import install_signal_handlers

        try:
            with install_signal_handlers():  # SIGTERM / SIGHUP clean up like Ctrl-C
                return super().invoke(ctx)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException, SystemExit):
            raise  # SystemExit: verify / reproduce already printed their report and chose the status
        except BaseException as exc:  # noqa: BLE001 - the CLI's one error boundary
            if os.environ.get(DEBUG_ENV):
                raise
            code, message = _error_message(exc)
            click.echo(f"error: {' '.join(message.split())}", err=True)
            ctx.exit(code)


def _recipe(path: str | None, sets: tuple[str, ...]):
    from ..recipe.io import load_recipe, quickstart_recipe

    return load_recipe(path, sets) if path else quickstart_recipe(sets)


def _refuse_base(recipe: Any, out: str) -> None:
    """Refuse an --out inside the recipe's local base folder (or onto one of its files)."""
    from ..util.outdir import refuse_overlap

    local = recipe.base.local_dir()
    if local is not None:
        refuse_overlap(out, [local], label="--out")


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
set_opt = click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
                       help="override a recipe key, e.g. --set mask.top_k=0.01 (repeatable)")
_quiet = click.option("--quiet", "-q", is_flag=True, help="no progress bars or stage lines")
_verbose = click.option("--verbose", "-v", is_flag=True,
                        help="also the libraries' own progress bars and every warning they print")


def quiet_opt(f: Any) -> Any:
    """``--quiet`` and ``--verbose`` (the command receives both)."""
    return _quiet(_verbose(f))
workers_opt = click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True,
                           help="output shards written at once (threads; peak memory grows with N)")


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
@workers_opt
@set_opt
@quiet_opt
def run(recipe: str | None, out: str, overwrite: bool, dry_run: bool, workers: int, sets: tuple[str, ...],
        quiet: bool, verbose: bool) -> None:
    """Run a recipe end to end: calibrate, mask, evaluate, export, lock and card."""
    r = _recipe(recipe, sets)
    if dry_run:
        from ..runs.plan import plan_recipe

        p = plan_recipe(r)
        click.echo(p.to_text())
        p.check_outputs(adapter=r.outputs.adapter, gguf=r.outputs.gguf is not None)  # validation: exit 2
        return
    from ..runs.pipeline import run_recipe

    echo = _echo(quiet, verbose)
    result = run_recipe(r, out, overwrite=overwrite, progress=_bars(quiet), echo=echo, workers=workers)
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
    _refuse_base(r, out)
    for path in calibrate_to_folder(r, out, progress=_bars(quiet), echo=echo,
                                    rank_zero=os.environ.get("RANK", "0") == "0"):
        click.echo(path)


@main.command()
@recipe_arg
@click.option("--stats", "stats_dir", required=True, type=click.Path(exists=True, file_okay=False),
              help="folder written by `calibrate` (math.stats.safetensors, general-*.stats.safetensors)")
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="mask file to write")
@set_opt
@quiet_opt
def mask(recipe: str | None, stats_dir: str, out: str, sets: tuple[str, ...], quiet: bool, verbose: bool) -> None:
    """Derive a mask from saved statistics (any top_k, no forward pass)."""
    echo = _echo(quiet, verbose)  # the libraries' bars and known warnings: silent unless --verbose
    from ..runs.stages import mask_from_stats

    r = _recipe(recipe, sets)
    _refuse_base(r, out)
    m = mask_from_stats(r, stats_dir, out, progress=_bars(quiet), echo=echo)
    click.echo(f"{out}  {m.selected:,}/{m.total:,} weights ({100 * m.selected / m.total:.3f}%)  sha256 {m.sha256}")


@main.command()
@recipe_arg
@click.option("--mask", "mask_path", required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--out", required=True, type=click.Path(file_okay=False))
@click.option("--adapter", is_flag=True, help="write a PEFT adapter instead of a full checkpoint")
@click.option("--gguf", "gguf_type", metavar="TYPE", help="also write OUT/model-TYPE.gguf for llama.cpp: F32, F16, "
              "BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, or base (a GGUF base's own type; default: the recipe's "
              "outputs.gguf)")
@click.option("--overwrite", is_flag=True)
@workers_opt
@set_opt
@quiet_opt
def export(recipe: str | None, mask_path: str, out: str, adapter: bool, gguf_type: str | None, overwrite: bool,
           workers: int, sets: tuple[str, ...], quiet: bool, verbose: bool) -> None:
    """Bake the recipe's edit into a checkpoint (streamed, + GGUF with --gguf) or an adapter, with its lock and card."""
    _echo(quiet, verbose)  # the libraries' bars and known warnings: silent unless --verbose
    from ..runs.pipeline import export_recipe

    r = _recipe(recipe, (*sets, f"outputs.gguf={gguf_type}") if gguf_type else sets)  # validated by the recipe
    if adapter and gguf_type:
        raise InputError("--gguf is written from a checkpoint: drop --adapter, or drop --gguf")
    folder = export_recipe(r, mask_path, out, adapter=adapter, overwrite=overwrite, progress=_bars(quiet),
                           workers=workers)
    click.echo(folder)


@main.command("eval")
@recipe_arg
@click.option("--mask", "mask_path", type=click.Path(exists=True, dir_okay=False),
              help="evaluate base AND edited (with KL); without it, the base only")
@click.option("--out", type=click.Path(dir_okay=False), help="write the results as JSON (eval.json)")
@set_opt
@quiet_opt
def eval_cmd(recipe: str | None, mask_path: str | None, out: str | None, sets: tuple[str, ...], quiet: bool,
             verbose: bool) -> None:
    """Evaluate math exact match and general loss / KL, before and after an edit."""
    echo = _echo(quiet, verbose)  # the libraries' bars and known warnings: silent unless --verbose
    from ..runs.stages import evaluate_recipe

    results = evaluate_recipe(_recipe(recipe, sets), mask_path, out, progress=_bars(quiet), echo=echo)
    click.echo(results.to_markdown())


@main.command()
@click.argument("path", type=click.Path(dir_okay=False))
@click.option("--plot", type=click.Path(dir_okay=False), help="save the per-layer distribution of a mask as PNG")
def inspect(path: str, plot: str | None) -> None:
    """Show a mask or statistics file as a per-tensor table."""
    from ..runs.inspect import (
        load_artifact,
        mask_table,
        plot_layer_distribution,
        stats_table,
    )

    kind, obj = load_artifact(path)
    if plot and kind != "mask":  # before the table: an error is the only output of a failed command
        raise InputError(f"{path}: --plot needs a mask file, this is a statistics file; drop --plot or pass a mask")
    click.echo(mask_table(obj) if kind == "mask" else stats_table(obj))
    if plot:
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
@click.option("--top-k", "top_ks", default="0.001,0.01,0.05,0.1,0.15", show_default=True,
              help="comma-separated top_k fractions")
@click.option("--scale", "scales", default="0,1.05,1.1,1.2", show_default=True,
              help="comma-separated scales (0 prunes)")
@click.option("--kl-budget", default=0.05, show_default=True, help="largest general KL a recommendation may have")
@click.option("--overwrite", is_flag=True)
@set_opt
@quiet_opt
def sweep(recipe: str | None, out: str, top_ks: str, scales: str, kl_budget: float, overwrite: bool,
          sets: tuple[str, ...], quiet: bool, verbose: bool) -> None:
    """Evaluate many (top_k, scale) edits from one calibration; write sweep.csv/json/png and a recommendation."""
    echo = _echo(quiet, verbose)  # the libraries' bars and known warnings: silent unless --verbose
    from ..runs.sweep import run_sweep

    result = run_sweep(_recipe(recipe, sets), out, top_ks=_floats("--top-k", top_ks),
                       scales=_floats("--scale", scales), kl_budget=kl_budget, overwrite=overwrite,
                       progress=_bars(quiet), echo=echo)
    click.echo(result.to_text())
    click.echo(result.recommendation)
    click.echo(f"wrote {Path(out) / 'sweep.csv'} (every column), sweep.json" +
               (", sweep.png" if (Path(out) / "sweep.png").is_file() else ""))


@main.command()
@recipe_arg
@click.option("--out", required=True, type=click.Path(file_okay=False))
@click.option("--sizes", default="1,4,16", show_default=True, help="comma-separated calibration samples per set")
@click.option("--repeats", default=3, show_default=True, help="random draws per size")
@click.option("--overwrite", is_flag=True)
@set_opt
@quiet_opt
def consistency(recipe: str | None, out: str, sizes: str, repeats: int, overwrite: bool, sets: tuple[str, ...],
                quiet: bool, verbose: bool) -> None:
    """Mask overlap across random calibration subsets vs the full data (the paper's data-efficiency figure)."""
    echo = _echo(quiet, verbose)  # the libraries' bars and known warnings: silent unless --verbose
    from ..runs.consistency import run_consistency

    sizes_ = [int(v) for v in _floats("--sizes", sizes)]
    rows = run_consistency(_recipe(recipe, sets), out, sizes=sizes_, repeats=repeats, overwrite=overwrite,
                           progress=_bars(quiet), echo=echo)
    click.echo("samples  vs-full(mean)  vs-full(min)  between-draws")
    for r in rows:
        between = "-" if r.overlap_between_draws_mean is None else f"{r.overlap_between_draws_mean:.3f}"
        click.echo(f"{r.samples:>7}  {r.overlap_with_full_mean:>13.3f}  {r.overlap_with_full_min:>12.3f}  {between:>13}")


@main.command()
@click.argument("model")
@click.option("--gguf-file", help="the .gguf file inside MODEL when MODEL is a Hub repo or a folder")
@click.option("--revision", help="Hub revision of MODEL")
def dequantize(model: str, gguf_file: str | None, revision: str | None) -> None:
    """Dequantize a GGUF file once into a cached safetensors folder and print its path (docs/gguf.md)."""
    from ..weights.gguf_reader import dequantize_gguf, gguf_source

    click.echo(str(dequantize_gguf(gguf_source(model, gguf_file, revision)[0])))


@main.command()
@recipe_arg
@set_opt
def plan(recipe: str | None, sets: tuple[str, ...]) -> None:
    """Estimate parameters, targets, file sizes and peak memory from config.json alone (no weights)."""
    from ..runs.plan import plan_recipe

    click.echo(plan_recipe(_recipe(recipe, sets)).to_text())


from .publish import register as _register_publish  # noqa: E402 - card, push, verify, reproduce

_register_publish(main, set_opt=set_opt, quiet_opt=quiet_opt, echo=_echo)

if __name__ == "__main__":  # pragma: no cover
    main()
