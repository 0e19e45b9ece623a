"""The stages every sweep shares, whichever search chose its points (the grid, :mod:`.search`, or Optuna,
:mod:`.optuna_search`): the inputs, the sweep folder and its cache, the base, the one candidate (the grid's rule;
its confirmation: :func:`~.confirmation._confirm`) and the :class:`~.result.SweepResult` and its files."""

from __future__ import annotations

import json
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...data.sources import load_set, problem_sha256
from ...evaluation.significance import wilson_interval
from ...layout import SWEEP_CSV, SWEEP_JSON, SWEEP_MARKER
from ...recipe.schema import Recipe, recipe_sha256
from ...util.console import Stages
from ...util.files import write_json_atomic, write_text_atomic
from .cache import ResultCache
from .confirmation import _Candidate
from .evaluator import _blocks, _Evaluator, _general_result
from .grid import _Arm, _Grid, _variants
from .problems import sweep_problems
from .procedure import Confirmation, SweepPoint, pareto_front, recommend, select_candidate
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


def _inputs(recipe: Recipe, echo: Callable[[str], None]) -> tuple[_Grid, list[Any], list[Any], list[Any], list[str]]:
    """``(grid, worked examples, selection problems, confirmation problems, general texts)``, read before the
    model loads (a bad source fails before calibration); the grid's arms are made once the masks are."""
    ev, sw = recipe.evaluation, recipe.sweep
    assert ev is not None
    grid = _Grid(_variants(recipe), [])
    shots, selection, confirmation = sweep_problems(recipe)
    texts, _ = load_set(ev.general, sw.general_samples or ev.samples, ev.seed)
    if ev.lm_eval is not None:
        echo("      evaluation.lm_eval is not run by a sweep (run it on the release)")
    return grid, shots, selection, confirmation, texts


def _base_stage(
    evaluator: _Evaluator, selection: list[dict[str, Any]], cuts: list[int], stages: Stages
) -> tuple[list[bool], dict[str, Any]]:
    """The base's flags on the selection problems (in the same blocks as the points') and its general result."""
    stages.start(f"the base on {len(selection)} selection problems and {len(evaluator.texts)} general texts")
    base_sel: list[bool] = []
    for a, b in _blocks(0, len(selection), cuts):
        base_sel += evaluator.math(selection[a:b])
    return base_sel, evaluator.base_general()


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


def _write(out: Path, result: SweepResult) -> None:
    """``sweep.csv`` and ``sweep.json`` (strict JSON: no NaN), each written atomically; the plots are the search's."""
    write_text_atomic(out / SWEEP_CSV, result.to_csv())
    write_text_atomic(out / SWEEP_JSON, json.dumps(_strict(result.to_dict()), indent=2, allow_nan=False) + "\n")


def _candidate(
    grid: _Grid, points: list[SweepPoint], finalists: list[int], base_correct: int, kl_budget: float
) -> _Candidate | None:
    """The one setting to confirm: the largest selection gain among the finalists within ``sweep.kl_budget``
    (:func:`~.procedure.select_candidate`), or ``None`` when no finalist gains."""
    pick = select_candidate([points[i] for i in finalists], base_correct, kl_budget)
    if pick is None:
        return None
    index = finalists[pick]
    arm = grid.arms[index]
    return _Candidate(index, arm, points[index], grid.variants[arm.variant])


def _result(
    recipe: Recipe,
    grid: _Grid,
    points: list[SweepPoint],
    base: tuple[list[bool], dict[str, Any]],
    chosen: tuple[int | None, Confirmation | None],
    selection: list[dict[str, Any]],
    rounds: list[dict[str, Any]],
    n_texts: int,
) -> SweepResult:
    """The :class:`SweepResult`: the base's row, every point, the Pareto front, the recommendation and the
    confirmation (``base``: the base's selection flags and general result; ``chosen``: candidate, confirmation)."""
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
        n_texts,
        recipe.public_dict(),
        recipe_sha256(recipe),
        rounds=rounds,
        variants=[{"name": v.name, "set": list(v.overrides)} for v in grid.variants],
        general_tail_mass=[(a.general or {}).get("tail_mass") for a in grid.arms],
    )
