"""Sweeps: one calibration, a mask per top_k derived from the saved statistics, each edit evaluated in memory.

For every ``(top_k, scale)`` the edit is switched on with :class:`~mathneuro_edit.apply.ReversibleEdit` on one
model, evaluated (math exact match, general loss, KL(base || edited)), and switched off; the base results are
computed once. Outputs: ``sweep.csv``, ``sweep.json``, ``sweep.png`` (math accuracy vs general KL, Pareto front
marked; needs matplotlib) and a recommendation: the best math accuracy within a general-KL budget, or a plain
statement that no setting improves math.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .errors import InputError
from .recipe import Recipe

__all__ = ["SweepPoint", "SweepResult", "run_sweep", "pareto_front", "recommend"]


@dataclass(frozen=True)
class SweepPoint:
    """One evaluated edit (``top_k=0``/``scale=1`` rows never occur: the base is reported separately)."""

    top_k: float
    scale: float
    selected: int
    math_accuracy: float
    general_loss: float
    general_kl: float


@dataclass
class SweepResult:
    """All points, the base, the Pareto front and the recommendation."""

    base_math_accuracy: float
    base_general_loss: float
    points: list[SweepPoint]
    front: list[int]
    recommendation: str
    best: int | None

    def to_dict(self) -> dict[str, Any]:
        return {"base": {"math_accuracy": self.base_math_accuracy, "general_loss": self.base_general_loss},
                "points": [asdict(p) for p in self.points], "pareto_front": self.front,
                "recommendation": self.recommendation, "best": self.best}

    def to_csv(self) -> str:
        buf = io.StringIO()
        w = csv.writer(buf)
        w.writerow(["top_k", "scale", "selected", "math_accuracy", "general_loss", "general_kl", "pareto"])
        for i, p in enumerate(self.points):
            w.writerow([p.top_k, p.scale, p.selected, p.math_accuracy, p.general_loss, p.general_kl, i in self.front])
        return buf.getvalue()


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
    """The best math accuracy among points with ``general_kl <= kl_budget`` that beat the base (ties: lower KL)."""
    ok = [i for i, p in enumerate(points) if p.general_kl <= kl_budget and p.math_accuracy > base_accuracy]
    if not ok:
        return None, (f"no setting improves math accuracy over the base ({100 * base_accuracy:.1f}%) within the "
                      f"general-KL budget {kl_budget:g}; do not publish a boost from this sweep")
    best = max(ok, key=lambda i: (points[i].math_accuracy, -points[i].general_kl))
    p = points[best]
    return best, (f"recommended: top_k={p.top_k:g} scale={p.scale:g}: math {100 * base_accuracy:.1f}% -> "
                  f"{100 * p.math_accuracy:.1f}%, general KL {p.general_kl:.4g} (budget {kl_budget:g})")


def _plot(result: SweepResult, path: Path) -> Path | None:
    from .report import pyplot, save_figure

    plt = pyplot(required=False)
    if plt is None:
        return None  # the CSV/JSON are the results; the PNG is a convenience of the plot extra
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    pts = result.points
    ax.scatter([p.general_kl for p in pts], [100 * p.math_accuracy for p in pts], c="tab:blue", label="edits")
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
                points.append(SweepPoint(k, s, mask.total()[0], res["math"]["edited"]["math_accuracy"],
                                         res["general"]["edited"]["general_loss"],
                                         res["general"]["edited"]["general_kl"]))
        base_d = base.to_dict()
        base_acc = base_d["math"]["base"]["math_accuracy"]
        best, text = recommend(points, base_acc, kl_budget)
        result = SweepResult(base_acc, base_d["general"]["base"]["general_loss"], points, pareto_front(points),
                             text, best)
        (tmp / "sweep.csv").write_text(result.to_csv())
        (tmp / "sweep.json").write_text(json.dumps(result.to_dict(), indent=2) + "\n")
        _plot(result, tmp / "sweep.png")
    return result
