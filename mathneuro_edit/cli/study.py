"""The commands that study a model or an edit rather than make one: ``inspect``, ``sweep``, ``consistency``,
``dequantize``, ``plan``; each parses, calls one function of :mod:`mathneuro_edit.runs` (or the GGUF reader), and
prints what it returns."""

from __future__ import annotations

from pathlib import Path

import click

from ..errors import InputError
from .options import (
    RecipeJob,
    emit_json,
    json_opt,
    read_recipe,
    recipe_arg,
    recipe_command,
    require_local,
    set_opt,
    stage_echo,
    verbose_opt,
)

__all__ = ["inspect", "sweep", "consistency", "dequantize", "plan"]


@click.command()
@click.argument("path", type=click.Path(exists=True, dir_okay=False))
@click.option("--plot", type=click.Path(dir_okay=False), help="save the per-layer distribution of a mask as PNG")
@json_opt
def inspect(path: str, plot: str | None, as_json: bool) -> None:
    """Show a mask or statistics file as a per-tensor table."""
    from ..runs import inspect as artifact
    from ..util.outdir import check_output, claim

    if plot:
        check_output(plot, [("inspected file", path)], kind="file", label="--plot")
        artifact.figure_format(plot)  # an image ending: an error is the only output of a failed command
    kind, obj = artifact.load_artifact(path)
    if plot and kind != "mask":  # before the table: an error is the only output of a failed command
        raise InputError(f"{path}: --plot needs a mask file, this is a statistics file; drop --plot or pass a mask")
    if as_json:
        data = artifact.mask_dict(obj) if kind == "mask" else artifact.stats_dict(obj)
        if plot:
            data["plot"] = str(artifact.plot_layer_distribution(obj, plot))
        emit_json(data)
        return
    click.echo(artifact.mask_table(obj) if kind == "mask" else artifact.stats_table(obj))
    if plot:
        with claim(plot):  # one writer per --plot; the PNG itself is written atomically
            click.echo(artifact.plot_layer_distribution(obj, plot))


