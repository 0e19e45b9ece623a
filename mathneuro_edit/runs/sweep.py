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
``sweep.csv`` (one row per point, raw and Holm p), ``sweep.png`` (math gain over the base vs general KL, Pareto front;
needs matplotlib) and the statistics. Every accuracy carries its 95% Wilson interval. The procedure itself (pure
functions of the counts): :mod:`.sweep_procedure`; from a confirmed sweep to a release: :mod:`.sweep_release`.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import time
import warnings
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..data.sources import load_math_problems, load_set, load_texts, problem_sha256
from ..engine.apply import ReversibleEdit, check_scale
from ..engine.distributed import calibrate_distributed as calibrate
from ..engine.mask import find_math_params_multi
from ..engine.targets import find_targets
from ..engine.topk import top_k_hint
from ..errors import InputError
from ..evaluation.general_kl import BaseSupport, base_support, edited_general
from ..evaluation.greedy import math_outcomes
from ..evaluation.prompts import uses_chat_template
from ..evaluation.results import GeneralResult, compare
from ..evaluation.significance import discordant_pairs, mcnemar_exact, significant, wilson_interval
from ..layout import (
    STATS_DIR,
    SWEEP_CSV,
    SWEEP_JSON,
    SWEEP_PNG,
)
from ..recipe.io import recipe_from_dict
from ..recipe.schema import Recipe, recipe_sha256
from ..util.console import Stages, table
from ..util.files import write_json_atomic, write_text_atomic
from ..util.outdir import claim
from ..weights.loading import model_weights
from .inspect import pyplot, save_figure
from .official import refuse_official
from .steps import load_step
from .sweep_cache import CACHE_DIR, ResultCache, key_sha256
from .sweep_procedure import (
    Confirmation,
    SweepPoint,
    confirm,
    halving_schedule,
    math_merit,
    pareto_front,
    promote,
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
    # the adaptive selection: one entry per round (its problems [start, end), the points evaluated, their counts
    # on every problem seen so far); the variants (name and recipe overrides); per point the base's mean mass
    # outside the KL support (the KL is a lower bound that leaves this mass's inner divergence out)
    rounds: list[dict[str, Any]] = field(default_factory=list)
    variants: list[dict[str, Any]] = field(default_factory=list)
    general_tail_mass: list[float | None] = field(default_factory=list)

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
            "rounds": self.rounds,
            "variants": self.variants,
            "general_kl_tail_mass": self.general_tail_mass,
        }

    def to_csv(self) -> str:
        buf = io.StringIO()
        w = csv.writer(buf)
        w.writerow(
            [
                "variant",
                "round",
                "top_k",
                "scale",
                "selected",
                "math_accuracy",
                "math_correct",
                "math_total",
                "math_ci95_low",
                "math_ci95_high",
                "mcnemar_p",
                "holm_p",
                "significant",
                "general_loss",
                "general_loss_se",
                "loss_change",
                "loss_change_se",
                "general_kl",
                "pareto",
                "candidate",
                "confirmed",
            ]
        )
        c = self.confirmation
        for i, p in enumerate(self.points):
            w.writerow(
                [
                    p.variant,
                    p.round,
                    p.top_k,
                    p.scale,
                    p.selected,
                    p.math_accuracy,
                    p.math_correct,
                    p.math_total,
                    f"{p.math_ci95_low:.4f}",
                    f"{p.math_ci95_high:.4f}",
                    f"{p.mcnemar_p:.4g}",
                    f"{p.holm_p:.4g}",
                    p.significant,
                    p.general_loss,
                    f"{p.general_loss_se:.4g}",
                    f"{p.loss_change:.4g}",
                    f"{p.loss_change_se:.4g}",
                    p.general_kl if math.isfinite(p.general_kl) else "",
                    i in self.front,
                    i == self.candidate,
                    bool(c is not None and c.point == i and c.confirmed),
                ]
            )
        return buf.getvalue()

    def to_text(self) -> str:
        """The console table: the base, one row per point (its variant, the problems it was evaluated on, math with
        its 95% CI, the gain over the base on those same problems in percentage points, raw and Holm-adjusted
        McNemar p, general KL; mark ``*``: on the Pareto front of gain vs KL, ``?``: the candidate), then the
        confirmation row (the CSV holds every column)."""
        b = self.base_math
        base_ci = f" ({100 * b['math_ci95_low']:.1f}-{100 * b['math_ci95_high']:.1f})" if "math_ci95_low" in b else ""
        n = len(self.selection_sha256)
        rows = [["base", "", "", "", f"{n}", f"{100 * self.base_math_accuracy:.1f}%{base_ci}", "", "-", "-", "", ""]]
        for i, p in enumerate(self.points):
            mark = ("*" if i in self.front else "") + (" ? candidate" if i == self.candidate else "")
            gain = (
                p.gain_points
                if p.base_correct is not None
                else (
                    100 * (p.math_correct - int(b.get("math_correct", 0))) / p.math_total if p.math_total else math.nan
                )
            )
            rows.append(
                [
                    p.variant or "-",
                    f"{p.top_k:g}",
                    f"{p.scale:g}",
                    f"{p.selected:,}",
                    f"{p.math_total}",
                    f"{100 * p.math_accuracy:.1f}% ({100 * p.math_ci95_low:.1f}-{100 * p.math_ci95_high:.1f})",
                    f"{gain:+.1f}",
                    f"{p.mcnemar_p:.3g}",
                    f"{p.holm_p:.3g}",
                    _kl_text(p.general_kl),
                    mark.strip(),
                ]
            )
        c = self.confirmation
        if c is not None:
            lo, hi = wilson_interval(c.edited_correct, c.n)
            rows.append(
                [
                    "confirm",
                    f"{c.top_k:g}",
                    f"{c.scale:g}",
                    "",
                    f"{c.n}",
                    f"{100 * c.edited_correct / c.n:.1f}% ({100 * lo:.1f}-{100 * hi:.1f})",
                    f"{100 * (c.edited_correct - c.base_correct) / c.n:+.1f}",
                    f"{c.mcnemar_p:.3g}",
                    "-",
                    "",
                    ("confirmed" if c.confirmed else "not confirmed") + f" (base {100 * c.base_correct / c.n:.1f}%)",
                ]
            )
        head = [
            "variant",
            "top_k",
            "scale",
            "weights",
            "n",
            "math (95% CI)",
            "gain (pp)",
            "p",
            "Holm p",
            "general KL",
            "mark",
        ]
        legend = (
            "gain: percentage points over the base on the same n problems; p: exact McNemar vs the base; "
            "general KL -: not needed (ranked out by its math counts before its KL could matter); "
            "mark *: Pareto front (no point has both a higher gain over the base on its problems and a lower KL), "
            "?: the candidate"
        )
        return table(head, rows, right={3, 4, 6, 7, 8, 9}) + "\n" + legend


