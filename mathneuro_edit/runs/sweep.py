"""Sweeps that choose a setting on one set of problems and confirm it on another (issue 21).

One calibration, a mask per top_k derived from the saved statistics, each edit switched on with
:class:`~mathneuro_edit.engine.apply.ReversibleEdit` on one model and evaluated in memory. The math problems of
``evaluation.math`` are split in two disjoint sets (:func:`sweep_problems`):

- **selection** (``sweep.selection_samples``): every ``(top_k, scale)`` point and the base are evaluated on it
  (math exact match, general loss, KL(base || edited)); each point gets its raw exact McNemar p against the base
  and its Holm-Bonferroni adjusted p over the grid (:func:`~mathneuro_edit.evaluation.significance.holm_adjust`);
- **confirmation** (``sweep.confirmation_samples``), never used for choosing: only the single candidate
  (:func:`select_candidate`: the largest selection gain within ``sweep.kl_budget``) and the base are evaluated on
  it, with ONE paired exact McNemar test (:func:`confirm`).

A setting is recommended only when that test shows a gain with ``p < sweep.alpha``; otherwise the recommendation
says that nothing is confirmed. Why: with a 20-point grid, the best of 20 uncorrected tests on the same problems is
"significant" in about a quarter of sweeps where no edit does anything (25.2% of 1,000 simulated, 300 problems,
10% discordance: tests/runs/test_sweep_procedure.py); a test on fresh problems of the one setting chosen beforehand
has its nominal level.

Outputs (names in :mod:`mathneuro_edit.layout`): ``sweep.json`` (the contract in docs/evaluation.md),
``sweep.csv`` (one row per point, raw and Holm p), ``sweep.png`` (math accuracy vs general KL, Pareto front; needs
matplotlib) and the statistics. Every accuracy carries its 95% Wilson interval.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from ..data.sources import load_math_problems, load_set, problem_sha256
from ..engine.apply import ReversibleEdit, check_scale
from ..engine.mask import find_math_params_multi
from ..engine.topk import top_k_hint
from ..errors import InputError
from ..evaluation.report import format_p
from ..evaluation.runner import GeneralTask, MathTask, evaluate
from ..evaluation.significance import holm_adjust, mcnemar_exact, wilson_interval
from ..layout import (
    MATH_STATS_NAME,
    SWEEP_CSV,
    SWEEP_JSON,
    SWEEP_PNG,
    general_stats_name,
)
from ..recipe.io import recipe_from_dict
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
    run_recipe,
)

__all__ = ["SweepPoint", "Confirmation", "SweepResult", "run_sweep", "sweep_problems", "pareto_front",
           "select_candidate", "confirm", "recommend", "read_sweep", "SweepEvidence"]

_KEYS = ("question", "answer", "prefill")


@dataclass(frozen=True)
class SweepPoint:
    """One edit evaluated on the selection problems (the base is reported separately).

    ``mcnemar_p`` compares it with the base on the same problems (raw: one test of the grid), ``significant`` is
    ``mcnemar_p < 0.05`` as the evaluation reports it, ``holm_p`` the Holm-Bonferroni adjusted p over the grid. A
    point built without them (the defaults) has p = 1.
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
    holm_p: float = 1.0


@dataclass(frozen=True)
class Confirmation:
    """The one pre-registered test: the candidate and the base on the confirmation problems.

    ``confirmed`` is ``edited_correct > base_correct and mcnemar_p < alpha`` (:func:`confirm`).
    """

    n: int
    problems_sha256: tuple[str, ...]
    top_k: float
    scale: float
    base_correct: int
    edited_correct: int
    base_only: int
    edited_only: int
    mcnemar_p: float
    confirmed: bool
    alpha: float
    point: int  # index of the candidate in the selection points
    mask_sha256: str = ""

    def to_dict(self) -> dict[str, Any]:
        lo_b, hi_b = wilson_interval(self.base_correct, self.n)
        lo_e, hi_e = wilson_interval(self.edited_correct, self.n)
        return {"n": self.n, "problems_sha256": list(self.problems_sha256), "top_k": self.top_k, "scale": self.scale,
                "base_correct": self.base_correct, "edited_correct": self.edited_correct,
                "mcnemar_p": self.mcnemar_p, "confirmed": self.confirmed, "alpha": self.alpha, "point": self.point,
                "base_only": self.base_only, "edited_only": self.edited_only,
                "base_ci95": [lo_b, hi_b], "edited_ci95": [lo_e, hi_e], "mask_sha256": self.mask_sha256}


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


def with_holm(points: Sequence[SweepPoint]) -> list[SweepPoint]:
    """The points with ``holm_p`` set: Holm-Bonferroni over the raw McNemar p of the whole grid."""
    return [replace(p, holm_p=h) for p, h in zip(points, holm_adjust([p.mcnemar_p for p in points]))]


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


