"""Sweeps that choose a setting on one set of problems and confirm it on another (issue 21).

One calibration, a mask per top_k derived from the saved statistics, each edit switched on with
:class:`~mathneuro_edit.engine.apply.ReversibleEdit` on one model and evaluated in memory. The math problems of
``evaluation.math`` are split in two disjoint sets (:func:`sweep_problems`):

- **selection** (``sweep.selection_samples``): every ``(top_k, scale)`` point and the base are evaluated on it
  (math exact match, general loss, KL(base || edited)); each point gets its raw exact McNemar p against the base
  and its Holm-Bonferroni adjusted p over the grid (:func:`~mathneuro_edit.evaluation.significance.holm_adjust`);
- **confirmation** (``sweep.confirmation_samples``), never used for choosing: only the single candidate
  (:func:`~.sweep_procedure.select_candidate`: the largest selection gain within ``sweep.kl_budget``) and the base are evaluated on
  it, with ONE paired exact McNemar test (:func:`~.sweep_procedure.confirm`).

A setting is recommended only when that test shows a gain with ``p < sweep.alpha``; otherwise the recommendation
says that nothing is confirmed. Why: with a 20-point grid, the best of 20 uncorrected tests on the same problems is
"significant" in about a quarter of sweeps where no edit does anything (25.2% of 1,000 simulated, 300 problems,
10% discordance: tests/runs/test_sweep_procedure.py); a test on fresh problems of the one setting chosen beforehand
has its nominal level.

Outputs (names in :mod:`mathneuro_edit.layout`): ``sweep.json`` (the contract in docs/evaluation.md),
``sweep.csv`` (one row per point, raw and Holm p), ``sweep.png`` (math accuracy vs general KL, Pareto front; needs
matplotlib) and the statistics. Every accuracy carries its 95% Wilson interval. The procedure itself (pure
functions of the counts): :mod:`.sweep_procedure`; from a confirmed sweep to a release: :mod:`.sweep_release`.
"""

from __future__ import annotations

import csv
import io
import json
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..data.sources import load_math_problems, load_set, problem_sha256
from ..engine.apply import ReversibleEdit, check_scale
from ..engine.mask import find_math_params_multi
from ..engine.topk import top_k_hint
from ..errors import InputError
from ..evaluation.runner import GeneralTask, MathTask, evaluate
from ..evaluation.significance import wilson_interval
from ..layout import (
    MATH_STATS_NAME,
    SWEEP_CSV,
    SWEEP_JSON,
    SWEEP_PNG,
    general_stats_name,
)
from ..recipe.schema import Recipe, recipe_sha256
from ..util.console import Stages, table
from ..util.outdir import atomic_dir
from ..weights.loading import model_weights
from .inspect import pyplot, save_figure
from .pipeline import (
    calibrate_recipe,
    describe_tasks,
    eval_tasks,
    load_stage,
)
from .sweep_procedure import (
    Confirmation,
    SweepPoint,
    confirm,
    pareto_front,
    recommend,
    select_candidate,
    with_holm,
)

__all__ = ["SweepResult", "run_sweep", "sweep_problems"]

_KEYS = ("question", "answer", "prefill")


