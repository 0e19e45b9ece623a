"""``sweep.search: optuna``: a search over edits with structure, confirmed the way the grid's choice is (issue 50).

Where the grid tries one top_k and one scale for every matrix, this search gives each layer band's attention and
MLP its own scale and each component its own top_k (:mod:`~mathneuro_edit.engine.edit_map`), and lets Optuna's
TPE sampler choose the trials (one study, stored in ``DIR/optuna.sqlite3``):

- every trial is evaluated on the **selection** problems only, block by block through the sweep's result cache
  (:class:`~.evaluator._Evaluator`); its value is its math gain over the base there, and its general KL within
  ``sweep.kl_budget`` is the sampler's constraint;
- with ``sweep.first_round`` a trial stops early at the grid's successive-halving cuts when its gain so far is not
  among the best ``1/eta`` of the finished trials' at that cut (:class:`_Halving`, an Optuna pruner; the rule:
  :func:`promoted`);
- the same seed gives the same trials: the sampler is seeded by ``sweep.search_seed`` and the number of finished
  trials, so a search killed in a trial and run again draws exactly the trials an uninterrupted one draws (the cut
  trial is marked failed and ignored); ``--more-trials N`` raises the study's budget by N (:func:`study_target`);
- the one candidate is chosen by the grid's rule (:func:`~.procedure.select_candidate`) among the trials that saw
  every selection problem, and goes through the grid's confirmation unchanged (:func:`~.confirmation._confirm`:
  held-out problems, the base, the controls of the same shape, every prompt format, the stored weights).

Optuna is imported by this module only, which :func:`~.search.run_sweep` imports only for this search.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from ...data.sources import problem_sha256
from ...engine.edit_map import COMPONENTS, matrix_place, show_setting
from ...errors import InputError
from ...layout import OPTUNA_PNGS, OPTUNA_STUDY
from ...recipe.schema import Recipe
from ...weights.loading import model_weights
from ..inspect import pyplot, save_figure
from ..steps.mask import compose_masks, recipe_masks
from .cache import key_sha256
from .evaluator import _blocks, _Context, _Evaluator
from .grid import _Arm
from .procedure import halving_schedule, pareto_front
from .result import SweepResult
from .stages import _opened

__all__ = ["run_optuna_search", "SearchSpace", "band_edges", "promoted", "study_target", "STUDY_NAME"]

STUDY_NAME = "mathneuro-edit sweep"
_FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)


def band_edges(n_layers: int, bands: int) -> list[tuple[int, int]]:
    """``bands`` contiguous layer bands of near-equal size (inclusive ends), at most one per layer.

    Example:
        >>> band_edges(30, 2), band_edges(4, 3), band_edges(2, 5)
        ([(0, 14), (15, 29)], [(0, 0), (1, 1), (2, 3)], [(0, 0), (1, 1)])
    """
    b = max(1, min(bands, n_layers))
    return [(i * n_layers // b, (i + 1) * n_layers // b - 1) for i in range(b)]


def promoted(value: float, others: Sequence[float], eta: int) -> bool:
    """Whether a trial whose gain at a cut is ``value`` goes on, among the finished trials' gains at that cut
    (``others``): with fewer than ``eta`` of them it goes on (too few to rank); else it must be among the best
    ``ceil(n / eta)`` of all ``n`` (ties go on), as the grid's successive halving keeps ``ceil(points / eta)`` of a
    round (:func:`~mathneuro_edit.runs.sweep.procedure.halving_schedule`).

    Example:
        >>> promoted(0.0, [0.1], 3), promoted(0.05, [0.1, 0.0, -0.1], 3), promoted(-0.05, [0.1, 0.0, -0.1], 3)
        (True, True, False)
    """
    if len(others) < eta:
        return True
    ranked = sorted([*others, value], reverse=True)
    return value >= ranked[-(-len(ranked) // eta) - 1]


def study_target(stored: int | None, configured: int, more: int) -> int:
    """The number of finished trials a search runs to: the larger of the study's recorded budget and
    ``sweep.trials``, plus ``--more-trials``. The result is recorded in the study, so the same command without
    ``--more-trials`` continues a killed extension instead of stopping short.

    Example:
        >>> study_target(None, 40, 0), study_target(40, 40, 20), study_target(60, 40, 0)
        (40, 60, 60)
    """
    return max(stored or 0, configured) + more


@dataclass(frozen=True)
class SearchSpace:
    """What a trial chooses: a top_k per component (from ``top_ks``) and a scale per layer band and component in
    ``[low, high]`` (steps of 0.01); :meth:`maps` turns its parameters into the recipe's two maps."""

    top_ks: tuple[float, ...]
    low: float
    high: float
    bands: tuple[tuple[int, int], ...]
    components: tuple[str, ...]

    def suggest(self, trial: Any) -> tuple[dict[str, float], dict[str, float]]:
        """The trial's ``(top_k map, scale map)``, drawn through Optuna."""
        for c in self.components:
            trial.suggest_categorical(f"top_k {c}", list(self.top_ks))
        for a, b in self.bands:
            for c in self.components:
                trial.suggest_float(f"scale layers {a}-{b} {c}", self.low, self.high, step=0.01)
        return self.maps(trial.params)

    def maps(self, params: Mapping[str, Any]) -> tuple[dict[str, float], dict[str, float]]:
        """``(top_k map, scale map)`` of a trial's parameters: the first component's top_k is the default; every
        other matrix (in neither component) keeps its weights (scale 1).

        Example:
            >>> s = SearchSpace((0.01, 0.05), 0.0, 1.2, ((0, 1),), ("attention", "mlp"))
            >>> s.maps({"top_k attention": 0.05, "top_k mlp": 0.01, "scale layers 0-1 attention": 1.1,
            ...         "scale layers 0-1 mlp": 0.9000000000000001})
            ({'default': 0.05, 'mlp': 0.01}, {'default': 1.0, 'layers 0-1 attention': 1.1, 'layers 0-1 mlp': 0.9})
        """
        first, *rest = self.components
        top_k = {"default": float(params[f"top_k {first}"]), **{c: float(params[f"top_k {c}"]) for c in rest}}
        scale = {"default": 1.0}
        for a, b in self.bands:
            for c in self.components:
                scale[f"layers {a}-{b} {c}"] = round(float(params[f"scale layers {a}-{b} {c}"]), 2)
        return top_k, scale


