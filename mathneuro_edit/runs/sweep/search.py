"""Sweeps that choose a setting on one set of problems and confirm it on another (issue 21).

One calibration, a mask per top_k derived from the saved statistics, each edit switched on with
:class:`~mathneuro_edit.engine.apply.ReversibleEdit` on one model and evaluated in memory. The math problems of
``evaluation.math`` are split in two disjoint sets (:func:`~.problems.sweep_problems`): every point and the base
are evaluated on the **selection** problems, and only the one candidate chosen there
(:func:`~.procedure.select_candidate`) and the base on the **confirmation** problems, with ONE paired exact McNemar
test (:func:`~.procedure.confirm`); a setting is recommended only when that test shows a gain. Why (the best of a
grid's uncorrected tests is "significant" in a quarter of sweeps where no edit does anything): docs/evaluation.md,
"Select, then confirm".

The files (``sweep.json``, ``sweep.csv``, ``sweep.png``): :mod:`.result`; the procedure itself (pure functions of the
counts): :mod:`.procedure`; from a confirmed sweep to a release: :mod:`.evidence`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ...engine.apply import check_scale
from ...engine.top_k_rule import top_k_hint
from ...errors import InputError
from ...layout import SWEEP_JSON, SWEEP_MARKER, SWEEP_PNG
from ...recipe.io import as_recipe
from ...recipe.schema import Recipe
from ...recipe.types import check_top_k
from ...weights.loading import model_weights
from ..official_mask import refuse_official
from ..steps.mask import recipe_masks
from .evaluator import _blocks
from .grid import _arms
from .procedure import halving_schedule, promote
from .result import SweepResult, _plot
from .stages import _is_regular, _opened, _Sweep

__all__ = ["run_sweep", "check_sweep_folder", "DEFAULT_TOP_KS", "DEFAULT_SCALES"]

DEFAULT_TOP_KS = (0.001, 0.01, 0.05, 0.1, 0.15)
DEFAULT_SCALES = (0.0, 1.05, 1.1, 1.2)


def check_sweep_folder(out: Path, overwrite: bool) -> None:
    """Refuse a sweep's ``--out`` that is a file, or a folder that holds anything and is not a sweep folder, unless
    ``overwrite``.

    A sweep folder holds :data:`~mathneuro_edit.layout.SWEEP_MARKER` (written when a sweep starts) or, from a
    sweep finished by an older version, ``sweep.json``; each must be a regular file. Why not a ``cache/`` folder
    or a ``stats/*.key.json`` file, as before: they are common names, and a sweep resumed into such a folder of
    the user's own wrote its cache and statistics there, replacing files of the same names (issue 41).
    """
    if out.exists() and not out.is_dir():
        raise InputError(f"{out}: is a file; choose a folder for --out")
    if not out.is_dir() or not any(out.iterdir()) or overwrite:
        return
    if not (_is_regular(out / SWEEP_MARKER) or _is_regular(out / SWEEP_JSON)):
        raise InputError(
            f"{out}: already exists and is not a sweep folder (no {SWEEP_MARKER} or {SWEEP_JSON} in it); choose "
            "another --out, or pass --overwrite to write the sweep into it (an unfinished sweep of an older "
            "version resumes that way)"
        )


def _grid_settings(
    recipe: Recipe, top_ks: Sequence[float] | None, scales: Sequence[float] | None
) -> tuple[list[float], list[float]]:
    """The grid's top_k and scale values (the arguments, else the recipe's ``sweep`` lists, else the defaults),
    checked before anything loads: a fraction in (0, 1] (the recipe's own rule), a valid scale, not only 1."""
    sw = recipe.sweep
    top_ks = list(top_ks if top_ks is not None else (sw.top_k or DEFAULT_TOP_KS))
    scales = list(scales if scales is not None else (sw.scale or DEFAULT_SCALES))
    for k in top_ks:
        try:
            check_top_k(k)
        except ValueError:  # the rule is the recipe's; the words name this command's option
            raise InputError(
                f"--top-k: {k:g} is not in (0, 1]{top_k_hint(k)}; pass fractions such as 0.01,0.05"
            ) from None
    scales = [check_scale(s) for s in scales]
    if not [(k, s) for k in top_ks for s in scales if s != 1.0]:  # scale 1.0 is the base itself
        raise InputError("--scale: only 1 (the base itself) was given; pass other scales, e.g. 1.05,1.1")
    return top_ks, scales


def _optuna(
    recipe: Recipe,
    out: Path,
    top_ks: list[float],
    scales: list[float],
    more_trials: int,
    progress: bool,
    echo: Callable[[str], None],
) -> SweepResult:
    """``sweep.search: optuna`` (:mod:`.optuna_search`, which imports Optuna: only for this search)."""
    if recipe.sweep.search != "optuna":
        raise InputError("--more-trials extends an Optuna search: set sweep.search: optuna (the grid has no trials)")
    if more_trials < 0:
        raise InputError(f"--more-trials: must be an integer >= 0, got {more_trials}")
    try:
        import optuna  # noqa: F401
    except ImportError:
        raise InputError(
            "sweep.search: optuna needs the optuna package (5.0 or later): pip install -e '.[search]' in a "
            "checkout, else pip install optuna"
        ) from None
    from .optuna_search import run_optuna_search

    return run_optuna_search(recipe, out, top_ks, scales, more_trials=more_trials, progress=progress, echo=echo)


def _masks(sweep: _Sweep, top_ks: list[float], scales: list[float]) -> Any:
    """Every arm's mask through the run's mask rule (one scoring pass per statistics group for all top_k);
    fills the grid's arms and returns the weights the masks were scored on (the controls use them too)."""
    run, grid = sweep.ctx.run, sweep.grid
    n = len(grid.variants)
    sweep.stages.start(
        f"masks for top_k={','.join(f'{k:g}' for k in top_ks)} ({run.recipe.mask.method}), "
        f"{n} variant{'s' if n > 1 else ''}"
    )
    weights = model_weights(run.model)
    group_masks = {
        g: recipe_masks(run.recipe, s, top_ks, weights, progress=run.progress) for g, s in sweep.stats.items()
    }
    grid.arms = _arms(run.model, grid.variants, group_masks, top_ks, scales)
    return weights


def _select(sweep: _Sweep) -> tuple[tuple[list[bool], dict[str, Any]], list[int], list[int]]:
    """The base, then every round of the selection (successive halving when ``sweep.first_round`` is set): each
    round's points on its problems (each arm's ``correct`` and ``round``); after the first, the best (within the KL
    budget) are promoted.

    Returns ``((the base's flags, the base's general result), the rounds' cuts, the finalists)``; each finalist's
    KL is known (the candidate must be within the KL budget)."""
    ctx, evaluator, grid, stages = sweep.ctx, sweep.evaluator, sweep.grid, sweep.stages
    sw, arms = ctx.run.recipe.sweep, grid.arms
    schedule = halving_schedule(len(arms), len(sweep.selection), sw.first_round, sw.eta)
    cuts = [end for _, end in schedule]
    base = sweep.base(cuts)
    stages.note(f"math {sum(base[0])}/{len(base[0])}; cache {ctx.cache.hits} reused, {ctx.cache.misses} computed")
    stages.start(
        f"select among {len(arms)} points in {len(schedule)} round{'s' if len(schedule) > 1 else ''} "
        f"({', '.join(f'{n} on {e}' for n, e in schedule)})"
    )

    def kl_of(i: int) -> float:  # computed (and cached) the first time the selection needs it
        arm = arms[i]
        if arm.general is None:
            ctx.echo(
                "      general KL of " + grid.variants[arm.variant].prefix + f"top_k={arm.top_k:g} "
                f"scale={arm.scale:g} on {len(evaluator.texts)} texts"
            )
            arm.general = evaluator.general(arm.mask, arm.scale)
        return float(arm.general["kl"])

    sizes = [a.mask.total()[0] * abs(a.scale - 1.0) for a in arms]  # promotion's tie-break: the smaller edit
    active = list(range(len(arms)))
    start = 0
    for r, (n_points, end) in enumerate(schedule):
        if r > 0:
            seen = [sum(arms[i].correct) if i in active else None for i in range(len(arms))]
            active = promote(seen, kl_of, sw.kl_budget, n_points, size=sizes)
        for j, i in enumerate(active):
            arm = arms[i]
            ctx.echo(
                f"      round {r + 1}/{len(schedule)}, point {j + 1}/{len(active)}: "
                + grid.variants[arm.variant].prefix
                + f"top_k={arm.top_k:g} scale={arm.scale:g} "
                f"(problems {start + 1}-{end})"
            )
            for a, b in _blocks(start, end, cuts):
                arm.correct += evaluator.math(sweep.selection[a:b], arm.mask, arm.scale)
            arm.round = r + 1
        start = end
    finalists = [i for i in range(len(arms)) if arms[i].round == len(schedule)]
    for i in finalists:  # the candidate must be within the KL budget
        kl_of(i)
    return base, cuts, finalists


def run_sweep(
    recipe: Recipe | str | Path,
    out_dir: str | Path,
    *,
    top_ks: Sequence[float] | None = None,
    scales: Sequence[float] | None = None,
    overwrite: bool = False,
    progress: bool = True,
    echo: Callable[[str], None] = lambda s: None,
    more_trials: int = 0,
) -> SweepResult:
    """Sweep a grid of edits with one model in memory: select (adaptively), then confirm on other problems, as the
    module docstring says; ``sweep.search: optuna`` searches an Optuna study instead (:mod:`.optuna_search`).

    The grid is ``variants x top_ks x scales``: the recipe itself and each ``sweep.variants`` entry (another
    calibration set or target restriction), each with every ``(top_k, scale)`` (default: ``sweep.top_k`` and
    ``sweep.scale``, else :data:`DEFAULT_TOP_KS` and :data:`DEFAULT_SCALES`; scale 1.0 is the base and is skipped).
    With ``sweep.first_round`` the selection is successive halving (:func:`~.procedure.halving_schedule`,
    :func:`~.procedure.promote`) and the candidate is chosen among the points that reached the last round.

    Resumable (:mod:`.cache`): the same command run again after a kill continues where it stopped and writes the
    same ``sweep.json`` as an uninterrupted run, once the sweep is complete. An existing
    ``out_dir`` must be a sweep folder unless ``overwrite`` (:func:`check_sweep_folder`); ``echo`` receives the
    stage lines and one line per evaluated point.
    """
    recipe = as_recipe(recipe)
    refuse_official(recipe, "sweep")  # its masks come from float32 statistics
    if recipe.evaluation is None:
        raise InputError("sweep needs an evaluation section in the recipe (see docs/recipes.md)")
    top_ks, scales = _grid_settings(recipe, top_ks, scales)
    check_sweep_folder(out := Path(out_dir), overwrite)
    if recipe.sweep.search == "optuna" or more_trials:
        return _optuna(recipe, out, top_ks, scales, more_trials, progress, echo)
    with _opened(recipe, out, progress, echo) as sweep:
        weights = _masks(sweep, top_ks, scales)
        base, cuts, finalists = _select(sweep)
        result = sweep.finish(base, cuts, finalists, weights)
        _plot(result, out / SWEEP_PNG)
    return result
