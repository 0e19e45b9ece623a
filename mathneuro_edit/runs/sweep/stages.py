"""The stages every sweep shares, whichever search chose its points (the grid, :mod:`.search`, or Optuna,
:mod:`.optuna_search`): the inputs, the sweep folder and its cache, the model and its statistics, the base, the one
candidate (the grid's rule; its confirmation: :func:`~.confirmation._confirm`) and the :class:`~.result.SweepResult`
and its files."""

from __future__ import annotations

import json
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from ...data.sources import load_set, problem_sha256
from ...evaluation.significance import wilson_interval
from ...layout import STATS_DIR, SWEEP_CSV, SWEEP_JSON, SWEEP_MARKER
from ...recipe.schema import Recipe, recipe_sha256
from ...util.console import Stages
from ...util.files import write_json_atomic, write_text_atomic
from ...util.outdir import claim
from ..steps.count import stage_count
from ..steps.export import base_identity
from ..steps.mask import Statistics, load_step
from ..steps.record import RunRecord
from .cache import ResultCache
from .calibration import _group_statistics, _set_count
from .confirmation import _Candidate, _confirm
from .evaluator import _blocks, _Context, _Evaluator, _general_result, model_weights_sha256
from .grid import _Arm, _Grid, _sweep_point, _variants
from .problems import sweep_problems
from .procedure import Confirmation, SweepPoint, pareto_front, recommend, select_candidate, with_holm
from .result import SweepResult, _strict


def _is_regular(path: Path) -> bool:
    """Whether ``path`` is a regular file itself (a symbolic link to one, a folder or a FIFO is not)."""
    try:
        return stat.S_ISREG(path.lstat().st_mode)
    except OSError:
        return False


def _open_folder(out: Path) -> ResultCache:
    """The sweep folder, marked as a sweep's first (a kill during the load or calibration still resumes), and its
    result cache with any temporary file of a killed write removed."""
    out.mkdir(parents=True, exist_ok=True)
    if not _is_regular(out / SWEEP_MARKER):
        write_json_atomic(out / SWEEP_MARKER, {"format": "mathneuro-edit sweep folder", "version": 1})
    cache = ResultCache(out)
    cache.folder.mkdir(exist_ok=True)
    cache.clean_temporary()
    return cache


@dataclass
class _Sweep:
    """One sweep in progress (:func:`_opened`): its recipe and folder, the grid (its arms are made once the masks
    are), the worked examples, the selection and confirmation problems, the general texts, the stage printer, the
    sweep's context, the base's identity and each statistics group's statistics."""

    recipe: Recipe
    out: Path
    grid: _Grid
    shots: list[Any]
    selection: list[Any]
    confirmation: list[Any]
    texts: list[str]
    stages: Stages
    ctx: _Context
    identity: dict[str, Any]
    stats: dict[int, Statistics]

    @cached_property
    def evaluator(self) -> _Evaluator:
        """Made on first use, once the masks are (it resolves the prompt settings, which may refuse them)."""
        return _Evaluator(self.ctx, self.shots, self.texts)

    def base(self, cuts: list[int]) -> tuple[list[bool], dict[str, Any]]:
        """The base's flags on the selection problems (in the same blocks as the points') and its general result."""
        ev, selection = self.evaluator, self.selection
        self.stages.start(f"the base on {len(selection)} selection problems and {len(ev.texts)} general texts")
        base_sel: list[bool] = []
        for a, b in _blocks(0, len(selection), cuts):
            base_sel += ev.math(selection[a:b])
        return base_sel, ev.base_general()

    def finish(
        self,
        base: tuple[list[bool], dict[str, Any]],
        cuts: list[int],
        finalists: list[int],
        weights: Any,
        search: dict[str, Any] | None = None,
    ) -> SweepResult:
        """Every arm's point, the one candidate (the largest selection gain among the ``finalists`` within
        ``sweep.kl_budget``: :func:`~.procedure.select_candidate`; none when no finalist gains), its confirmation (controls made from its
        statistics group and the ``weights`` the masks were scored on) and the :class:`SweepResult` (``base``: the
        base's selection flags and general result; ``search``: an Optuna search's record), written to ``sweep.csv``
        and ``sweep.json`` (strict JSON: no NaN), each atomically; the plots are the search's."""
        grid = self.grid
        points = with_holm([_sweep_point(a, grid.variants[a.variant].name, *base) for a in grid.arms])
        pick = select_candidate([points[i] for i in finalists], sum(base[0]), self.recipe.sweep.kl_budget)
        chosen = None
        if pick is not None:
            arm = grid.arms[finalists[pick]]
            chosen = _Candidate(finalists[pick], arm, points[finalists[pick]], grid.variants[arm.variant])
        scored = None if chosen is None else (self.stats[chosen.variant.group], weights)
        confirmation = _confirm(self.ctx, self.evaluator, chosen, scored, self.confirmation, self.shots, self.stages)
        result = _result(self, points, base, (None if chosen is None else chosen.index, confirmation), cuts, search)
        write_text_atomic(self.out / SWEEP_CSV, result.to_csv())
        write_text_atomic(
            self.out / SWEEP_JSON, json.dumps(_strict(result.to_dict()), indent=2, allow_nan=False) + "\n"
        )
        return result