def search_space(recipe: Recipe, names: Sequence[str], top_ks: Sequence[float], scales: Sequence[float]) -> SearchSpace:
    """The space over the scored matrices ``names``: their layers cut in ``sweep.bands`` bands, their components
    (attention, MLP), the grid's top_k values and the range of its scales (refused: no scored matrix in a layer's
    component, or one scale only)."""
    places = [matrix_place(n) for n in names]
    components = tuple(c for c in COMPONENTS if any(p[1] == c for p in places))
    layers = [p[0] for p in places if p[0] is not None and p[1] is not None]
    if not components or not layers:
        raise InputError(
            "sweep.search: optuna gives each layer band's attention and MLP a scale, but no scored matrix is in a "
            f"layer's attention or MLP (named like {names[0]!r}); use sweep.search: grid"
        )
    if min(scales) == max(scales):
        raise InputError(f"sweep.scale: optuna searches between its smallest and largest, got one value {scales[0]:g}")
    bands = band_edges(max(layers) + 1, recipe.sweep.bands)
    return SearchSpace(tuple(sorted(set(top_ks))), min(scales), max(scales), tuple(bands), components)


class _Halving(optuna.pruners.BasePruner):
    """Successive halving as an Optuna pruner: at each of ``cuts`` a trial goes on when :func:`promoted` says so,
    among the *finished* trials' gains at that cut (a trial cut off by a kill has no say: resumption stays exact)."""

    def __init__(self, cuts: Sequence[int], eta: int) -> None:
        self.cuts, self.eta = set(cuts), eta

    def prune(self, study: Any, trial: Any) -> bool:
        step = trial.last_step
        if step is None or step not in self.cuts:
            return False
        others = [
            t.intermediate_values[step]
            for t in study.get_trials(deepcopy=False, states=_FINISHED)
            if step in t.intermediate_values
        ]
        return not promoted(trial.intermediate_values[step], others, self.eta)


