"""The problems of a sweep: the worked examples, the selection and the confirmation, disjoint by construction,
and the other prompt formats' worked examples; one draw of ``evaluation.math`` with ``evaluation.seed``."""

from __future__ import annotations

import warnings
from typing import Any

from ...data.sources import load_math_problems, problem_sha256
from ...errors import InputError
from ...recipe.schema import Recipe

__all__ = ["sweep_problems", "format_shots"]


def _draw(ev: Any, n: int) -> list[dict[str, Any]]:
    """The first ``n`` problems of ``evaluation.math``'s draw (each with its prompt keys only), or fewer: the
    caller refuses a short draw with the keys to change (the loader's "fewer records than requested" is silenced)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        problems = load_math_problems(ev.math, n, ev.seed)
    return [{k: p[k] for k in ("question", "answer", "prefill") if k in p} for p in problems]


def sweep_problems(recipe: Recipe) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """``(shots, selection, confirmation)`` problems of a sweep, disjoint by construction.

    One draw of ``evaluation.n_shot + sweep.selection_samples + sweep.confirmation_samples`` problems from
    ``evaluation.math`` with ``evaluation.seed`` (the arithmetic task generates distinct problems from the seed; a
    file is shuffled by the seed and read without replacement), split in that order. A confirmation problem whose
    prompt text (``question``) repeats an earlier one (a file with duplicate questions) is dropped, so that no
    prompt is in both sets; the confirmation then holds fewer problems, and the JSON says how many. No evaluation
    section, or a source with fewer problems than the sweep needs, is refused.
    """
    ev, sw = recipe.evaluation, recipe.sweep
    if ev is None:
        raise InputError("sweep needs an evaluation section in the recipe (see docs/recipes.md)")
    want = ev.n_shot + sw.selection_samples + sw.confirmation_samples
    strip = _draw(ev, want)
    if len(strip) < want:
        raise InputError(
            f"evaluation.math: {ev.math.public_path()} has {len(strip)} problems; the sweep needs "
            f"evaluation.n_shot + sweep.selection_samples + sweep.confirmation_samples = {ev.n_shot} + "
            f"{sw.selection_samples} + {sw.confirmation_samples} = {want}; lower "
            "sweep.selection_samples or sweep.confirmation_samples (--set)"
        )
    shots = strip[: ev.n_shot]
    selection = strip[ev.n_shot : ev.n_shot + sw.selection_samples]
    seen = {problem_sha256(p) for p in shots + selection}
    rest: dict[str, dict[str, Any]] = {}  # each prompt's first occurrence
    for p in strip[ev.n_shot + sw.selection_samples :]:
        rest.setdefault(problem_sha256(p), p)
    return shots, selection, [p for h, p in rest.items() if h not in seen]


def format_shots(recipe: Recipe) -> list[dict[str, Any]]:
    """The worked examples of the confirmation's other prompt formats (``sweep.confirmation_formats``): drawn
    right after the confirmation problems by the same draw as :func:`sweep_problems` (a longer draw of the same
    seed starts with the same problems), never one of the sweep's problems (a source with too few is refused).
    """
    ev, sw = recipe.evaluation, recipe.sweep
    need = max((f.n_shot for f in sw.confirmation_formats), default=0)
    if ev is None or not need:
        return []
    have = ev.n_shot + sw.selection_samples + sw.confirmation_samples
    problems = _draw(ev, have + need)
    used = {problem_sha256(p) for p in problems[:have]}
    extra = [p for p in problems[have:] if problem_sha256(p) not in used]
    if len(extra) < need:
        raise InputError(
            f"sweep.confirmation_formats: {ev.math.public_path()} has too few problems for {need} worked "
            "examples after the sweep's own; lower sweep.confirmation_samples or the formats' n_shot"
        )
    return extra[:need]