@contextmanager
def _opened(recipe: Recipe, out: Path, progress: bool, echo: Callable[[str], None]) -> Iterator[_Sweep]:
    """The sweep folder claimed and opened, the model loaded and each statistics group calibrated; the inputs are
    read before the model loads (a bad source fails before calibration). The cache's counts end the sweep."""
    ev, sw = recipe.evaluation, recipe.sweep
    assert ev is not None
    grid = _Grid(_variants(recipe), [])
    shots, selection, confirmation = sweep_problems(recipe)
    texts, _ = load_set(ev.general, sw.general_samples or ev.samples, ev.seed)
    if ev.lm_eval is not None:
        echo("      evaluation.lm_eval is not run by a sweep (run it on the release)")
    # the run's load and mask steps, one calibration line per distinct set, then base, select and confirm
    stages = Stages(stage_count(recipe, ("load", "mask")) + _set_count(grid.variants) + 3, echo)
    with claim(out):
        cache = _open_folder(out)
        run = RunRecord(recipe, stages, progress)
        load_step(run)
        identity = base_identity(recipe.base)  # what a release from this sweep must be (run --from-sweep)
        ctx = _Context(run, model_weights_sha256(run.model), cache, echo)
        stats = _group_statistics(ctx, grid.variants, out / STATS_DIR, stages)
        yield _Sweep(recipe, out, grid, shots, selection, confirmation, texts, stages, ctx, identity, stats)
        stages.note(f"cache: {cache.hits} blocks reused, {cache.misses} computed")


def _rounds(arms: list[_Arm], cuts: list[int]) -> list[dict[str, Any]]:
    """The ``rounds`` record of ``sweep.json``: per cut, its problems, the points (or trials) that reached it and
    their counts on every problem seen by then."""
    out, start = [], 0
    for r, end in enumerate(cuts):
        reached = [i for i, a in enumerate(arms) if a.round > r]
        correct = [sum(arms[i].correct[:end]) for i in reached]
        out.append({"round": r + 1, "problems": [start, end], "points": reached, "correct": correct})
        start = end
    return out


def _result(
    sweep: _Sweep,
    points: list[SweepPoint],
    base: tuple[list[bool], dict[str, Any]],
    chosen: tuple[int | None, Confirmation | None],
    cuts: list[int],
    search: dict[str, Any] | None,
) -> SweepResult:
    """The :class:`SweepResult`: the base's row, every point, the Pareto front, the recommendation and the
    confirmation (``chosen``: candidate, confirmation)."""
    recipe, grid, selection = sweep.recipe, sweep.grid, sweep.selection
    sw = recipe.sweep
    base_sel, base_general = base
    candidate, confirmation = chosen
    base_correct = sum(base_sel)
    best, text = recommend(points, base_correct, len(selection), candidate, confirmation, sw.kl_budget)
    n, (lo, hi) = len(base_sel), wilson_interval(base_correct, len(base_sel))
    base_row = {"math_correct": base_correct, "math_total": n, "math_accuracy": base_correct / n}
    base_row.update(math_ci95_low=lo, math_ci95_high=hi)
    bg = _general_result(base_general["loss_sums"], base_general["tokens"])
    return SweepResult(
        base_row["math_accuracy"],
        bg.loss,
        points,
        pareto_front(points),
        text,
        best,
        base_row,
        bg.loss_se,
        [problem_sha256(q) for q in selection],
        confirmation,
        candidate,
        sw.kl_budget,
        sw.alpha,
        len(sweep.texts),
        recipe.public_dict(),
        recipe_sha256(recipe),
        rounds=_rounds(grid.arms, cuts),
        variants=[{"name": v.name, "set": list(v.overrides)} for v in grid.variants],
        general_tail_mass=[(a.general or {}).get("tail_mass") for a in grid.arms],
        base_identity=sweep.identity,
        search=search or {},
    )