def _sampler(seed: int, finished: int) -> Any:
    """TPE seeded by the search's seed and the number of finished trials (the same trials after a resume)."""
    # the KL budget reaches TPE as each trial's constraint (Trial.set_constraint, Optuna >= 5)
    return optuna.samplers.TPESampler(seed=seed * 1_000_003 + finished)


def _open_study(out: Path, seed: int, space: SearchSpace, pruner: _Halving, measures: str) -> Any:
    """The folder's study (created on first use; its seed, space and ``measures`` recorded); trials left running
    by a killed search are marked failed.

    ``measures``: the sha256 of what a trial's values depend on besides its parameters (:func:`_measures`). Why
    recorded: the grid's results are cached by content, but a study keeps each trial's values as numbers; a study
    resumed over other problems, another model or prompt would mix values of two searches; a study drawn with
    another seed or over another space is refused too.
    """
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = optuna.storages.RDBStorage(f"sqlite:///{(out / OPTUNA_STUDY).resolve()}")
    study = optuna.create_study(
        storage=storage,
        study_name=STUDY_NAME,
        direction="maximize",
        sampler=_sampler(seed, 0),
        pruner=pruner,
        load_if_exists=True,
    )
    own = {"seed": seed, "space": json.loads(json.dumps(space.__dict__)), "measures": measures}
    for key, value in own.items():
        recorded = study.user_attrs.get(key)
        if recorded is None:
            study.set_user_attr(key, value)
        elif recorded != value and key == "measures":
            raise InputError(
                f"{out / OPTUNA_STUDY}: its trials were measured by another search (the model, its calibration, "
                "the selection problems, the prompt, the general texts or the halving cuts differ); choose another "
                "--out for this one"
            )
        elif recorded != value:
            raise InputError(
                f"{out / OPTUNA_STUDY}: its trials were drawn with {key} {recorded}, this recipe's is {value}; "
                "choose another --out for another search (or restore the recipe's sweep settings)"
            )
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING, TrialState.WAITING)):
        study.tell(t.number, state=TrialState.FAIL, skip_if_finished=True)
    return study


@dataclass
class _Search:
    """What every trial shares: the sweep's context and evaluator, the space, the masks of every top_k value, the
    selection problems, the base's flags on them and the halving cuts."""

    ctx: _Context
    evaluator: _Evaluator
    space: SearchSpace
    by_value: dict[float, Any]
    selection: list[dict[str, Any]]
    base_sel: list[bool]
    cuts: list[int]

    def objective(self, trial: Any) -> float:
        """One trial: its maps, the selection problems cut by cut (reported; pruned when poor), then its KL."""
        top_k, scale = self.space.suggest(trial)
        mask = compose_masks(top_k, self.by_value)
        budget = self.ctx.run.recipe.sweep.kl_budget
        self.ctx.echo(f"      trial {trial.number}: top_k {show_setting(top_k)}; scale {show_setting(scale)}")
        correct: list[bool] = []
        start = 0
        for end in self.cuts:
            for a, b in _blocks(start, end, self.cuts):
                correct += self.evaluator.math(self.selection[a:b], mask, scale)
            start = end
            trial.set_user_attr("correct", "".join("1" if c else "0" for c in correct))
            gain = (sum(correct) - sum(self.base_sel[:end])) / end
            if end < len(self.selection):
                trial.report(gain, end)
                if trial.should_prune():
                    raise optuna.TrialPruned()
        kl = float(self.evaluator.general(mask, scale)["kl"])
        trial.set_user_attr("kl", kl)
        trial.set_constraint("general KL over sweep.kl_budget", kl - budget)  # feasible when <= 0
        return gain

    def run(self, study: Any, target: int, seed: int) -> None:
        """Trials until ``target`` have finished (completed or pruned), one at a time, each with its seed."""
        while True:
            finished = len(study.get_trials(deepcopy=False, states=_FINISHED))
            if finished >= target:
                return
            study.sampler = _sampler(seed, finished)
            study.optimize(self.objective, n_trials=1)

    def arm(self, trial: Any) -> tuple[_Arm, bool]:
        """A finished trial as the grid's arm (its maps, mask, flags, general result; round: cuts reached) and
        whether it saw every selection problem."""
        top_k, scale = self.space.maps(trial.params)
        mask = compose_masks(top_k, self.by_value)
        correct = [c == "1" for c in trial.user_attrs.get("correct", "")]
        done = trial.state == TrialState.COMPLETE
        general = self.evaluator.general(mask, scale) if done else None  # cached by the trial
        reached = sum(1 for c in self.cuts if c <= len(correct))
        return _Arm(0, top_k, scale, mask, correct, general, reached), done  # type: ignore[arg-type]


