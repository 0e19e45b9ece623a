"""Sweeps: one calibration, a mask per top_k derived from the saved statistics, each edit evaluated in memory.

For every ``(top_k, scale)`` the edit is switched on with :class:`~mathneuro_edit.engine.apply.ReversibleEdit` on one
model, evaluated (math exact match, general loss, KL(base || edited)), and switched off; the base results are
computed once. Outputs: ``sweep.csv``, ``sweep.json``, ``sweep.png`` (math accuracy vs general KL, Pareto front
marked; needs matplotlib) and a recommendation: the best math accuracy among the settings whose gain over the base
is significant (paired exact McNemar test on the same problems, p < 0.05) and whose general KL is within the budget,
or a plain statement that nothing qualifies. Every accuracy carries its 95% Wilson interval.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..engine.apply import ReversibleEdit, check_scale
from ..engine.mask import find_math_params_multi
from ..engine.topk import top_k_hint
from ..errors import InputError
from ..evaluation.report import format_p
from ..evaluation.runner import evaluate
from ..layout import MATH_STATS_NAME, SWEEP_CSV, SWEEP_JSON, general_stats_name
from ..recipe.schema import Recipe
from ..util.console import Stages, table
from ..util.outdir import atomic_dir
from ..weights.loading import model_weights
from .inspect import pyplot, save_figure
from .pipeline import calibrate_recipe, describe_tasks, eval_tasks, load_stage

__all__ = ["SweepPoint", "SweepResult", "run_sweep", "pareto_front", "recommend"]


@dataclass(frozen=True)
class SweepPoint:
    """One evaluated edit (``top_k=0``/``scale=1`` rows never occur: the base is reported separately).

    ``mcnemar_p`` / ``significant`` compare it with the base on the same problems; a point built without them
    (the defaults) is never significant.
    """

    top_k: float
    scale: float
    selected: int
    math_accuracy: float
    general_loss: float
    general_kl: float
    math_correct: int = 0
    math_total: int = 0
    math_ci95_low: float = 0.0
    math_ci95_high: float = 1.0
    mcnemar_p: float = 1.0
    significant: bool = False
    # general loss: its standard error over texts, and the paired change vs the base with its standard error
    # (:func:`~mathneuro_edit.evaluation.results.compare`); nan in a point built without them
    general_loss_se: float = math.nan
    loss_change: float = math.nan
    loss_change_se: float = math.nan


@dataclass
class SweepResult:
    """All points, the base, the Pareto front and the recommendation."""

    base_math_accuracy: float
    base_general_loss: float
    points: list[SweepPoint]
    front: list[int]
    recommendation: str
    best: int | None

    base_math: dict[str, Any] = field(default_factory=dict)  # the base's eval row (counts, interval)
    base_general_loss_se: float = math.nan  # standard error of the base's general loss over texts

    def to_dict(self) -> dict[str, Any]:
        return {"base": {"math_accuracy": self.base_math_accuracy, "general_loss": self.base_general_loss,
                         "general_loss_se": self.base_general_loss_se,
                         **{k: v for k, v in self.base_math.items() if k != "predictions"}},
                "points": [asdict(p) for p in self.points], "pareto_front": self.front,
                "recommendation": self.recommendation, "best": self.best}

    def to_csv(self) -> str:
        buf = io.StringIO()
        w = csv.writer(buf)
        w.writerow(["top_k", "scale", "selected", "math_accuracy", "math_correct", "math_total", "math_ci95_low",
                    "math_ci95_high", "mcnemar_p", "significant", "general_loss", "general_loss_se", "loss_change",
                    "loss_change_se", "general_kl", "pareto"])
        for i, p in enumerate(self.points):
            w.writerow([p.top_k, p.scale, p.selected, p.math_accuracy, p.math_correct, p.math_total,
                        f"{p.math_ci95_low:.4f}", f"{p.math_ci95_high:.4f}", f"{p.mcnemar_p:.4g}", p.significant,
                        p.general_loss, f"{p.general_loss_se:.4g}", f"{p.loss_change:.4g}", f"{p.loss_change_se:.4g}",
                        p.general_kl, i in self.front])
        return buf.getvalue()

    def to_text(self) -> str:
        """The console table: one row per edit (math accuracy with its 95% CI, McNemar p, general KL), the base
        first; ``*`` marks the Pareto front, ``<-`` the recommendation (the CSV holds every column)."""
        b = self.base_math
        base_ci = (f" ({100 * b['math_ci95_low']:.1f}-{100 * b['math_ci95_high']:.1f})"
                   if "math_ci95_low" in b else "")
        rows = [["base", "", "", f"{100 * self.base_math_accuracy:.1f}%{base_ci}", "", "-", ""]]
        for i, p in enumerate(self.points):
            mark = ("*" if i in self.front else "") + (" <- recommended" if i == self.best else "")
            rows.append([f"{p.top_k:g}", f"{p.scale:g}", f"{p.selected:,}",
                         f"{100 * p.math_accuracy:.1f}% ({100 * p.math_ci95_low:.1f}-{100 * p.math_ci95_high:.1f})",
                         f"{p.mcnemar_p:.3g}", f"{p.general_kl:.3g}", mark.strip()])
        head = ["top_k", "scale", "weights", "math (95% CI)", "p", "general KL", "pareto"]
        return table(head, rows, right={2, 4, 5})


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


def pareto_front(points: Sequence[SweepPoint]) -> list[int]:
    """Indices of points no other point beats (higher or equal accuracy with lower or equal KL, one strictly).

    Example:
        >>> P = lambda a, k: SweepPoint(0.1, 1.1, 1, a, 1.0, k)
        >>> pareto_front([P(0.5, 0.1), P(0.6, 0.2), P(0.4, 0.3)])
        [0, 1]
    """
    front = []
    for i, p in enumerate(points):
        dominated = any(
            q.math_accuracy >= p.math_accuracy and q.general_kl <= p.general_kl
            and (q.math_accuracy > p.math_accuracy or q.general_kl < p.general_kl)
            for j, q in enumerate(points) if j != i
        )
        if not dominated:
            front.append(i)
    return front


def recommend(points: Sequence[SweepPoint], base_accuracy: float, kl_budget: float) -> tuple[int | None, str]:
    """The best math accuracy among points that qualify (ties: lower KL), and the sentence that says so.

    A point qualifies when it beats the base, the gain is significant (``significant``: paired exact McNemar
    p < 0.05 on the same problems) and ``general_kl <= kl_budget``. Why the test: on 100-300 problems a gain of a
    few points is within noise, and a sweep picks the luckiest of many settings.

    Example:
        >>> P = lambda a, p, k: SweepPoint(0.05, 1.1, 9, a, 2.0, k, mcnemar_p=p, significant=p < 0.05)
        >>> recommend([P(0.62, 0.30, 0.01), P(0.60, 0.01, 0.01)], 0.5, 0.05)[0]
        1
    """
    ok = [i for i, p in enumerate(points)
          if p.general_kl <= kl_budget and p.math_accuracy > base_accuracy and p.significant]
    if not ok:
        gains = [i for i, p in enumerate(points) if p.math_accuracy > base_accuracy]
        largest = ""
        if gains:
            g = points[max(gains, key=lambda i: (points[i].math_accuracy, -points[i].general_kl))]
            largest = (f" (largest gain: top_k={g.top_k:g} scale={g.scale:g}, {100 * base_accuracy:.1f}% -> "
                       f"{100 * g.math_accuracy:.1f}%, {format_p(g.mcnemar_p)}, general KL {g.general_kl:.4g})")
        return None, (f"nothing qualifies: no setting raises math accuracy over the base ({100 * base_accuracy:.1f}%) "
                      f"significantly (paired McNemar p < 0.05) within the general-KL budget {kl_budget:g}"
                      f"{largest}; do not publish a boost from this sweep")
    best = max(ok, key=lambda i: (points[i].math_accuracy, -points[i].general_kl))
    p = points[best]
    return best, (f"recommended: top_k={p.top_k:g} scale={p.scale:g}: math {100 * base_accuracy:.1f}% -> "
                  f"{100 * p.math_accuracy:.1f}% ({p.math_correct}/{p.math_total}, 95% CI {100 * p.math_ci95_low:.1f}-"
                  f"{100 * p.math_ci95_high:.1f}), {format_p(p.mcnemar_p)} (paired McNemar), general KL "
                  f"{p.general_kl:.4g} (budget {kl_budget:g})")


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


def run_sweep(
    recipe: Recipe,
    out_dir: str | Path,
    *,
    top_ks: Sequence[float],
    scales: Sequence[float],
    kl_budget: float = 0.05,
    overwrite: bool = False,
    progress: bool = True,
    echo: Callable[[str], None] = lambda s: None,
) -> SweepResult:
    """Sweep ``top_ks x scales`` for a recipe with one calibration and one model in memory.

    Args:
        recipe: a recipe with an ``evaluation`` section.
        out_dir: folder for ``sweep.csv``, ``sweep.json``, ``sweep.png`` and the statistics.
        top_ks: fractions in (0, 1].
        scales: finite numbers >= 0 (0 prunes; 1.0 is the base and is skipped).
        kl_budget: the largest general KL a recommended setting may have.
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
    if not math.isfinite(kl_budget) or kl_budget < 0:
        raise InputError(f"--kl-budget: must be a finite number >= 0, got {kl_budget}")
    out = Path(out_dir)
    if out.exists() and not overwrite:
        raise InputError(f"{out}: already exists; choose another --out or pass --overwrite")
    edits = [(k, s) for k in top_ks for s in scales if s != 1.0]  # scale 1.0 is the base itself
    stages = Stages(5 + len(recipe.data.general), echo)
    with atomic_dir(out, overwrite=overwrite) as tmp:  # renamed to `out` only when complete
        model, tok = load_stage(recipe, stages)
        math_stats, generals, _ = calibrate_recipe(recipe, model, tok, progress=progress, stages=stages)
        math_stats.save(tmp / MATH_STATS_NAME)
        for i, g in enumerate(generals):
            g.save(tmp / general_stats_name(i))
        tasks = eval_tasks(recipe)
        stages.start(f"evaluate the base: {describe_tasks(tasks)}")
        base = evaluate(model, tok, tasks, progress=progress)
        m = recipe.mask
        points = []
        stages.start(f"masks for top_k={','.join(f'{k:g}' for k in top_ks)} ({m.method})")
        masks = find_math_params_multi(model_weights(model), math_stats, generals, top_ks=top_ks, method=m.method,
                                       granularity=m.granularity, seed=m.seed, progress=progress)
        stages.start(f"evaluate {len(edits)} edits")
        for k, mask in zip(top_ks, masks):
            for s in scales:
                if s == 1.0:
                    continue  # the base itself
                echo(f"      edit {len(points) + 1}/{len(edits)}: top_k={k:g} scale={s:g}")
                res = evaluate(model, tok, tasks, edit=ReversibleEdit(model, mask, s), base_results=base,
                               progress=progress).to_dict()
                points.append(_point(k, s, mask.total()[0], res))
        base_d = base.to_dict()
        base_acc = base_d["math"]["base"]["math_accuracy"]
        best, text = recommend(points, base_acc, kl_budget)
        base_g = base_d["general"]["base"]
        result = SweepResult(base_acc, base_g["general_loss"], points, pareto_front(points), text, best,
                             dict(base_d["math"]["base"]), _num(base_g.get("general_loss_se")))
        (tmp / SWEEP_CSV).write_text(result.to_csv())
        (tmp / SWEEP_JSON).write_text(json.dumps(_strict(result.to_dict()), indent=2, allow_nan=False) + "\n")
        _plot(result, tmp / "sweep.png")
    return result
