"""Mask consistency across random calibration subsets (the paper's data-efficiency figure).

For each subset size ``n`` (e.g. 1, 4, 16 samples per set) and ``repeats`` seeded random draws of that many math
and general texts from the recipe's calibration data, compute the mask and compare it (Jaccard) with the mask of
the full data and with the other draws of the same size. High overlap at small ``n`` is the paper's claim that a
handful of samples (even one) finds most of the same math-specific weights.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from itertools import combinations
from pathlib import Path
from typing import Any

from ..data.sources import load_texts
from ..engine.edit_map import show_setting
from ..errors import InputError
from ..layout import CONSISTENCY_JSON
from ..recipe.io import as_recipe
from ..recipe.schema import Recipe
from ..util.console import Stages
from ..util.files import write_json_atomic
from ..util.outdir import atomic_dir
from ..weights.loading import model_weights
from .inspect import pyplot, save_figure
from .official_mask import refuse_official
from .steps.count import stage_count
from .steps.mask import Statistics, calibrate_set, load_step, recipe_masks
from .steps.record import RunRecord

__all__ = ["ConsistencyRow", "DrawMasks", "jaccard", "mask_consistency", "run_consistency"]


def jaccard(a: Any, b: Any) -> float:
    """Jaccard similarity of two masks over all tensors (1.0 when identical, also when both are empty)."""
    inter = union = 0
    for name in a:
        x, y = a[name], b[name]
        inter += int((x & y).sum())
        union += int((x | y).sum())
    return inter / union if union else 1.0


@dataclass(frozen=True)
class ConsistencyRow:
    """Overlaps for one subset size: with the full-data mask, and between draws of that size."""

    samples: int
    repeats: int
    overlap_with_full_mean: float
    overlap_with_full_min: float
    overlap_between_draws_mean: float | None


@dataclass(frozen=True)
class DrawMasks:
    """How a draw's mask is made: the run's own steps on the draw's texts (:func:`~.steps.mask.calibrate_set` for
    each set, then :func:`~.steps.mask.recipe_masks`: the recipe's method, ``top_k``, granularity and seed), so a
    draw's mask is the mask ``run`` would make from those texts."""

    run: RunRecord  # the loaded model's record (its recipe, model, tokenizer and progress setting)

    @property
    def top_k(self) -> float:
        """The recipe's ``mask.top_k``: every draw's mask fraction."""
        return self.run.recipe.mask.top_k

    def __call__(self, math_texts: Sequence[str], general_texts: Sequence[str]) -> Any:
        """The mask of one draw: its math texts against its general texts."""
        stats = Statistics(calibrate_set(self.run, math_texts), [calibrate_set(self.run, general_texts)])
        (mask,) = recipe_masks(self.run.recipe, stats, [self.top_k], model_weights(self.run.model))
        return mask


def mask_consistency(
    masks: DrawMasks,
    math_texts: Sequence[str],
    general_texts: Sequence[str],
    *,
    sizes: Sequence[int],
    repeats: int = 3,
    seed: int = 0,
    stages: Any = None,
) -> list[ConsistencyRow]:
    """Compare masks from random calibration subsets with the full-data mask.

    ``masks`` makes the mask of a pair of text lists (math, general) and says its ``top_k`` (:class:`DrawMasks`:
    the run's own steps); each of ``sizes`` (texts per set) is at most the size of both full sets; draw ``r`` of
    size ``n`` uses ``random.Random(f"{seed}:{n}:{r}")``; ``stages`` announces the full-data mask and each size.
    Returns one :class:`ConsistencyRow` per size, in order.
    """
    if repeats < 1:
        raise InputError(f"repeats: must be >= 1, got {repeats}")
    for n in sizes:
        if not 1 <= n <= min(len(math_texts), len(general_texts)):
            raise InputError(
                f"sizes: {n} is not between 1 and the calibration set size "
                f"({min(len(math_texts), len(general_texts))}); lower it or add data"
            )
    if stages is not None:
        stages.start(
            f"full-data mask ({len(math_texts)} math + {len(general_texts)} general texts, top_k={show_setting(masks.top_k)})"
        )
    full = masks(list(math_texts), list(general_texts))
    rows = []
    for n in sizes:
        if stages is not None:
            stages.start(f"{repeats} random draw{'s' * (repeats > 1)} of {n} text{'s' * (n > 1)} per set")
        draws = []
        for r in range(repeats):
            rng = random.Random(f"{seed}:{n}:{r}")
            draws.append(masks(rng.sample(list(math_texts), n), rng.sample(list(general_texts), n)))
        rows.append(_row(n, draws, full))
    return rows