def select_candidate(points: Sequence[SweepPoint], base_correct: int, kl_budget: float) -> int | None:
    """The one point to confirm: the largest selection gain (``math_correct - base_correct > 0``) among the points
    with ``general_kl <= kl_budget``; ties go to the lower KL, then the earlier point. ``None`` when no point
    within the budget gains at all.

    The p-values play no part: the confirmation test decides, and choosing by gain alone keeps the choice free of
    the test's level.

    Example:
        >>> P = lambda k, kl: SweepPoint(0.05, 1.1, 9, k / 100, 2.0, kl, math_correct=k, math_total=100)
        >>> select_candidate([P(40, 0.01), P(45, 0.2), P(43, 0.02), P(43, 0.01)], 35, 0.05)
        3
    """
    best = None
    for i, p in enumerate(points):
        if not (p.general_kl <= kl_budget and p.math_correct > base_correct):
            continue
        if best is None or (p.math_correct, -p.general_kl) > (points[best].math_correct, -points[best].general_kl):
            best = i
    return best


def confirm(base: Sequence[bool], edited: Sequence[bool], alpha: float) -> tuple[int, int, float, bool]:
    """The confirmation test on paired outcomes of the same problems.

    Returns:
        ``(base_only, edited_only, p, confirmed)``: the discordant counts, the two-sided exact McNemar p and
        whether it shows a gain (``edited_only > base_only and p < alpha``).

    Example:
        >>> confirm([False] * 10, [True] * 8 + [False] * 2, 0.05)
        (0, 8, 0.0078125, True)
    """
    if len(base) != len(edited):
        raise ValueError(f"confirm: {len(base)} base vs {len(edited)} edited outcomes; pair the same problems")
    b = sum(1 for x, y in zip(base, edited) if x and not y)
    c = sum(1 for x, y in zip(base, edited) if y and not x)
    p = mcnemar_exact(b, c)
    return b, c, p, c > b and p < alpha


def recommend(points: Sequence[SweepPoint], base_correct: int, n_selection: int, candidate: int | None,
              confirmation: Confirmation | None, kl_budget: float) -> tuple[int | None, str]:
    """``(best, sentence)``: the confirmed point and what the selection and the confirmation showed, or ``None``
    and a sentence that starts ``nothing confirmed:``.

    Example:
        >>> recommend([SweepPoint(0.05, 1.1, 9, 0.3, 2.0, 0.0, 30, 100)], 35, 100, None, None, 0.05)[1][:18]
        'nothing confirmed:'
    """
    base_pct = 100 * base_correct / n_selection if n_selection else 0.0
    if candidate is None:
        return None, (f"nothing confirmed: no setting within the general-KL budget {kl_budget:g} raises math accuracy "
                      f"over the base ({base_pct:.1f}% on {n_selection} selection problems), so none was tested on "
                      "the confirmation problems; do not publish a boost from this sweep")
    p = points[candidate]
    chosen = (f"top_k={p.top_k:g} scale={p.scale:g}, chosen among {len(points)} settings on {n_selection} selection "
              f"problems ({base_pct:.1f}% -> {100 * p.math_accuracy:.1f}%, {p.math_correct - base_correct:+d} "
              f"problem{'' if abs(p.math_correct - base_correct) == 1 else 's'}, "
              f"raw {format_p(p.mcnemar_p)}, Holm {format_p(p.holm_p)}, general KL {p.general_kl:.4g}, budget "
              f"{kl_budget:g})")
    if confirmation is None:
        return None, f"nothing confirmed: the candidate {chosen} was not tested on confirmation problems"
    c = confirmation
    lo_b, hi_b = wilson_interval(c.base_correct, c.n)
    lo_e, hi_e = wilson_interval(c.edited_correct, c.n)
    measured = (f"on {c.n} other problems: base {100 * c.base_correct / c.n:.1f}% ({c.base_correct}/{c.n}, "
                f"{100 * lo_b:.1f}-{100 * hi_b:.1f}) -> {100 * c.edited_correct / c.n:.1f}% ({c.edited_correct}/"
                f"{c.n}, {100 * lo_e:.1f}-{100 * hi_e:.1f}), {100 * (c.edited_correct - c.base_correct) / c.n:+.1f} "
                f"points, {c.base_only} right only before and {c.edited_only} only after, exact McNemar "
                f"{format_p(c.mcnemar_p)}")
    if c.confirmed:
        return candidate, f"recommended: {chosen}; confirmed {measured} (< {c.alpha:g})"
    return None, (f"nothing confirmed: the candidate {chosen} did not confirm {measured} (a confirmed gain needs "
                  f"p < {c.alpha:g}); do not publish a boost from this sweep")


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


# ------------------------------------------------------------------------------------ from a sweep to a release

# the recipe keys that define which weights a setting edits: a release must share them with its sweep
_SAME = ("base.model", "base.gguf_file", "base.revision", "base.dtype", "data", "calibration", "targets",
         "mask.method", "mask.granularity", "mask.seed")


def _at(d: Mapping[str, Any], key: str) -> Any:
    for part in key.split("."):
        d = d.get(part) if isinstance(d, Mapping) else None  # type: ignore[assignment]
    return d