def run_optuna_search(
    recipe: Recipe,
    out: Path,
    top_ks: list[float],
    scales: list[float],
    *,
    more_trials: int = 0,
    progress: bool = True,
    echo: Callable[[str], None] = lambda s: None,
) -> SweepResult:
    """The search of ``sweep.search: optuna`` into the sweep folder ``out`` (checked by the caller,
    :func:`~.search.run_sweep`): load, calibrate, one mask per top_k value, the base, the trials (resumed from
    the folder's study), then the candidate's confirmation; writes ``sweep.json``, ``sweep.csv`` and the plots."""
    if recipe.sweep.variants:  # before anything loads
        raise InputError(
            "sweep.search: optuna searches the recipe's own calibration and targets; drop sweep.variants "
            "(or use sweep.search: grid)"
        )
    sw = recipe.sweep
    with _opened(recipe, out, progress, echo) as sweep:
        stats = sweep.stats[0]
        sweep.stages.start(f"masks for top_k={','.join(f'{k:g}' for k in top_ks)} ({recipe.mask.method})")
        weights = model_weights(sweep.ctx.run.model)
        by_value = dict(zip(top_ks, recipe_masks(recipe, stats, top_ks, weights, progress=progress)))
        space = search_space(recipe, list(next(iter(by_value.values()))), top_ks, scales)
        cuts = [end for _, end in halving_schedule(1 << 30, len(sweep.selection), sw.first_round, sw.eta)]
        base = sweep.base(cuts)
        search = _Search(sweep.ctx, sweep.evaluator, space, by_value, sweep.selection, base[0], cuts)
        measures = _measures(sweep.evaluator, by_value, sweep.selection, cuts)
        study = _open_study(out, sw.search_seed, space, _Halving(cuts[:-1], sw.eta), measures)
        target = study_target(study.user_attrs.get("target_trials"), sw.trials, more_trials)
        study.set_user_attr("target_trials", target)
        sweep.stages.start(_search_line(space, target, study, cuts))
        search.run(study, target, sw.search_seed)
        trials = sorted(study.get_trials(deepcopy=False, states=_FINISHED), key=lambda t: t.number)
        arms = [search.arm(t) for t in trials]
        sweep.grid.arms = [a for a, _ in arms]
        finalists = [i for i, (_, done) in enumerate(arms) if done]
        record = _search_record(study, space, trials, target)
        result = sweep.finish(base, cuts, finalists, weights, record)
        _plots(out, result, study)
    return result


def _measures(evaluator: _Evaluator, by_value: Mapping[float, Any], selection: list[Any], cuts: list[int]) -> str:
    """sha256 of what every trial's values depend on besides its parameters: the model's weights and the prompt
    (the evaluator's cache keys), the general texts, each top_k value's mask, the selection problems and the cuts."""
    masks = {f"{k!r}": m.sha256 for k, m in sorted(by_value.items())}
    problems = [problem_sha256(q) for q in selection]
    prompt, general = evaluator.prompt_key, evaluator.general_key
    return key_sha256({"prompt": prompt, "general": general, "masks": masks, "selection": problems, "cuts": cuts})


