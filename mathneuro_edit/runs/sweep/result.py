"""What a sweep found, and its files: :class:`SweepResult` (the selection points and base, the Pareto front, the
confirmation and the recommendation) writes ``sweep.json`` (the contract in docs/evaluation.md), ``sweep.csv`` (one
row per point, raw and Holm p) and ``sweep.png`` (math gain over the base vs general KL, the Pareto front; needs
matplotlib). :mod:`.search` evaluates the points; :mod:`.procedure` holds the rules.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ...engine.edit_map import show_setting
from ...evaluation.significance import wilson_interval
from ...util.console import table
from ..inspect import pyplot, save_figure
from .procedure import Confirmation, SweepPoint, detectable_text, math_merit

__all__ = ["SweepResult"]


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
    # the adaptive selection: one entry per round (its problems [start, end), the points evaluated, their counts
    # on every problem seen so far); the variants (name and recipe overrides); per point the base's mean mass
    # outside the KL support (the KL is a lower bound that leaves this mass's inner divergence out)
    rounds: list[dict[str, Any]] = field(default_factory=list)
    variants: list[dict[str, Any]] = field(default_factory=list)
    general_tail_mass: list[float | None] = field(default_factory=list)
    # the model the sweep measured, by content (runs.steps.export.base_identity): a release from it must be that model
    base_identity: dict[str, Any] = field(default_factory=dict)
    # sweep.search: optuna: the sampler, seed, budget, study file, space and each point's trial (empty: the grid)
    search: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The ``sweep.json`` contract (docs/evaluation.md)."""
        base = {
            "math_accuracy": self.base_math_accuracy,
            "general_loss": self.base_general_loss,
            "general_loss_se": self.base_general_loss_se,
            **{k: v for k, v in self.base_math.items() if k != "predictions"},
        }
        return {
            "selection": {
                "n": len(self.selection_sha256),
                "problems_sha256": list(self.selection_sha256),
                "base": base,
                "points": [asdict(p) for p in self.points],
                "general_texts": self.general_texts,
            },
            "confirmation": None if self.confirmation is None else self.confirmation.to_dict(),
            "candidate": self.candidate,
            "recommendation": self.recommendation,
            "best": self.best,
            "pareto_front": self.front,
            "kl_budget": self.kl_budget,
            "alpha": self.alpha,
            "recipe_sha256": self.recipe_sha256,
            "recipe": self.recipe,
            "base_identity": self.base_identity,
            "rounds": self.rounds,
            "variants": self.variants,
            "general_kl_tail_mass": self.general_tail_mass,
            **({"search": self.search} if self.search else {}),  # a grid's sweep.json is as it was
        }

    def to_csv(self) -> str:
        buf = io.StringIO()
        w = csv.writer(buf)
        w.writerow(
            "variant round top_k scale selected math_accuracy math_correct math_total math_ci95_low math_ci95_high "
            "mcnemar_p holm_p significant general_loss general_loss_se loss_change loss_change_se general_kl pareto "
            "candidate confirmed".split()
        )
        c = self.confirmation
        for i, p in enumerate(self.points):  # in the header's order: the setting, math, its tests, general, marks
            kl = p.general_kl if math.isfinite(p.general_kl) else ""
            setting = [p.variant, p.round, _cell(p.top_k), _cell(p.scale), p.selected]
            math_ = [p.math_accuracy, p.math_correct, p.math_total, f"{p.math_ci95_low:.4f}", f"{p.math_ci95_high:.4f}"]
            tests = [f"{p.mcnemar_p:.4g}", f"{p.holm_p:.4g}", p.significant]
            loss = [p.general_loss, f"{p.general_loss_se:.4g}", f"{p.loss_change:.4g}", f"{p.loss_change_se:.4g}"]
            marks = [i in self.front, i == self.candidate, bool(c is not None and c.point == i and c.confirmed)]
            w.writerow(setting + math_ + tests + loss + [kl] + marks)
        return buf.getvalue()

    def to_text(self) -> str:
        """The console table: the base, one row per point, then the confirmation row, and the legend of its columns
        and marks (the CSV holds every column)."""
        b = self.base_math
        base_ci = f" ({100 * b['math_ci95_low']:.1f}-{100 * b['math_ci95_high']:.1f})" if "math_ci95_low" in b else ""
        n = len(self.selection_sha256)
        rows = [["base", "", "", "", f"{n}", f"{100 * self.base_math_accuracy:.1f}%{base_ci}", "", "-", "-", "", ""]]
        for i, p in enumerate(self.points):
            mark = ("*" if i in self.front else "") + (" ? candidate" if i == self.candidate else "")
            gain = p.gain_points
            if p.base_correct is None and p.math_total:  # older files: over the base's count on all the problems
                gain = 100 * (p.math_correct - int(b.get("math_correct", 0))) / p.math_total
            acc = f"{100 * p.math_accuracy:.1f}% ({100 * p.math_ci95_low:.1f}-{100 * p.math_ci95_high:.1f})"
            setting = [p.variant or "-", show_setting(p.top_k), show_setting(p.scale), f"{p.selected:,}"]
            found = [f"{p.math_total}", acc, f"{gain:+.1f}", f"{p.mcnemar_p:.3g}", f"{p.holm_p:.3g}"]
            kl = f"{p.general_kl:.3g}" if math.isfinite(p.general_kl) else "-"
            rows.append(setting + found + [kl, mark.strip()])
        c = self.confirmation
        if c is not None:
            lo, hi = wilson_interval(c.edited_correct, c.n)
            base = f"base {100 * c.base_correct / c.n:.1f}%"
            mark = (
                f"confirmed ({base})"
                if c.confirmed
                else f"not confirmed ({base}; {detectable_text(c.n, c.base_only, c.edited_only, c.alpha)})"
            )
            acc = f"{100 * c.edited_correct / c.n:.1f}% ({100 * lo:.1f}-{100 * hi:.1f})"
            gain = f"{100 * (c.edited_correct - c.base_correct) / c.n:+.1f}"
            setting = ["confirm", show_setting(c.top_k), show_setting(c.scale), ""]
            rows.append(setting + [f"{c.n}", acc, gain, f"{c.mcnemar_p:.3g}", "-", "", mark])
        legend = (
            "gain: percentage points over the base on the same n problems; p: exact McNemar vs the base; "
            "general KL -: not needed (ranked out by its math counts before its KL could matter); "
            "mark *: Pareto front (no point has both a higher gain over the base on its problems and a lower KL), "
            "?: the candidate"
        )
        return table(_HEAD, rows, right={3, 4, 6, 7, 8, 9}) + "\n" + legend