@dataclass(frozen=True)
class SweepEvidence:
    """What a release takes from a sweep whose candidate was confirmed (read with :func:`read_sweep`)."""

    top_k: float
    scale: float
    selection_sha256: tuple[str, ...]
    confirmation: dict[str, Any]
    selection_point: dict[str, Any]
    n_settings: int
    sweep_sha256: str
    recipe: dict[str, Any]
    selection_base_correct: int | None = None

    def lock_entry(self) -> dict[str, Any]:
        """The lock's ``sweep`` section: the sweep file's hash, the chosen setting, the selection and the
        confirmation (each with its problems' sha256)."""
        c = self.confirmation
        return {"sweep_sha256": self.sweep_sha256, "top_k": self.top_k, "scale": self.scale,
                "settings": self.n_settings,
                "selection": {"n": len(self.selection_sha256), "problems_sha256": list(self.selection_sha256),
                              "base_correct": self.selection_base_correct,
                              **{k: self.selection_point.get(k) for k in ("math_correct", "math_total", "mcnemar_p",
                                                                          "holm_p", "general_kl")}},
                "confirmation": {k: c.get(k) for k in ("n", "base_correct", "edited_correct", "base_only",
                                                       "edited_only", "mcnemar_p", "alpha", "confirmed",
                                                       "mask_sha256", "problems_sha256")}}


def read_sweep(sweep_dir: str | Path) -> SweepEvidence:
    """The confirmed setting of a sweep folder.

    Raises:
        InputError: no readable ``sweep.json`` of this contract, or nothing confirmed (one line that says so).
    """
    path = Path(sweep_dir) / SWEEP_JSON
    try:
        raw = path.read_bytes()
        data = json.loads(raw)
    except FileNotFoundError:
        raise InputError(f"{path}: not found; pass the --out folder of a `mathneuro-edit sweep`") from None
    except (OSError, ValueError) as e:
        raise InputError(f"{path}: cannot read it as JSON ({e}); re-run the sweep") from None
    if not isinstance(data, dict) or not isinstance(data.get("selection"), dict) or "confirmation" not in data:
        raise InputError(f"{path}: not a sweep.json with selection and confirmation (written before select-then-"
                         "confirm?); re-run the sweep")
    c = data["confirmation"]
    if not (isinstance(c, dict) and c.get("confirmed") is True):
        why = str(data.get("recommendation") or "nothing confirmed").split(";")[0]
        raise InputError(f"{path}: nothing was confirmed ({why}); there is no setting to release from this sweep")
    sel = data["selection"]
    try:
        b, k, alpha = int(c["base_only"]), int(c["edited_only"]), float(c["alpha"])
        if not (k > b and mcnemar_exact(b, k) < alpha and set(c["problems_sha256"]).isdisjoint(
                sel["problems_sha256"])):
            raise InputError(f"{path}: its confirmation says confirmed, but its counts ({b} right only before, {k} "
                             f"only after: {format_p(mcnemar_exact(b, k))}, level {alpha:g}) or its problem lists "
                             "do not; the file was edited: re-run the sweep")
        point = sel["points"][c["point"]]
        return SweepEvidence(float(c["top_k"]), float(c["scale"]), tuple(sel["problems_sha256"]), dict(c),
                             dict(point), len(sel["points"]), hashlib.sha256(raw).hexdigest(), dict(data["recipe"]),
                             (sel.get("base") or {}).get("math_correct"))
    except (KeyError, IndexError, TypeError, ValueError) as e:
        raise InputError(f"{path}: incomplete sweep.json ({type(e).__name__}: {e}); re-run the sweep") from None


def recipe_from_sweep(recipe: Recipe, evidence: SweepEvidence, where: str = "--from-sweep") -> Recipe:
    """``recipe`` with the confirmed ``mask.top_k`` and edit (``scale``, or ``prune`` for 0).

    Raises:
        InputError: the recipe differs from the sweep's in a key that decides which weights are edited.
    """
    mine = recipe.public_dict()
    for key in _SAME:
        if _at(mine, key) != _at(evidence.recipe, key):
            raise InputError(f"{where}: the recipe's {key} differs from the sweep's ({_at(mine, key)!r} vs "
                             f"{_at(evidence.recipe, key)!r}); the confirmed setting holds only for the sweep's "
                             "recipe: use it, or sweep this one")
    edit = ["edit.prune=true"] if evidence.scale == 0 else [f"edit.scale={evidence.scale!r}"]
    return recipe_from_dict(recipe.resolved_dict(), [f"mask.top_k={evidence.top_k!r}", *edit], where=where)


def run_from_sweep(recipe: Recipe, sweep_dir: str | Path, out_dir: str | Path, **kwargs: Any):
    """``run`` with the setting a sweep confirmed: the lock records the sweep's evidence and the card states it
    (:func:`~mathneuro_edit.runs.pipeline.run_recipe` with ``sweep_evidence``)."""
    evidence = read_sweep(sweep_dir)
    return run_recipe(recipe_from_sweep(recipe, evidence), out_dir, sweep_evidence=evidence.lock_entry(), **kwargs)