def _floats(option: str, text: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise InputError(f"{option}: {text!r} is not a comma-separated list of numbers, e.g. 0.01,0.05") from None
    if not values:
        raise InputError(f"{option}: give at least one value")
    return values


@click.command()
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
@click.option(
    "--overwrite",
    is_flag=True,
    help="write into an existing --out that is not a sweep folder (a sweep folder resumes without it)",
)
@click.option(
    "--more-trials",
    type=click.IntRange(min=1),
    default=None,
    help="sweep.search: optuna: add N trials to the study in --out (a finished search continues; the same "
    "command without it continues a killed extension)",
)
@json_opt
@recipe_command
def sweep(
    job: RecipeJob,
    out: str,
    top_ks: str | None,
    scales: str | None,
    kl_budget: float | None,
    overwrite: bool,
    more_trials: int | None,
    as_json: bool,
) -> None:
    """Choose a (top_k, scale) edit on selection problems, confirm it on other problems; write sweep.csv/json/png.

    sweep.search: optuna searches a scale per layer band and component instead (its study in --out resumes;
    --more-trials N extends it).

    Sizes, budget and level: the recipe's sweep section (--set sweep.selection_samples=N, ...).
    """
    grid_top_ks = None if top_ks is None else _floats("--top-k", top_ks)
    grid_scales = None if scales is None else _floats("--scale", scales)
    r = job.recipe(*([f"sweep.kl_budget={kl_budget!r}"] if kl_budget is not None else []))
    job.claim(out, r, "dir")  # a bad argument, recipe or --out answers before torch is imported
    echo = job.stages()
    from ..layout import OPTUNA_PNGS, SWEEP_CSV, SWEEP_JSON, SWEEP_PNG
    from ..runs.sweep.search import run_sweep

    result = run_sweep(
        r,
        out,
        top_ks=grid_top_ks,
        scales=grid_scales,
        overwrite=overwrite,
        progress=job.progress,
        echo=echo,
        more_trials=more_trials or 0,
    )
    folder, pngs = Path(out), [f for f in (SWEEP_PNG, *OPTUNA_PNGS) if (Path(out) / f).is_file()]
    if as_json:  # the sweep.json document as written (NaN-free), and where the files are
        import json

        files = [str(folder / f) for f in (SWEEP_CSV, SWEEP_JSON, *pngs) if (folder / f).is_file()]
        sweep_json = json.loads((folder / SWEEP_JSON).read_text(encoding="utf-8"))
        emit_json(dict(ok=True, out_dir=str(out), files=files, recommendation=result.recommendation, sweep=sweep_json))
        return
    click.echo(f"{result.to_text()}\n{result.recommendation}")
    click.echo(f"wrote {folder / SWEEP_CSV} (every column), {', '.join([SWEEP_JSON, *pngs])}")


@click.command()
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
@click.option("--overwrite", is_flag=True, help="replace an existing output folder once the new one is complete")
@recipe_command
def consistency(job: RecipeJob, out: str, sizes: str | None, repeats: int | None, overwrite: bool) -> None:
    """Mask overlap across random calibration subsets vs the full data (the paper's data-efficiency figure)."""
    shortcuts: list[str] = []  # the recipe keys --sizes and --repeats stand for
    if sizes is not None:
        counts = _floats("--sizes", sizes)
        if any(v < 1 or v != int(v) for v in counts):  # 1.5 is not a number of samples
            raise InputError(
                f"--sizes: {sizes!r}: each size is a number of calibration samples, an integer >= 1, e.g. 1,4,16"
            )
        shortcuts.append(f"consistency.sizes=[{','.join(str(int(v)) for v in counts)}]")
    if repeats is not None:
        shortcuts.append(f"consistency.repeats={repeats}")
    r = job.recipe(*shortcuts)
    job.claim(out, r, "dir")  # a bad argument, recipe or --out answers before torch is imported
    echo = job.stages()
    from ..runs.consistency import run_consistency

    rows = run_consistency(r, out, overwrite=overwrite, progress=job.progress, echo=echo)
    click.echo("samples  vs-full(mean)  vs-full(min)  between-draws")
    for r in rows:
        between = "-" if r.overlap_between_draws_mean is None else f"{r.overlap_between_draws_mean:.3f}"
        click.echo(
            f"{r.samples:>7}  {r.overlap_with_full_mean:>13.3f}  {r.overlap_with_full_min:>12.3f}  {between:>13}"
        )


@click.command()
@click.argument("model")
@click.option("--gguf-file", help="the .gguf file inside MODEL when MODEL is a Hub repo or a folder")
@click.option("--revision", help="Hub revision of MODEL")
@verbose_opt
def dequantize(model: str, gguf_file: str | None, revision: str | None, verbose: bool) -> None:
    """Dequantize a GGUF file once into a cached safetensors folder and print its path (docs/gguf.md)."""
    require_local(model, "MODEL")  # a mistyped path answers before torch is imported
    from ..weights.gguf_reader import dequantize_gguf, gguf_source

    stage_echo(False, verbose)  # the libraries' bars and load report only with --verbose

    click.echo(str(dequantize_gguf(gguf_source(model, gguf_file, revision)[0])))


@click.command()
@recipe_arg
@set_opt
@click.option(
    "--mask",
    "mask_file",
    type=click.Path(dir_okay=False),
    help="a saved mask of this base: its counts give the exact mask and adapter sizes and their commands' memory",
)
@json_opt
@verbose_opt
def plan(recipe: str | None, sets: tuple[str, ...], mask_file: str | None, as_json: bool, verbose: bool) -> None:
    """Estimate parameters, targets, file sizes and peak memory from config.json alone (no weights)."""
    from ..runs.plan import plan_recipe

    parsed = read_recipe(recipe, sets)  # a recipe error answers before huggingface_hub is imported
    stage_echo(False, verbose)  # a GGUF base dequantized on first use: transformers' bars only with --verbose
    result = plan_recipe(parsed, mask_file)
    if as_json:
        emit_json(result.to_dict())
    else:
        click.echo(result.to_text())