_HEAD = ["variant", "top_k", "scale", "weights", "n", "math (95% CI)", "gain (pp)", "p", "Holm p", "general KL", "mark"]


def _num(x: Any) -> float:
    """An eval dict's number (``None`` where eval.json wrote a non-finite value) as a float."""
    return math.nan if x is None else float(x)


def _strict(x: Any) -> Any:
    """``x`` as JSON data with non-finite floats as ``None`` (strict JSON, as eval.json): Python's JSON writes them
    as ``NaN``/``Infinity``, which its reader hands to ``parse_constant``."""
    return json.loads(json.dumps(x), parse_constant=lambda _: None)


def _point(top_k: float, scale: float, selected: int, res: dict[str, Any]) -> SweepPoint:
    """A :class:`SweepPoint` from one edit's eval dict (``to_dict`` of :func:`~mathneuro_edit.evaluation.runner.evaluate`)."""
    m, g, c = res["math"]["edited"], res["general"]["edited"], res["math"].get("comparison") or {}
    gc = res["general"].get("comparison") or {}
    return SweepPoint(
        top_k,
        scale,
        selected,
        m["math_accuracy"],
        g["general_loss"],
        g["general_kl"],
        int(m["math_correct"]),
        int(m["math_total"]),
        m["math_ci95_low"],
        m["math_ci95_high"],
        c.get("mcnemar_p", 1.0),
        bool(c.get("significant", False)),
        _num(g.get("general_loss_se")),
        _num(gc.get("loss_change")),
        _num(gc.get("loss_change_se")),
    )


def _cell(value: Any) -> Any:
    """A CSV cell of a top_k or scale: the number, or a map (an Optuna trial's) as JSON."""
    return json.dumps(value, sort_keys=False) if isinstance(value, dict) else value


_MARKERS = "osD^vP*Xh<>p"  # one marker shape per top_k