def _kl_text(kl: float) -> str:
    return f"{kl:.3g}" if math.isfinite(kl) else "-"


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


def _plot(result: SweepResult, path: Path) -> Path | None:
    """Math gain over the base (on each point's own problems: :func:`math_merit`) vs general KL: one marker shape
    per top_k and one colour per scale (the legend names each, so every point is identified without labels that
    overlap), the Pareto front ringed and joined, the base as a dashed line at 0, every point and error bar inside
    the axes. A sweep without the base's per-point counts (older files) plots accuracy instead."""
    plt = pyplot(required=False)
    if plt is None:
        return None  # the CSV/JSON are the results; the PNG is a convenience of the plot extra
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    ks = sorted({p.top_k for p in result.points})
    ss = sorted({p.scale for p in result.points})
    keep = [i for i, p in enumerate(result.points) if math.isfinite(p.general_kl)]  # a point without a KL: no x
    if not keep:
        plt.close(fig)
        return None
    merit = math_merit(result.points)
    gain = all(math.isfinite(p.gain_points) for p in result.points)
    base_y = 0.0 if gain else 100 * result.base_math_accuracy
    pts = [result.points[i] for i in keep]
    ys = [merit[i] for i in keep]
    xs = [p.general_kl for p in pts]
    # the 95% Wilson interval of each point's accuracy, drawn around its merit: a bar that covers the base line is
    # not a demonstrated gain
    lows = [y - 100 * (p.math_accuracy - p.math_ci95_low) for p, y in zip(pts, ys)]
    highs = [y + 100 * (p.math_ci95_high - p.math_accuracy) for p, y in zip(pts, ys)]
    markers = "osD^vP*Xh<>p"
    colors = plt.get_cmap("tab10")
    ax.errorbar(
        xs,
        ys,
        yerr=[[y - lo for y, lo in zip(ys, lows)], [hi - y for y, hi in zip(ys, highs)]],
        fmt="none",
        ecolor="gray",
        alpha=0.35,
        lw=1,
        zorder=1,
    )
    for p, y in zip(pts, ys):
        ax.scatter(
            [p.general_kl],
            [y],
            marker=markers[ks.index(p.top_k) % len(markers)],
            color=colors(ss.index(p.scale) % 10),
            s=36,
            zorder=3,
            edgecolors="black",
            linewidths=0.4,
        )
    front = sorted(result.front, key=lambda i: result.points[i].general_kl)
    for style in ("line", "rings"):
        fx, fy = [result.points[i].general_kl for i in front], [merit[i] for i in front]
        if style == "line":
            ax.plot(fx, fy, "-", color="red", lw=1, alpha=0.6, zorder=2)
        else:
            ax.scatter(fx, fy, s=110, facecolors="none", edgecolors="red", linewidths=1, zorder=2)
    if result.best is not None:
        ax.annotate(
            "recommended",
            (result.points[result.best].general_kl, merit[result.best]),
            xytext=(6, 6),
            fontsize=7,
            textcoords="offset points",
            zorder=4,
        )
    ax.axhline(base_y, color="gray", ls="--", lw=1, zorder=0)
    # every point inside the axes: margins around the points, their error bars and the base line
    lo, hi = min([*lows, base_y]), max([*highs, base_y])
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
    ax.set_ylabel("math accuracy - base's, same problems (points)" if gain else "math accuracy (%)")
    from matplotlib.lines import Line2D

    handles = [
        Line2D([], [], ls="", marker=markers[i % len(markers)], color="black", label=f"top_k={k:g}")
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
    left_out = len(result.points) - len(pts)
    ax.set_title(
        "sweep: math accuracy vs general KL (bars: 95% CI)"
        + (f"\n{left_out} points ranked out before their KL was needed are not drawn" if left_out else ""),
        fontsize=9,
    )
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
        raise InputError(
            f"evaluation.math: {ev.math.public_path()} has {len(problems)} problems; the sweep needs "
            f"evaluation.n_shot + sweep.selection_samples + sweep.confirmation_samples = {ev.n_shot} + "
            f"{sw.selection_samples} + {sw.confirmation_samples} = {want}; lower "
            "sweep.selection_samples or sweep.confirmation_samples (--set)"
        )
    strip = [{k: p[k] for k in _KEYS if k in p} for p in problems]
    shots = strip[: ev.n_shot]
    selection = strip[ev.n_shot : ev.n_shot + sw.selection_samples]
    seen = {problem_sha256(p) for p in shots + selection}
    confirmation = []
    for p in strip[ev.n_shot + sw.selection_samples :]:
        h = problem_sha256(p)
        if h not in seen:
            seen.add(h)
            confirmation.append(p)
    return shots, selection, confirmation


DEFAULT_TOP_KS = (0.001, 0.01, 0.05, 0.1, 0.15)
DEFAULT_SCALES = (0.0, 1.05, 1.1, 1.2)
# problems per cached block: a kill loses at most one block per point in progress; round boundaries also cut blocks
BLOCK = 128


@dataclass
class _Variant:
    """One calibration / target choice: its recipe, its statistics group and its target names."""

    name: str
    overrides: tuple[str, ...]
    recipe: Recipe
    group: int  # index of its statistics (variants that differ in targets only share one calibration)


@dataclass
class _Arm:
    """One grid point: a variant, top_k, scale and its mask."""

    variant: int
    top_k: float
    scale: float
    mask: Any = None
    correct: list[bool] = field(default_factory=list)  # on the selection problems seen so far, in order
    general: dict[str, Any] | None = None
    round: int = 0


def model_weights_sha256(model: Any) -> str:
    """sha256 of the model's parameters and buffers (names, dtypes, shapes and their bytes): the cache's model key,
    independent of where the files were. (:func:`~mathneuro_edit.engine.targets.model_fingerprint` hashes the
    shapes only: two checkpoints of one architecture share it, and must not share cached results.)"""
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}\n".encode())
        h.update(t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _blocks(start: int, end: int, cuts: Sequence[int]) -> list[tuple[int, int]]:
    """``[start, end)`` cut at every multiple of :data:`BLOCK` and at ``cuts``: the same blocks in every run."""
    edges = sorted(
        {start, end, *[c for c in cuts if start < c < end], *range((start // BLOCK + 1) * BLOCK, end, BLOCK)}
    )
    return list(zip(edges[:-1], edges[1:]))


class _Evaluator:
    """Evaluates the base or an edit on blocks of problems and the general texts, through the result cache."""

    def __init__(
        self,
        model: Any,
        tok: Any,
        recipe: Recipe,
        shots: list[dict[str, Any]],
        texts: Sequence[str],
        fingerprint: str,
        cache: ResultCache,
        progress: bool,
    ) -> None:
        ev, sw = recipe.evaluation, recipe.sweep
        assert ev is not None
        self.model, self.tok, self.cache, self.progress = model, tok, cache, progress
        self.shots, self.n_shot, self.max_new = shots, ev.n_shot, ev.max_new_tokens
        self.chat = uses_chat_template(tok, ev.chat_template)
        self.style = ev.prompt_style
        self.batch_size, self.k = sw.batch_size, sw.kl_support
        self.texts, self.max_length = list(texts), recipe.calibration.max_length
        self.prompt_key = {
            "model": fingerprint,
            "shots": [problem_sha256(s) for s in shots[: self.n_shot]],
            "chat_template": self.chat,
            **({} if self.style == "question-answer" else {"prompt_style": self.style}),
            "max_new_tokens": self.max_new,
            "batch_size": self.batch_size,
            "engine": "greedy-shared-prefix/1",
        }
        self.general_key = {
            "model": fingerprint,
            "texts": hashlib.sha256(json.dumps(self.texts).encode()).hexdigest(),
            "max_length": self.max_length,
            "kl_support": self.k,
            "engine": "general-support/1",
        }
        self._support: BaseSupport | None = None

    def _state(self, mask: Any, scale: float) -> dict[str, Any]:
        return {"base": True} if mask is None else {"mask": mask.sha256, "scale": scale}

    def math(self, problems: Sequence[dict[str, Any]], mask: Any = None, scale: float = 1.0) -> list[bool]:
        """Correct flags of the base (``mask=None``) or the edit on ``problems`` (one block), cached."""
        key = {
            "what": "math",
            **self.prompt_key,
            **self._state(mask, scale),
            "problems": [problem_sha256(p) for p in problems],
        }
        hit = self.cache.get(key)
        if hit is None:
            cpu = time.process_time()
            with ReversibleEdit(self.model, mask, scale) if mask is not None else nullcontext():
                correct, completions = math_outcomes(
                    self.model,
                    self.tok,
                    problems,
                    shots=self.shots[: self.n_shot],
                    chat_template=self.chat,
                    prompt_style=self.style,
                    max_new_tokens=self.max_new,
                    batch_size=self.batch_size,
                )
            # the CPU seconds this block took (benchmarks/bench_search.py sums them: a search's cost survives kills)
            hit = {"correct": correct, "completions": completions, "cpu_s": round(time.process_time() - cpu, 3)}
            self.cache.put(key, hit)
        return [bool(c) for c in hit["correct"]]

    def base_general(self) -> dict[str, Any]:
        key = {"what": "general-base", **self.general_key}
        hit = self.cache.get(key)
        if hit is None:
            hit = {"loss_sums": self.support().loss_sums, "tokens": [len(r) - 1 for r in self.support().rows]}
            self.cache.put(key, hit)
        return hit

    def support(self) -> BaseSupport:
        if self._support is None:
            self._support = base_support(self.model, self.tok, self.texts, max_length=self.max_length, k=self.k)
        return self._support

    def general(self, mask: Any, scale: float) -> dict[str, Any]:
        """Loss sums per text, coarse KL and tail mass of an edit on the general texts, cached."""
        key = {"what": "general", **self.general_key, **self._state(mask, scale)}
        hit = self.cache.get(key)
        if hit is None:
            cpu = time.process_time()
            support = self.support()
            with ReversibleEdit(self.model, mask, scale):
                g = edited_general(self.model, support)
            hit = {
                "loss_sums": list(g.loss_sums),
                "kl": g.kl,
                "tail_mass": g.tail_mass,
                "cpu_s": round(time.process_time() - cpu, 3),
            }
            self.cache.put(key, hit)
        return hit


def _general_result(sums: Sequence[float], tokens: Sequence[int], kl: float = 0.0) -> GeneralResult:
    pairs = [(s, t) for s, t in zip(sums, tokens) if t > 0]
    n = sum(t for _, t in pairs)
    return GeneralResult(
        sum(s for s, _ in pairs) / n if n else math.nan,
        n,
        kl,
        "",
        tuple(s for s, _ in pairs),
        tuple(t for _, t in pairs),
    )


def _sweep_point(arm: _Arm, name: str, base_correct: Sequence[bool], base_general: dict[str, Any]) -> SweepPoint:
    """A :class:`SweepPoint` from an arm's flags (paired with the base's first ``len(flags)``) and general result."""
    n = len(arm.correct)
    k = sum(arm.correct)
    b, c = discordant_pairs(list(base_correct[:n]), arm.correct)
    p = mcnemar_exact(b, c)
    lo, hi = wilson_interval(k, n)
    g = arm.general or {}
    base_g = _general_result(base_general["loss_sums"], base_general["tokens"])
    ed_g = _general_result(g.get("loss_sums", []), base_general["tokens"], float(g.get("kl", math.nan)))
    cmp_ = compare(base_g, ed_g) or {}
    return SweepPoint(
        arm.top_k,
        arm.scale,
        arm.mask.total()[0],
        k / n if n else 0.0,
        ed_g.loss,
        ed_g.kl,
        k,
        n,
        lo,
        hi,
        p,
        significant(p),
        ed_g.loss_se,
        _num(cmp_.get("loss_change")),
        _num(cmp_.get("loss_change_se")),
        variant=name,
        round=arm.round,
        base_correct=sum(base_correct[:n]),
    )


def _variants(recipe: Recipe) -> list[_Variant]:
    """The recipe itself and each ``sweep.variants`` entry, grouped by calibration (data and calibration keys)."""
    out: list[_Variant] = []
    groups: list[str] = []
    for name, sets in [("", ()), *[(v.name, tuple(v.set)) for v in recipe.sweep.variants]]:
        r = (
            recipe
            if not sets
            else recipe_from_dict(recipe.resolved_dict(), list(sets), where=f"sweep.variants[{name}]")
        )
        d = r.resolved_dict()
        g = json.dumps([d["data"], d["calibration"]], sort_keys=True)
        if g not in groups:
            groups.append(g)
        out.append(_Variant(name, sets, r, groups.index(g)))
    names = [v.name for v in out]
    if len(set(names)) != len(names):
        raise InputError("sweep.variants: two variants have the same name; give each its own")
    return out


def _calibrated_set(
    recipe: Recipe,
    source: Any,
    what: str,
    model: Any,
    tok: Any,
    folder: Path,
    fingerprint: str,
    progress: bool,
    stages: Stages,
) -> Any:
    """One calibration set's statistics, computed once and kept in ``folder`` under its content key (model,
    texts, calibration settings, targets): variants that share a set (the general texts) share its statistics."""
    from ..engine.stats import ActivationStats

    d, c, t = recipe.data, recipe.calibration, recipe.targets
    loaded = load_texts(source, d.samples, d.seed)
    key = {
        "model": fingerprint,
        "texts": loaded.record["sha256"],
        "calibration": recipe.resolved_dict()["calibration"],
        "targets": recipe.resolved_dict()["targets"],
        "format": "stats/1",
    }
    sha = key_sha256(key)
    path, key_file = folder / f"{sha[:16]}.stats.safetensors", folder / f"{sha[:16]}.key.json"
    if key_file.is_file():
        try:
            saved = json.loads(key_file.read_text())
            ok = saved.get("key") == key and hashlib.sha256(path.read_bytes()).hexdigest() == saved["sha256"]
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            ok = False
        if not ok:
            raise InputError(
                f"sweep cache: {path} does not match {key_file.name} (edited or corrupted); delete both "
                "and run the same command again"
            )
        stages.start(f"calibrate {what}: reused ({len(loaded.texts)} texts)")
        return ActivationStats.load(path)
    stages.start(f"calibrate {what} ({len(loaded.texts)} texts)")
    stats = calibrate(
        model,
        tok,
        loaded.texts,
        max_length=c.max_length,
        batch_size=c.batch_size,
        progress=progress,
        include=t.include or None,
        exclude=t.exclude or None,
    )
    folder.mkdir(parents=True, exist_ok=True)
    stats.save(path)
    write_json_atomic(key_file, {"key": key, "sha256": hashlib.sha256(path.read_bytes()).hexdigest()})
    return stats


def _set_label(recipe: Recipe, source: Any) -> str:
    """What makes two calibration sets the same set: the source and how it is sampled."""
    return json.dumps([source.model_dump(mode="json"), recipe.data.samples, recipe.data.seed], sort_keys=True)


def _variant_mask(mask: Any, keep: set[str]) -> Any:
    """``mask`` restricted to the parameter names a variant targets."""
    from ..engine.mask import Mask

    return Mask({n: mask[n] for n in mask if n in keep}, dict(mask.meta))


def run_sweep(
    recipe: Recipe,
    out_dir: str | Path,
    *,
    top_ks: Sequence[float] | None = None,
    scales: Sequence[float] | None = None,
    overwrite: bool = False,
    progress: bool = True,
    echo: Callable[[str], None] = lambda s: None,
) -> SweepResult:
    """Sweep a grid of edits with one model in memory: select (adaptively), then confirm on other problems.

    The grid is ``variants x top_ks x scales``: the recipe itself and each ``sweep.variants`` entry (another
    calibration set or target restriction), each with every ``(top_k, scale)``. Each point gets a mask from its
    variant's statistics and is switched on with :class:`~mathneuro_edit.engine.apply.ReversibleEdit`.

    Selection (``sweep.selection_samples`` problems): with ``sweep.first_round`` unset every point is evaluated on
    every selection problem; with it, successive halving (:func:`~.sweep_procedure.halving_schedule`,
    :func:`~.sweep_procedure.promote`). The candidate is the largest gain over the base among the points that
    reached the last round, within ``sweep.kl_budget``; it and the base are then evaluated on
    ``sweep.confirmation_samples`` other problems, with one exact McNemar test.

    Resumable: every block of work (the base or a point, on <= 128 problems or on the general texts) is kept in
    ``out_dir/cache`` keyed by its content (:mod:`.sweep_cache`); the same command run again after a kill
    continues where it stopped and writes the same ``sweep.json`` as an uninterrupted run. ``sweep.json``,
    ``sweep.csv`` and ``sweep.png`` are written (atomically) when the sweep is complete.

    Args:
        recipe: a recipe with an ``evaluation`` section; its ``sweep`` section sets sizes, grid, rounds, budget.
        out_dir: the sweep folder (created; an existing one is resumed if it holds a sweep cache).
        top_ks: fractions in (0, 1] (default: ``sweep.top_k``, else :data:`DEFAULT_TOP_KS`).
        scales: numbers >= 0 (0 prunes; 1.0 is the base and is skipped; default ``sweep.scale``, else
            :data:`DEFAULT_SCALES`).
        overwrite: allow an existing ``out_dir`` that is not a sweep folder to be written into.
        progress: progress bars.
        echo: receives the stage lines and one line per evaluated point.

    Returns:
        :class:`SweepResult`.
    """
    refuse_official(recipe, "sweep")  # its masks come from float32 statistics
    if recipe.evaluation is None:
        raise InputError("sweep needs an evaluation section in the recipe (see docs/recipes.md)")
    ev, sw = recipe.evaluation, recipe.sweep
    top_ks = list(top_ks if top_ks is not None else (sw.top_k or DEFAULT_TOP_KS))
    scales = list(scales if scales is not None else (sw.scale or DEFAULT_SCALES))
    for k in top_ks:
        if not 0 < k <= 1:
            raise InputError(f"--top-k: {k:g} is not in (0, 1]{top_k_hint(k)}; pass fractions such as 0.01,0.05")
    scales = [check_scale(s) for s in scales]
    grid = [(k, s) for k in top_ks for s in scales if s != 1.0]  # scale 1.0 is the base itself
    if not grid:
        raise InputError("--scale: only 1 (the base itself) was given; pass other scales, e.g. 1.05,1.1")
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise InputError(f"{out}: is a file; choose a folder for --out")
    is_sweep = (out / CACHE_DIR).is_dir() or any((out / STATS_DIR).glob("*.key.json"))
    if out.is_dir() and any(out.iterdir()) and not is_sweep and not overwrite:
        raise InputError(f"{out}: already exists and is not a sweep folder; choose another --out or pass --overwrite")
    variants = _variants(recipe)
    shots, selection, confirmation_problems = sweep_problems(recipe)  # a bad source fails before calibration
    texts, _ = load_set(ev.general, sw.general_samples or ev.samples, ev.seed)
    if ev.lm_eval is not None:
        echo("      evaluation.lm_eval is not run by a sweep (run it on the release)")
    n_sets = len({_set_label(v.recipe, src) for v in variants for src in [v.recipe.data.math, *v.recipe.data.general]})
    stages = Stages(5 + n_sets, echo)  # load, each set, masks, base, rounds, confirm
    with claim(out):
        out.mkdir(parents=True, exist_ok=True)
        cache = ResultCache(out)
        cache.folder.mkdir(exist_ok=True)  # marks a sweep folder from the start: a kill during calibration resumes
        cache.clean_temporary()
        model, tok = load_step(recipe, stages)
        fingerprint = model_weights_sha256(model)
        stats: dict[int, tuple[Any, list[Any]]] = {}
        done: dict[str, Any] = {}  # one computation per distinct set
        for v in variants:
            if v.group in stats:
                continue
            sets = []
            for what, src in [("math", v.recipe.data.math), *[("general", g) for g in v.recipe.data.general]]:
                label = _set_label(v.recipe, src)
                if label not in done:
                    name = f"{what} ({v.name})" if v.name and what == "math" else what
                    done[label] = _calibrated_set(
                        v.recipe, src, name, model, tok, out / STATS_DIR, fingerprint, progress, stages
                    )
                sets.append(done[label])
            stats[v.group] = (sets[0], sets[1:])
        m = recipe.mask
        stages.start(
            f"masks for top_k={','.join(f'{k:g}' for k in top_ks)} ({m.method}), {len(variants)} "
            f"variant{'s' if len(variants) > 1 else ''}"
        )
        weights = model_weights(model)
        group_masks = {
            g: find_math_params_multi(
                weights,
                ms,
                gs,
                top_ks=top_ks,
                method=m.method,
                granularity=m.granularity,
                seed=m.seed,
                progress=progress,
            )
            for g, (ms, gs) in stats.items()
        }
        arms: list[_Arm] = []
        for vi, v in enumerate(variants):
            t = v.recipe.targets
            keep = set(find_targets(model, include=t.include or None, exclude=t.exclude or None))
            for ki, k in enumerate(top_ks):
                mask = group_masks[v.group][ki]
                if v.overrides:
                    extra = keep - set(mask)
                    if extra:
                        raise InputError(
                            f"sweep.variants[{v.name}]: targets {sorted(extra)[:2]} are not among the "
                            "recipe's own targets; a variant may only restrict them"
                        )
                    mask = _variant_mask(mask, keep)
                arms += [_Arm(vi, k, s, mask) for s in scales if s != 1.0]
        evaluator = _Evaluator(model, tok, recipe, shots, texts, fingerprint, cache, progress)
        schedule = halving_schedule(len(arms), len(selection), sw.first_round, sw.eta)
        cuts = [end for _, end in schedule]
        stages.start(f"the base on {len(selection)} selection problems and {len(texts)} general texts")
        base_sel: list[bool] = []
        for a, b in _blocks(0, len(selection), cuts):
            base_sel += evaluator.math(selection[a:b])
        base_general = evaluator.base_general()
        stages.note(f"math {sum(base_sel)}/{len(base_sel)}; cache {cache.hits} reused, {cache.misses} computed")
        rounds: list[dict[str, Any]] = []
        active = list(range(len(arms)))
        start = 0
        stages.start(
            f"select among {len(arms)} points in {len(schedule)} round{'s' if len(schedule) > 1 else ''} "
            f"({', '.join(f'{n} on {e}' for n, e in schedule)})"
        )

        def kl_of(i: int) -> float:
            """Point ``i``'s general KL, computed (and cached) the first time the selection needs it."""
            arm = arms[i]
            if arm.general is None:
                name = variants[arm.variant].name
                echo(
                    "      general KL of " + (f"{name} " if name else "") + f"top_k={arm.top_k:g} "
                    f"scale={arm.scale:g} on {len(texts)} texts"
                )
                arm.general = evaluator.general(arm.mask, arm.scale)
            return float(arm.general["kl"])

        sizes = [a.mask.total()[0] * abs(a.scale - 1.0) for a in arms]  # promotion's tie-break: the smaller edit
        for r, (n_points, end) in enumerate(schedule):
            if r > 0:
                seen = [sum(arms[i].correct) if i in active else None for i in range(len(arms))]
                active = promote(seen, kl_of, sw.kl_budget, n_points, size=sizes)
            for j, i in enumerate(active):
                arm = arms[i]
                name = variants[arm.variant].name
                echo(
                    f"      round {r + 1}/{len(schedule)}, point {j + 1}/{len(active)}: "
                    + (f"{name} " if name else "")
                    + f"top_k={arm.top_k:g} scale={arm.scale:g} "
                    f"(problems {start + 1}-{end})"
                )
                for a, b in _blocks(start, end, cuts):
                    arm.correct += evaluator.math(selection[a:b], arm.mask, arm.scale)
                arm.round = r + 1
            rounds.append(
                {
                    "round": r + 1,
                    "problems": [start, end],
                    "points": list(active),
                    "correct": [sum(arms[i].correct) for i in active],
                }
            )
            start = end
        finalists = [i for i in range(len(arms)) if arms[i].round == len(schedule)]
        for i in finalists:  # the candidate must be within the KL budget
            kl_of(i)
        names = [variants[a.variant].name for a in arms]
        points = with_holm([_sweep_point(a, n, base_sel, base_general) for a, n in zip(arms, names)])
        base_correct = sum(base_sel)
        pick = select_candidate([points[i] for i in finalists], base_correct, sw.kl_budget)
        candidate = None if pick is None else finalists[pick]
        confirmation = None
        if candidate is None:
            stages.start("confirm: no candidate (no finalist gains within the KL budget); nothing is tested")
        else:
            p, arm = points[candidate], arms[candidate]
            stages.start(
                f"confirm {(names[candidate] + ' ') if names[candidate] else ''}top_k={p.top_k:g} "
                f"scale={p.scale:g} on {len(confirmation_problems)} other problems"
            )
            base_c: list[bool] = []
            edit_c: list[bool] = []
            for a, b in _blocks(0, len(confirmation_problems), []):
                base_c += evaluator.math(confirmation_problems[a:b])
                edit_c += evaluator.math(confirmation_problems[a:b], arm.mask, arm.scale)
            b_, c_, pval, ok = confirm(base_c, edit_c, sw.alpha)
            v = variants[arm.variant]
            confirmation = Confirmation(
                len(confirmation_problems),
                tuple(problem_sha256(q) for q in confirmation_problems),
                p.top_k,
                p.scale,
                sum(base_c),
                sum(edit_c),
                b_,
                c_,
                pval,
                ok,
                sw.alpha,
                candidate,
                arm.mask.sha256,
                v.name,
                v.overrides,
            )
        best, text = recommend(points, base_correct, len(selection), candidate, confirmation, sw.kl_budget)
        base_row = {
            "math_correct": base_correct,
            "math_total": len(base_sel),
            "math_accuracy": base_correct / len(base_sel),
        }
        lo, hi = wilson_interval(base_correct, len(base_sel))
        base_row.update(math_ci95_low=lo, math_ci95_high=hi)
        bg = _general_result(base_general["loss_sums"], base_general["tokens"])
        result = SweepResult(
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
            len(texts),
            recipe.public_dict(),
            recipe_sha256(recipe),
            rounds=rounds,
            variants=[{"name": v.name, "set": list(v.overrides)} for v in variants],
            general_tail_mass=[(a.general or {}).get("tail_mass") for a in arms],
        )
        write_text_atomic(out / SWEEP_CSV, result.to_csv())
        write_text_atomic(out / SWEEP_JSON, json.dumps(_strict(result.to_dict()), indent=2, allow_nan=False) + "\n")
        _plot(result, out / SWEEP_PNG)
        stages.note(f"cache: {cache.hits} blocks reused, {cache.misses} computed")
    return result