@dataclass
class SweepResult:
    """The selection points and base, the Pareto front, the confirmation and the recommendation."""

    base_math_accuracy: float
    base_general_loss: float
    points: list[SweepPoint]
    front: list[int]
    recommendation: str
    best: int | None

    base_math: dict[str, Any] = field(default_factory=dict)  # the base's selection row (counts, interval)
    base_general_loss_se: float = math.nan  # standard error of the base's general loss over texts
    selection_sha256: list[str] = field(default_factory=list)  # one per selection problem, in order
    confirmation: Confirmation | None = None
    candidate: int | None = None  # the point tested on the confirmation set
    kl_budget: float = 0.05
    alpha: float = 0.05
    general_texts: int = 0
    recipe: dict[str, Any] = field(default_factory=dict)  # the public recipe the sweep ran
    recipe_sha256: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The ``sweep.json`` contract (docs/evaluation.md)."""
        base = {"math_accuracy": self.base_math_accuracy, "general_loss": self.base_general_loss,
                "general_loss_se": self.base_general_loss_se,
                **{k: v for k, v in self.base_math.items() if k != "predictions"}}
        return {"selection": {"n": len(self.selection_sha256), "problems_sha256": list(self.selection_sha256),
                              "base": base, "points": [asdict(p) for p in self.points],
                              "general_texts": self.general_texts},
                "confirmation": None if self.confirmation is None else self.confirmation.to_dict(),
                "candidate": self.candidate, "recommendation": self.recommendation, "best": self.best,
                "pareto_front": self.front, "kl_budget": self.kl_budget, "alpha": self.alpha,
                "recipe_sha256": self.recipe_sha256, "recipe": self.recipe}

    def to_csv(self) -> str:
        buf = io.StringIO()
        w = csv.writer(buf)
        w.writerow(["top_k", "scale", "selected", "math_accuracy", "math_correct", "math_total", "math_ci95_low",
                    "math_ci95_high", "mcnemar_p", "holm_p", "significant", "general_loss", "general_loss_se",
                    "loss_change", "loss_change_se", "general_kl", "pareto", "candidate", "confirmed"])
        c = self.confirmation
        for i, p in enumerate(self.points):
            w.writerow([p.top_k, p.scale, p.selected, p.math_accuracy, p.math_correct, p.math_total,
                        f"{p.math_ci95_low:.4f}", f"{p.math_ci95_high:.4f}", f"{p.mcnemar_p:.4g}", f"{p.holm_p:.4g}",
                        p.significant, p.general_loss, f"{p.general_loss_se:.4g}", f"{p.loss_change:.4g}",
                        f"{p.loss_change_se:.4g}", p.general_kl, i in self.front, i == self.candidate,
                        bool(c is not None and c.point == i and c.confirmed)])
        return buf.getvalue()

    def to_text(self) -> str:
        """The console table: the base, one row per edit on the selection problems (math with its 95% CI, gain in
        problems, raw and Holm-adjusted McNemar p, general KL; ``*`` the Pareto front, ``?`` the candidate), then
        the confirmation row (the CSV holds every column)."""
        b = self.base_math
        base_ci = (f" ({100 * b['math_ci95_low']:.1f}-{100 * b['math_ci95_high']:.1f})"
                   if "math_ci95_low" in b else "")
        base_k = int(b.get("math_correct", 0))
        n = len(self.selection_sha256)
        rows = [[f"base (selection, n={n})", "", "", f"{100 * self.base_math_accuracy:.1f}%{base_ci}", "", "-", "-",
                 "", ""]]
        for i, p in enumerate(self.points):
            mark = ("*" if i in self.front else "") + (" ? candidate" if i == self.candidate else "")
            rows.append([f"{p.top_k:g}", f"{p.scale:g}", f"{p.selected:,}",
                         f"{100 * p.math_accuracy:.1f}% ({100 * p.math_ci95_low:.1f}-{100 * p.math_ci95_high:.1f})",
                         f"{p.math_correct - base_k:+d}", f"{p.mcnemar_p:.3g}", f"{p.holm_p:.3g}",
                         f"{p.general_kl:.3g}", mark.strip()])
        c = self.confirmation
        if c is not None:
            lo, hi = wilson_interval(c.edited_correct, c.n)
            rows.append([f"confirm (n={c.n})", f"{c.scale:g}", f"top_k={c.top_k:g}",
                         f"{100 * c.edited_correct / c.n:.1f}% ({100 * lo:.1f}-{100 * hi:.1f})",
                         f"{c.edited_correct - c.base_correct:+d}", f"{c.mcnemar_p:.3g}", "-", "",
                         ("confirmed" if c.confirmed else "not confirmed")
                         + f" (base {100 * c.base_correct / c.n:.1f}%)"])
        head = ["top_k", "scale", "weights", "math (95% CI)", "gain", "p", "Holm p", "general KL", "mark"]
        return table(head, rows, right={2, 4, 5, 6, 7})


def _num(x: Any) -> float:
    """An eval dict's number (``None`` where eval.json wrote a non-finite value) as a float."""
    return math.nan if x is None else float(x)