def _plot(result: SweepResult, path: Path) -> Path | None:
    """Math gain over the base (on each point's own problems: :func:`math_merit`) vs general KL: one marker shape
    per top_k and one colour per scale (the legend names each, so every point is identified without labels that
    overlap), the Pareto front ringed and joined, the base as a dashed line at 0, every point and error bar inside
    the axes. A sweep without the base's per-point counts (older files) plots accuracy instead."""
    plt = pyplot(required=False)
    if plt is None:
        return None  # the CSV/JSON are the results; the PNG is a convenience of the plot extra
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    keep = [i for i, p in enumerate(result.points) if math.isfinite(p.general_kl)]  # a point without a KL: no x
    if not keep:
        plt.close(fig)
        return None
    merit = math_merit(result.points)
    gain = all(math.isfinite(p.gain_points) for p in result.points)
    base_y = 0.0 if gain else 100 * result.base_math_accuracy
    colors = plt.get_cmap("tab10")
    ks, ss = sorted({p.top_k for p in result.points}), sorted({p.scale for p in result.points})
    xs, lows, highs = _draw_points(ax, result, keep, merit, colors, ks, ss)
    _draw_front(ax, result, merit)
    ax.axhline(base_y, color="gray", ls="--", lw=1, zorder=0)
    _fit_axes(ax, xs, [*lows, base_y], [*highs, base_y])
    ax.set_xlabel("general KL(base || edited)")
    ax.set_ylabel("math accuracy - base's, same problems (points)" if gain else "math accuracy (%)")
    _legend(ax, result, colors, ks, ss)
    left_out = len(result.points) - len(keep)
    ax.set_title(
        "sweep: math accuracy vs general KL (bars: 95% CI)"
        + (f"\n{left_out} points ranked out before their KL was needed are not drawn" if left_out else ""),
        fontsize=9,
    )
    ax.grid(alpha=0.3)
    return save_figure(fig, path)


def _draw_points(
    ax: Any, result: SweepResult, keep: list[int], merit: list[float], colors: Any, ks: list[Any], ss: list[Any]
) -> tuple[list[float], list[float], list[float]]:
    """Each drawn point at (KL, merit) with its marker (by its top_k's place in ``ks``) and colour (its scale's in
    ``ss``), over its error bar; returns the x values and the bars' low and high ends (the axes must hold them)."""
    pts = [result.points[i] for i in keep]
    ys = [merit[i] for i in keep]
    xs = [p.general_kl for p in pts]
    # the 95% Wilson interval of each point's accuracy, drawn around its merit: a bar that covers the base line is
    # not a demonstrated gain
    lows = [y - 100 * (p.math_accuracy - p.math_ci95_low) for p, y in zip(pts, ys)]
    highs = [y + 100 * (p.math_ci95_high - p.math_accuracy) for p, y in zip(pts, ys)]
    yerr = [[y - lo for y, lo in zip(ys, lows)], [hi - y for y, hi in zip(ys, highs)]]
    ax.errorbar(xs, ys, yerr=yerr, fmt="none", ecolor="gray", alpha=0.35, lw=1, zorder=1)
    for p, y in zip(pts, ys):
        marker, color = _MARKERS[ks.index(p.top_k) % len(_MARKERS)], colors(ss.index(p.scale) % 10)
        ax.scatter([p.general_kl], [y], marker=marker, color=color, s=36, zorder=3, edgecolors="black", linewidths=0.4)
    return xs, lows, highs


def _draw_front(ax: Any, result: SweepResult, merit: list[float]) -> None:
    """The Pareto front joined by a line and ringed, and the recommended point named."""
    front = sorted(result.front, key=lambda i: result.points[i].general_kl)
    fx, fy = [result.points[i].general_kl for i in front], [merit[i] for i in front]
    ax.plot(fx, fy, "-", color="red", lw=1, alpha=0.6, zorder=2)
    ax.scatter(fx, fy, s=110, facecolors="none", edgecolors="red", linewidths=1, zorder=2)
    if result.best is not None:
        at = (result.points[result.best].general_kl, merit[result.best])
        ax.annotate("recommended", at, xytext=(6, 6), fontsize=7, textcoords="offset points", zorder=4)


def _fit_axes(ax: Any, xs: list[float], lows: list[float], highs: list[float]) -> None:
    """Every point inside the axes: margins around the points, their error bars and the base line (in ``lows``
    and ``highs``); a log KL axis, or symlog when a KL is exactly 0."""
    lo, hi = min(lows), max(highs)
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


def _legend(ax: Any, result: SweepResult, colors: Any, ks: list[Any], ss: list[Any]) -> None:
    """One legend entry per top_k (its marker), per scale (its colour), the front and the base, outside the axes."""
    from matplotlib.lines import Line2D

    handles = [
        Line2D([], [], ls="", marker=_MARKERS[i % len(_MARKERS)], color="black", label=f"top_k={k:g}")
        for i, k in enumerate(ks)
    ]
    handles += [
        Line2D([], [], ls="", marker="s", color=colors(i % 10), label=f"scale x{s:g}") for i, s in enumerate(ss)
    ]
    handles += [
        Line2D([], [], color="red", alpha=0.6, marker="o", mfc="none", label="Pareto front"),
        Line2D([], [], color="gray", ls="--", label=f"base ({100 * result.base_math_accuracy:.1f}%)"),
    ]
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
