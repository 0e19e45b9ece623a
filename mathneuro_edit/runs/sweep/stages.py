"""The stages every sweep shares, whichever search chose its points (the grid, :mod:`.search`, or Optuna,
:mod:`.optuna_search`): the sweep folder and its cache, the one candidate (the grid's rule), its confirmation
stage (:mod:`.confirmation`, unchanged) and the :class:`~.result.SweepResult`."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

from ...data.sources import problem_sha256
from ...engine.edit_map import show_setting
from ...evaluation.significance import wilson_interval
from ...layout import SWEEP_MARKER
from ...recipe.schema import Recipe, recipe_sha256
from ...util.console import Stages
from ...util.files import write_json_atomic
from ..steps.mask import Statistics
from .cache import ResultCache
from .confirmation import _Candidate, _confirm, _control_masks
from .evaluator import _Context, _Evaluator, _general_result
from .grid import _Grid
from .procedure import Confirmation, SweepPoint, pareto_front, recommend, select_candidate
from .result import SweepResult


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


def _confirm_stage(
    ctx: _Context,
    evaluator: _Evaluator,
    chosen: _Candidate | None,
    scored: tuple[Statistics, Any] | None,
    problems: tuple[list[dict[str, Any]], list[dict[str, Any]]],
    stages: Stages,
) -> Confirmation | None:
    """The confirmation stage: the candidate and two control edits (made from its statistics group and the weights
    it was scored on, ``scored``) against the base on the confirmation problems (``problems``: those and the
    worked examples); a line saying that nothing is tested when there is no candidate."""
    if chosen is None or scored is None:
        stages.start("confirm: no candidate (no finalist gains within the KL budget); nothing is tested")
        return None
    confirmation_problems, shots = problems
    stages.start(
        f"confirm {chosen.variant.prefix}top_k={show_setting(chosen.point.top_k)} "
        f"scale={show_setting(chosen.point.scale)} on {len(confirmation_problems)} other problems, against the base and two "
        "control edits"
    )
    controls = _control_masks(ctx.run.recipe, scored[1], scored[0], chosen)
    return _confirm(ctx, evaluator, chosen, controls, confirmation_problems, shots)


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
    base_row = {
        "math_correct": base_correct,
        "math_total": len(base_sel),
        "math_accuracy": base_correct / len(base_sel),
    }
    lo, hi = wilson_interval(base_correct, len(base_sel))
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