def _strict(x: Any) -> Any:
    """``x`` with non-finite floats as ``None`` (strict JSON, as eval.json)."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _strict(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_strict(v) for v in x]
    return x


def _point(top_k: float, scale: float, selected: int, res: dict[str, Any]) -> SweepPoint:
    """A :class:`SweepPoint` from one edit's eval dict (``to_dict`` of :func:`~mathneuro_edit.evaluation.runner.evaluate`)."""
    m, g, c = res["math"]["edited"], res["general"]["edited"], res["math"].get("comparison") or {}
    gc = res["general"].get("comparison") or {}
    return SweepPoint(top_k, scale, selected, m["math_accuracy"], g["general_loss"], g["general_kl"],
                      int(m["math_correct"]), int(m["math_total"]), m["math_ci95_low"], m["math_ci95_high"],
                      c.get("mcnemar_p", 1.0), bool(c.get("significant", False)), _num(g.get("general_loss_se")),
                      _num(gc.get("loss_change")), _num(gc.get("loss_change_se")))


def _plot(result: SweepResult, path: Path) -> Path | None:
    """Math accuracy vs general KL: one marker shape per top_k and one colour per scale (the legend names each,
    so every point is identified without labels that overlap), the Pareto front ringed and joined, the base as a
    dashed line, every point and error bar inside the axes."""
    plt = pyplot(required=False)
    if plt is None:
        return None  # the CSV/JSON are the results; the PNG is a convenience of the plot extra
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    pts = result.points
    ks = sorted({p.top_k for p in pts})
    ss = sorted({p.scale for p in pts})
    markers = "osD^vP*Xh<>p"
    colors = plt.get_cmap("tab10")
    xs, ys = [p.general_kl for p in pts], [100 * p.math_accuracy for p in pts]
    # 95% Wilson intervals: a point whose bar covers the base line is not a demonstrated gain
    ax.errorbar(xs, ys, yerr=[[100 * (p.math_accuracy - p.math_ci95_low) for p in pts],
                              [100 * (p.math_ci95_high - p.math_accuracy) for p in pts]],
                fmt="none", ecolor="gray", alpha=0.35, lw=1, zorder=1)
    for p in pts:
        ax.scatter([p.general_kl], [100 * p.math_accuracy], marker=markers[ks.index(p.top_k) % len(markers)],
                   color=colors(ss.index(p.scale) % 10), s=36, zorder=3, edgecolors="black", linewidths=0.4)
    front = sorted((pts[i] for i in result.front), key=lambda p: p.general_kl)
    ax.plot([p.general_kl for p in front], [100 * p.math_accuracy for p in front], "-", color="red", lw=1,
            alpha=0.6, zorder=2)
    ax.scatter([p.general_kl for p in front], [100 * p.math_accuracy for p in front], s=110, facecolors="none",
               edgecolors="red", linewidths=1, zorder=2)
    if result.best is not None:
        p = pts[result.best]
        ax.annotate("recommended", (p.general_kl, 100 * p.math_accuracy), xytext=(6, 6), fontsize=7,
                    textcoords="offset points", zorder=4)
    ax.axhline(100 * result.base_math_accuracy, color="gray", ls="--", lw=1, zorder=0)
    # every point inside the axes: margins around the points, their error bars and the base line
    lo = min([100 * p.math_ci95_low for p in pts] + [100 * result.base_math_accuracy])
    hi = max([100 * p.math_ci95_high for p in pts] + [100 * result.base_math_accuracy])
    pad = max(3.0, 0.08 * (hi - lo))
    ax.set_ylim(lo - pad, hi + pad)
    positive = [x for x in xs if x > 0]
    if positive and len(positive) == len(xs):  # KL spans decades: log axis, a factor 2 of room each side
        ax.set_xscale("log")
        ax.set_xlim(min(positive) / 2, max(positive) * 2)
    else:  # a KL of exactly 0 (an edit that changes nothing): symlog keeps it, linear up to the smallest KL
        thresh = 10 ** math.floor(math.log10(min(positive))) if positive else 1e-6  # a decade, so 0 stands apart
        ax.set_xscale("symlog", linthresh=thresh)
        ax.set_xlim(-0.3 * thresh, max(xs + [thresh]) * 2)
    ax.set_xlabel("general KL(base || edited)")
    ax.set_ylabel("math accuracy (%)")
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], ls="", marker=markers[i % len(markers)], color="black", label=f"top_k={k:g}")
               for i, k in enumerate(ks)]
    handles += [Line2D([], [], ls="", marker="s", color=colors(i % 10), label=f"scale x{s:g}")
                for i, s in enumerate(ss)]
    handles += [Line2D([], [], color="red", alpha=0.6, marker="o", mfc="none", label="Pareto front"),
                Line2D([], [], color="gray", ls="--", label=f"base ({100 * result.base_math_accuracy:.1f}%)")]
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    ax.set_title("sweep: math accuracy vs general KL (bars: 95% CI)", fontsize=9)
    ax.grid(alpha=0.3)
    return save_figure(fig, path)


