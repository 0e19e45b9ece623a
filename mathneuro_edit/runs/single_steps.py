"""Single stages of a recipe as whole jobs: what ``calibrate``, ``mask`` and ``eval`` run from the command line,
each the steps of :mod:`.steps` (as :func:`~mathneuro_edit.runs.pipeline.run_recipe` composes them for a whole run)
and its output written."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

from ..engine.mask import Mask
from ..errors import InputError
from ..evaluation.results import EvalResults
from ..recipe.schema import Recipe
from ..util.console import Stages
from ..util.outdir import atomic_dir, claim
from .official_mask import refuse_official
from .steps.count import stage_count
from .steps.evaluate import eval_tasks, evaluate_step
from .steps.mask import Statistics, calibrate_step, checkpoint_weights, load_step, mask_step
from .steps.record import RunRecord

__all__ = ["calibrate_to_folder", "mask_from_stats", "evaluate_recipe", "MaskSummary"]

Echo = Callable[[str], None]


def calibrate_to_folder(
    recipe: Recipe,
    out: str | Path,
    *,
    inputs: Sequence[tuple[str, str | Path | None]] = (),
    progress: bool = True,
    echo: Echo = print,
    rank_zero: bool = True,
) -> list[Path]:
    """Calibrate the recipe's math set and each general set; write ``OUT/math.stats.safetensors`` and
    ``OUT/general-<i>.stats.safetensors``, and return them (``[]`` on a data-parallel rank other than 0).

    Rank 0 claims ``out`` before the forward passes (a second run into it fails now, not after) and writes the
    folder as a whole: a re-calibration with fewer general sets leaves no stale ``general-N`` behind. An existing
    folder that holds anything but statistics files is refused (replacing it would delete them).

    Args:
        inputs: ``(what, path)`` of every input, which the output may not be, contain or lie inside.
        rank_zero: whether this process is rank 0 (under ``torchrun`` only rank 0 prints and writes).
    """
    folder = Path(out)
    _only_statistics(folder)
    with atomic_dir(folder, overwrite=True, inputs=inputs) if rank_zero else nullcontext() as tmp:
        stages = Stages(stage_count(recipe, ("load", "calibrate")), echo if rank_zero else (lambda s: None))
        run = RunRecord(recipe, stages, progress)
        load_step(run)
        calibrate_step(run)
        if run.stats.math is None or tmp is None:
            return []
        written = run.stats.save(tmp)
    return [folder / p.name for p in written]


def _only_statistics(folder: Path) -> None:
    """Refuse to replace an existing ``calibrate --out`` folder that holds anything but statistics files."""
    if not folder.is_dir():
        return
    other = sorted(p.name for p in folder.iterdir() if not p.name.endswith(".stats.safetensors"))
    if other:
        raise InputError(
            f"--out: {folder} holds other files than statistics ({', '.join(other[:3])}"
            f"{', ...' if len(other) > 3 else ''}), which replacing it would delete; choose a new or "
            "empty folder"
        )


@dataclass(frozen=True)
class MaskSummary:
    """What :func:`mask_from_stats` wrote: the file, the selected and scored weight counts, the mask's sha256."""

    path: Path
    selected: int
    total: int
    sha256: str


def mask_from_stats(
    recipe: Recipe, stats_dir: str | Path, out: str | Path, *, progress: bool = True, echo: Echo = print
) -> MaskSummary:
    """Derive the recipe's mask (method, top_k, granularity, seed) from saved statistics, without a forward pass.

    The model is not loaded: each scored weight is read from the base's files when the mask needs it
    (MathNeuro's score is ``|W| x`` the statistics), so the memory is about one matrix, not the model.
    """
    refuse_official(recipe, "mask")  # the official selection is not a function of the statistics
    stats = Statistics.load(Path(stats_dir))
    with claim(out):  # one run per --out: a second one fails naming this one
        run = RunRecord(recipe, Stages(stage_count(recipe, ("mask",)), echo), progress, stats=stats)
        mask_step(run, weights=checkpoint_weights(recipe, stats))
        run.mask.save(out)
    selected, total = run.mask.total()
    return MaskSummary(Path(out), selected, total, run.mask.sha256)


def evaluate_recipe(
    recipe: Recipe,
    mask_path: str | Path | None = None,
    out: str | Path | None = None,
    *,
    progress: bool = True,
    echo: Echo = print,
) -> EvalResults:
    """Evaluate the recipe's tasks (its ``evaluation`` section) on the base, and with ``mask_path`` on base and
    edited at the recipe's scale (paired, with KL); ``out``: write the results there as JSON (a file, or a
    folder for ``eval.json``; lm-eval's own results files beside it)."""
    tasks = eval_tasks(recipe)  # an unknown lm-eval task is named before the model loads
    if not tasks:
        raise InputError("the recipe has no evaluation section; add one (see docs/recipes.md)")
    with claim(out) if out else nullcontext():  # one run per output file
        stages = Stages(stage_count(recipe, ("load", "evaluate"), tasks=tasks), echo)
        run = RunRecord(recipe, stages, progress, tasks=tasks, mask=Mask.load(mask_path) if mask_path else None)
        load_step(run)
        results = evaluate_step(run)
        if out:
            results.save_json(out)
            results.save_lm_eval(Path(out).parent)  # lm-eval's own results files beside it
    return results