def _row(n: int, draws: list[Any], full: Any) -> ConsistencyRow:
    """One size's row: each draw's overlap with the full-data mask, and the draws' overlaps with each other."""
    with_full = [jaccard(d, full) for d in draws]
    between = [jaccard(a, b) for a, b in combinations(draws, 2)]
    mean_between = sum(between) / len(between) if between else None
    return ConsistencyRow(n, len(draws), sum(with_full) / len(with_full), min(with_full), mean_between)


def _plot(rows: Sequence[ConsistencyRow], path: Path, info: dict[str, Any]) -> Path | None:
    """Overlap vs subset size on a log axis with plain tick labels (1, 4, 16), titled with top_k and the sizes."""
    plt = pyplot(required=False)
    if plt is None:
        return None  # the JSON holds the numbers; the PNG needs the plot extra
    from matplotlib.ticker import FixedLocator, NullLocator, ScalarFormatter

    fig, ax = plt.subplots(figsize=(6, 4))
    xs = [r.samples for r in rows]
    ax.plot(xs, [r.overlap_with_full_mean for r in rows], "o-", label="vs full-data mask (mean)")
    worst = [r.overlap_with_full_min for r in rows]
    ax.plot(xs, worst, "v:", color="tab:blue", alpha=0.6, label="vs full-data mask (worst draw)")
    between = [(r.samples, r.overlap_between_draws_mean) for r in rows if r.overlap_between_draws_mean is not None]
    if between:
        ax.plot(*zip(*between), "s--", color="tab:orange", label="between random draws (mean)")
    ax.set_xscale("log")  # sizes grow geometrically
    ax.xaxis.set_major_locator(FixedLocator(xs))  # a tick at each measured size, written 1, 4, 16 (not 10^0)
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_locator(NullLocator())
    room = 2 if len(xs) == 1 else 1.5
    ax.set_xlim(min(xs) / room, max(xs) * room)
    ax.set_xlabel("calibration samples per set")
    ax.set_ylabel("mask overlap (Jaccard)")
    ax.set_ylim(0, 1.05)
    ax.set_title(
        f"mask consistency: {info['method']} top_k={show_setting(info['top_k'])}, sizes "
        f"{', '.join(str(n) for n in info['sizes'])}\n{info['repeats']} random draws per size vs the full "
        f"data ({info['math_samples']} math + {info['general_samples']} general texts)",
        fontsize=9,
    )
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(alpha=0.3)
    return save_figure(fig, path)


def run_consistency(
    recipe: Recipe | str | Path,
    out_dir: str | Path,
    *,
    sizes: Sequence[int] | None = None,
    repeats: int | None = None,
    overwrite: bool = False,
    progress: bool = True,
    echo: Callable[[str], None] = lambda s: None,
) -> list[ConsistencyRow]:
    """:func:`mask_consistency` on a recipe's model and calibration data; writes ``consistency.json`` / ``.png``.

    ``sizes`` and ``repeats`` default to the recipe's ``consistency`` section (the command's ``--sizes`` and
    ``--repeats`` set it), so the recipe alone re-runs the same draws.

    ``consistency.json`` is ``{"method", "top_k", "math_samples", "general_samples", "sizes", "repeats", "seed",
    "rows": [...]}``: the setting that produced the rows, then one row per size. ``echo`` receives the stage lines.
    """
    recipe = as_recipe(recipe)
    refuse_official(recipe, "consistency")  # its masks come from statistics
    out = Path(out_dir)
    if out.exists() and not overwrite:
        raise InputError(f"{out}: already exists; choose another --out or pass --overwrite")
    d, m = recipe.data, recipe.mask
    sizes = list(recipe.consistency.sizes if sizes is None else sizes)
    repeats = recipe.consistency.repeats if repeats is None else repeats
    # the run's load step, then the full-data mask and one stage per size (each draw: calibrate + mask steps)
    stages = Stages(stage_count(recipe, ("load",)) + 1 + len(sizes), echo)
    run = RunRecord(recipe, stages, progress)
    load_step(run)
    math_texts = load_texts(d.math, d.samples, d.seed).texts
    general_texts = load_texts(d.general[0], d.samples, d.seed).texts
    masks = DrawMasks(run)
    rows = mask_consistency(masks, math_texts, general_texts, sizes=sizes, repeats=repeats, seed=d.seed, stages=stages)
    info = {
        "method": m.method,
        "top_k": m.top_k,
        "math_samples": len(math_texts),
        "general_samples": len(general_texts),
        "sizes": list(sizes),
        "repeats": repeats,
        "seed": d.seed,
    }
    # renamed to `out` only when complete; never onto an input (the base, a data file)
    with atomic_dir(out, overwrite=overwrite, inputs=recipe.local_inputs()) as tmp:
        write_json_atomic(tmp / CONSISTENCY_JSON, {**info, "rows": [asdict(r) for r in rows]})
        _plot(rows, tmp / "consistency.png", info)
    return rows