def sweep_problems(recipe: Recipe) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """``(shots, selection, confirmation)`` problems of a sweep, disjoint by construction.

    One draw of ``evaluation.n_shot + sweep.selection_samples + sweep.confirmation_samples`` problems from
    ``evaluation.math`` with ``evaluation.seed`` (the arithmetic task generates distinct problems from the seed; a
    file is shuffled by the seed and read without replacement), split in that order. A confirmation problem whose
    prompt text (``question``) repeats an earlier one (a file with duplicate questions) is dropped, so that no
    prompt is in both sets; the confirmation then holds fewer problems, and the JSON says how many.

    Raises:
        InputError: no evaluation section, or a source with fewer problems than the sweep needs.
    """
    ev, sw = recipe.evaluation, recipe.sweep
    if ev is None:
        raise InputError("sweep needs an evaluation section in the recipe (see docs/recipes.md)")
    want = ev.n_shot + sw.selection_samples + sw.confirmation_samples
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "fewer records than requested": refused below, with the keys to change
        problems = load_math_problems(ev.math, want, ev.seed)
    if len(problems) < want:
        raise InputError(f"evaluation.math: {ev.math.public_path()} has {len(problems)} problems; the sweep needs "
                         f"evaluation.n_shot + sweep.selection_samples + sweep.confirmation_samples = {ev.n_shot} + "
                         f"{sw.selection_samples} + {sw.confirmation_samples} = {want}; lower "
                         "sweep.selection_samples or sweep.confirmation_samples (--set)")
    strip = [{k: p[k] for k in _KEYS if k in p} for p in problems]
    shots = strip[: ev.n_shot]
    selection = strip[ev.n_shot: ev.n_shot + sw.selection_samples]
    seen = {problem_sha256(p) for p in shots + selection}
    confirmation = []
    for p in strip[ev.n_shot + sw.selection_samples:]:
        h = problem_sha256(p)
        if h not in seen:
            seen.add(h)
            confirmation.append(p)
    return shots, selection, confirmation


