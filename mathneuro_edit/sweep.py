"""Sweeps: one calibration, a mask per top_k derived from the saved statistics, each edit evaluated in memory.

For every ``(top_k, scale)`` the edit is switched on with :class:`~mathneuro_edit.apply.ReversibleEdit` on one
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
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .errors import InputError
from .eval_report import format_p
from .recipe import Recipe

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
    # (:func:`~mathneuro_edit.eval_results.compare`); nan in a point built without them
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
    """A :class:`SweepPoint` from one edit's eval dict (``to_dict`` of :func:`~mathneuro_edit.evaluation.evaluate`)."""
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
    from .report import pyplot, save_figure

    plt = pyplot(required=False)
    if plt is None:
        return None  # the CSV/JSON are the results; the PNG is a convenience of the plot extra
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    pts = result.points
    ax.scatter([p.general_kl for p in pts], [100 * p.math_accuracy for p in pts], c="tab:blue", label="edits")
    # 95% Wilson intervals: a point whose bar covers the base line is not a demonstrated gain
    ax.errorbar([p.general_kl for p in pts], [100 * p.math_accuracy for p in pts],
                yerr=[[100 * (p.math_accuracy - p.math_ci95_low) for p in pts],
                      [100 * (p.math_ci95_high - p.math_accuracy) for p in pts]],
                fmt="none", ecolor="tab:blue", alpha=0.35, lw=1)
    front = sorted((pts[i] for i in result.front), key=lambda p: p.general_kl)
    for p in front:  # label the front only: the other points would overlap
        ax.annotate(f"k={p.top_k:g}, x{p.scale:g}", (p.general_kl, 100 * p.math_accuracy), fontsize=7)
    ax.plot([p.general_kl for p in front], [100 * p.math_accuracy for p in front], "r-o", label="Pareto front")
    ax.axhline(100 * result.base_math_accuracy, color="gray", ls="--", label="base")
    ax.set_xscale("symlog", linthresh=1e-4)  # KL spans decades and can be 0
    ax.set_xlim(left=0)
    ax.set_xlabel("general KL(base || edited)")
    ax.set_ylabel("math accuracy (%)")
    ax.legend(fontsize=7)
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

    Returns:
        :class:`SweepResult`.
    """
    from .apply import ReversibleEdit, check_scale
    from .evaluation import evaluate
    from .export import atomic_dir
    from .loading import model_weights
    from .mask import find_math_params_multi
    from .pipeline import calibrate_recipe, eval_tasks, load_recipe_model

    if recipe.evaluation is None:
        raise InputError("sweep needs an evaluation section in the recipe (see docs/recipes.md)")
    for k in top_ks:
        if not 0 < k <= 1:
            raise InputError(f"--top-k: {k} is not in (0, 1]; pass fractions such as 0.01,0.05")
    scales = [check_scale(s) for s in scales]
    if not math.isfinite(kl_budget) or kl_budget < 0:
        raise InputError(f"--kl-budget: must be a finite number >= 0, got {kl_budget}")
    out = Path(out_dir)
    if out.exists() and not overwrite:
        raise InputError(f"{out}: already exists; choose another --out or pass --overwrite")
    with atomic_dir(out, overwrite=overwrite) as tmp:  # renamed to `out` only when complete
        model, tok = load_recipe_model(recipe)
        math_stats, generals, _ = calibrate_recipe(recipe, model, tok, progress=progress)
        math_stats.save(tmp / "math.stats.safetensors")
        for i, g in enumerate(generals):
            g.save(tmp / f"general-{i}.stats.safetensors")
        tasks = eval_tasks(recipe)
        base = evaluate(model, tok, tasks, progress=progress)
        m = recipe.mask
        points = []
        masks = find_math_params_multi(model_weights(model), math_stats, generals, top_ks=top_ks, method=m.method,
                                       granularity=m.granularity, seed=m.seed, progress=progress)
        for k, mask in zip(top_ks, masks):
            for s in scales:
                if s == 1.0:
                    continue  # the base itself
                res = evaluate(model, tok, tasks, edit=ReversibleEdit(model, mask, s), base_results=base,
                               progress=progress).to_dict()
                points.append(_point(k, s, mask.total()[0], res))
        base_d = base.to_dict()
        base_acc = base_d["math"]["base"]["math_accuracy"]
        best, text = recommend(points, base_acc, kl_budget)
        base_g = base_d["general"]["base"]
        result = SweepResult(base_acc, base_g["general_loss"], points, pareto_front(points), text, best,
                             dict(base_d["math"]["base"]), _num(base_g.get("general_loss_se")))
        (tmp / "sweep.csv").write_text(result.to_csv())
        (tmp / "sweep.json").write_text(json.dumps(_strict(result.to_dict()), indent=2, allow_nan=False) + "\n")
        _plot(result, tmp / "sweep.png")
    return result