def _search_line(space: SearchSpace, target: int, study: Any, cuts: list[int]) -> str:
    """The search stage's line: the trials to run, the space and the cuts."""
    done = len(study.get_trials(deepcopy=False, states=_FINISHED))
    bands = ", ".join(f"{a}-{b}" for a, b in space.bands)
    return (
        f"search {target} trials ({done} finished before) over a top_k per {' and '.join(space.components)} "
        f"({', '.join(f'{k:g}' for k in space.top_ks)}) and a scale in [{space.low:g}, {space.high:g}] per "
        f"layer band ({bands}) and component"
        + (f"; trials stop early at {', '.join(str(c) for c in cuts[:-1])} problems" if len(cuts) > 1 else "")
    )


def _search_record(study: Any, space: SearchSpace, trials: list[Any], target: int) -> dict[str, Any]:
    """``sweep.json``'s ``search``: the sampler, seed, budget, study file, space and each point's trial number."""
    return {
        "method": "optuna",
        "sampler": "TPE (constraint: general KL within sweep.kl_budget)",
        "optuna_version": optuna.__version__,
        "study": OPTUNA_STUDY,
        "trials": target,
        "pruned": sum(1 for t in trials if t.state == TrialState.PRUNED),
        "seed": study.user_attrs.get("seed"),
        "space": {
            "top_k": list(space.top_ks),
            "scale": [space.low, space.high],
            "bands": [list(b) for b in space.bands],
            "components": list(space.components),
        },
        "trial_numbers": [t.number for t in trials],
    }


def _plots(out: Path, result: SweepResult, study: Any) -> list[Path]:
    """Optuna's optimization history and parameter importances, and the trials' math gain vs general KL with the
    Pareto front (Optuna draws a front only for a study of two objectives; this one has one and a constraint)."""
    plt = pyplot(required=False)
    if plt is None:
        return []
    from optuna.visualization import matplotlib as ovm

    written = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Optuna's plots are marked experimental
        ax = ovm.plot_optimization_history(study)  # a trial's value is a fraction (Optuna's best-value line kept)
        ax.set_ylabel("math gain over the base (fraction: 0.01 = 1 point)")
        written.append(save_figure(ax.figure, out / OPTUNA_PNGS[0]))
        complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if len(complete) >= 2:
            # fANOVA needs scikit-learn, and trials whose values differ (it raises RuntimeError when every trial
            # scored the same: nothing to attribute); without either this one plot is left out
            try:
                evaluator = optuna.importance.FanovaImportanceEvaluator(seed=0)
                ax = ovm.plot_param_importances(study, evaluator=evaluator)
                written.append(save_figure(ax.figure, out / OPTUNA_PNGS[1]))
            except (ImportError, RuntimeError):
                plt.close("all")
    front = _front_plot(plt, result)
    if front is not None:
        written.append(save_figure(front, out / OPTUNA_PNGS[2]))
    return written


def _front_plot(plt: Any, result: SweepResult) -> Any:
    """Each trial that saw every selection problem at (general KL, gain in points), the Pareto front joined, the
    candidate named, the KL budget as a vertical line; ``None`` when no trial has a KL."""
    pts = [(i, p) for i, p in enumerate(result.points) if math.isfinite(p.general_kl)]
    if not pts:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    ax.scatter([p.general_kl for _, p in pts], [p.gain_points for _, p in pts], s=24, color="tab:blue", zorder=3)
    front = [result.points[i] for i in sorted(pareto_front(result.points), key=lambda i: result.points[i].general_kl)]
    kl, gain = [p.general_kl for p in front], [p.gain_points for p in front]
    ax.plot(kl, gain, "-o", color="red", mfc="none", label="Pareto front", zorder=2)
    if result.candidate is not None:
        c = result.points[result.candidate]
        ax.annotate("candidate", (c.general_kl, c.gain_points), xytext=(6, 6), textcoords="offset points", fontsize=7)
    ax.axhline(0, color="gray", ls="--", lw=1, label="base")
    ax.axvline(result.kl_budget, color="gray", ls=":", lw=1, label=f"KL budget {result.kl_budget:g}")
    ax.set_xlabel("general KL(base || edited)")
    ax.set_ylabel("math gain over the base (points)")
    ax.set_title(f"optuna search: the {len(pts)} trials that saw every selection problem", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return fig