def run_sweep(
    recipe: Recipe,
    out_dir: str | Path,
    *,
    top_ks: Sequence[float],
    scales: Sequence[float],
    overwrite: bool = False,
    progress: bool = True,
    echo: Callable[[str], None] = lambda s: None,
) -> SweepResult:
    """Sweep ``top_ks x scales`` for a recipe with one calibration and one model in memory: select, then confirm.

    Args:
        recipe: a recipe with an ``evaluation`` section; its ``sweep`` section sets the sizes, the KL budget and
            the level.
        out_dir: folder for ``sweep.json``, ``sweep.csv``, ``sweep.png`` and the statistics.
        top_ks: fractions in (0, 1].
        scales: finite numbers >= 0 (0 prunes; 1.0 is the base and is skipped).
        overwrite: replace an existing ``out_dir``.
        progress: progress bars.
        echo: receives the stage lines and one ``edit 3/8: top_k=0.01 scale=1.1`` line per edit.

    Returns:
        :class:`SweepResult`.
    """
    if recipe.evaluation is None:
        raise InputError("sweep needs an evaluation section in the recipe (see docs/recipes.md)")
    for k in top_ks:
        if not 0 < k <= 1:
            raise InputError(f"--top-k: {k:g} is not in (0, 1]{top_k_hint(k)}; pass fractions such as 0.01,0.05")
    scales = [check_scale(s) for s in scales]
    edits = [(k, s) for k in top_ks for s in scales if s != 1.0]  # scale 1.0 is the base itself
    if not edits:
        raise InputError("--scale: only 1 (the base itself) was given; pass other scales, e.g. 1.05,1.1")
    out = Path(out_dir)
    if out.exists() and not overwrite:
        raise InputError(f"{out}: already exists; choose another --out or pass --overwrite")
    ev, sw = recipe.evaluation, recipe.sweep
    shots, selection, confirmation_problems = sweep_problems(recipe)  # a bad source fails before calibration
    general = [t for t in eval_tasks(recipe) if isinstance(t, GeneralTask)]
    if sw.general_samples is not None:  # the selection's KL on fewer (or more) texts than a release evaluates
        texts, _ = load_set(ev.general, sw.general_samples, ev.seed)
        general = [GeneralTask("general", texts, max_length=recipe.calibration.max_length)]
    settings = dict(n_shot=ev.n_shot, shots=shots, max_new_tokens=ev.max_new_tokens, chat_template=ev.chat_template)
    sel_task = MathTask("math", selection, **settings)
    conf_task = MathTask("math", confirmation_problems, **settings)
    tasks = [sel_task, *general]
    stages = Stages(6 + len(recipe.data.general), echo)
    with atomic_dir(out, overwrite=overwrite) as tmp:  # renamed to `out` only when complete
        model, tok = load_stage(recipe, stages)
        math_stats, generals, _ = calibrate_recipe(recipe, model, tok, progress=progress, stages=stages)
        math_stats.save(tmp / MATH_STATS_NAME)
        for i, g in enumerate(generals):
            g.save(tmp / general_stats_name(i))
        stages.start(f"evaluate the base on the selection set: {describe_tasks(tasks)}")
        if sw.general_samples is not None and sw.general_samples != ev.samples:
            stages.note(f"general loss and KL on {sum(len(t.texts) for t in general)} texts (sweep.general_samples; "
                        f"a release evaluates evaluation.samples = {ev.samples})")
        if ev.lm_eval is not None:
            stages.note("evaluation.lm_eval is not run by a sweep (run it on the release)")
        base = evaluate(model, tok, tasks, progress=progress, keep_base_logprobs=True)  # each edit's KL reuses them
        m = recipe.mask
        stages.start(f"masks for top_k={','.join(f'{k:g}' for k in top_ks)} ({m.method})")
        masks = find_math_params_multi(model_weights(model), math_stats, generals, top_ks=top_ks, method=m.method,
                                       granularity=m.granularity, seed=m.seed, progress=progress)
        stages.start(f"evaluate {len(edits)} edits on {len(selection)} selection problems")
        points, point_masks = [], []
        for k, mask in zip(top_ks, masks):
            for s in scales:
                if s == 1.0:
                    continue  # the base itself
                echo(f"      edit {len(points) + 1}/{len(edits)}: top_k={k:g} scale={s:g}")
                res = evaluate(model, tok, tasks, edit=ReversibleEdit(model, mask, s), base_results=base,
                               progress=progress).to_dict()
                points.append(_point(k, s, mask.total()[0], res))
                point_masks.append(mask)
        points = with_holm(points)
        base_d = base.to_dict()
        base_row = base_d["math"]["base"]
        base_correct = int(base_row["math_correct"])
        candidate = select_candidate(points, base_correct, sw.kl_budget)
        confirmation = None
        if candidate is None:
            stages.start("confirm: no candidate (no gain within the KL budget); nothing is tested")
        else:
            p = points[candidate]
            stages.start(f"confirm top_k={p.top_k:g} scale={p.scale:g} on {len(confirmation_problems)} other problems")
            res = evaluate(model, tok, [conf_task], edit=ReversibleEdit(model, point_masks[candidate], p.scale),
                           progress=progress)
            b, c, pval, ok = confirm([x.correct for x in res.base["math"].predictions],
                                     [x.correct for x in res.edited["math"].predictions], sw.alpha)
            confirmation = Confirmation(len(confirmation_problems),
                                        tuple(problem_sha256(q) for q in confirmation_problems), p.top_k, p.scale,
                                        res.base["math"].correct, res.edited["math"].correct, b, c, pval, ok,
                                        sw.alpha, candidate, point_masks[candidate].sha256)
        best, text = recommend(points, base_correct, len(selection), candidate, confirmation, sw.kl_budget)
        base_g = base_d["general"]["base"]
        result = SweepResult(base_row["math_accuracy"], base_g["general_loss"], points, pareto_front(points), text,
                             best, dict(base_row), _num(base_g.get("general_loss_se")),
                             [problem_sha256(q) for q in selection], confirmation, candidate, sw.kl_budget, sw.alpha,
                             sum(len(t.texts) for t in general), recipe.public_dict(), recipe_sha256(recipe))
        (tmp / SWEEP_CSV).write_text(result.to_csv())
        (tmp / SWEEP_JSON).write_text(json.dumps(_strict(result.to_dict()), indent=2, allow_nan=False) + "\n")
        _plot(result, tmp / SWEEP_PNG)
    return result
