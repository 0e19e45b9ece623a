"""Sweeps that choose a setting on one set of problems and confirm it on another (issue 21).

One calibration, a mask per top_k derived from the saved statistics, each edit switched on with
:class:`~mathneuro_edit.engine.apply.ReversibleEdit` on one model and evaluated in memory. The math problems of
``evaluation.math`` are split in two disjoint sets (:func:`sweep_problems`):

- **selection** (``sweep.selection_samples``): every ``(top_k, scale)`` point and the base are evaluated on it
  (math exact match, general loss, KL(base || edited)); each point gets its raw exact McNemar p against the base
  and its Holm-Bonferroni adjusted p over the grid (:func:`~mathneuro_edit.evaluation.significance.holm_adjust`);
- **confirmation** (``sweep.confirmation_samples``), never used for choosing: only the single candidate
  (:func:`~.procedure.select_candidate`: the largest selection gain within ``sweep.kl_budget``) and the base are evaluated on
  it, with ONE paired exact McNemar test (:func:`~.procedure.confirm`).

A setting is recommended only when that test shows a gain with ``p < sweep.alpha``; otherwise the recommendation
says that nothing is confirmed. Why: with a 20-point grid, the best of 20 uncorrected tests on the same problems is
"significant" in about a quarter of sweeps where no edit does anything (25.2% of 1,000 simulated, 300 problems,
10% discordance: tests/runs/test_sweep_procedure.py); a test on fresh problems of the one setting chosen beforehand
has its nominal level.

Outputs (names in :mod:`mathneuro_edit.layout`): ``sweep.json`` (the contract in docs/evaluation.md),
``sweep.csv`` (one row per point, raw and Holm p), ``sweep.png`` (math gain over the base vs general KL, Pareto front;
needs matplotlib) and the statistics. Every accuracy carries its 95% Wilson interval. The procedure itself (pure
functions of the counts): :mod:`.procedure`; from a confirmed sweep to a release: :mod:`.evidence`.
"""

from __future__ import annotations

import hashlib
import json
import math
import stat
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...data.sources import load_math_problems, load_set, load_texts, problem_sha256
from ...engine.apply import ReversibleEdit, check_scale, round_weights_
from ...engine.distributed import calibrate_distributed as calibrate
from ...engine.mask import find_math_params_multi
from ...engine.targets import find_targets
from ...engine.topk import top_k_hint
from ...errors import InputError
from ...evaluation.prompts import answer_form, operation_of
from ...evaluation.results import compare
from ...evaluation.significance import discordant_pairs, mcnemar_exact, significant, wilson_interval
from ...layout import (
    STATS_DIR,
    SWEEP_CSV,
    SWEEP_JSON,
    SWEEP_MARKER,
    SWEEP_PNG,
)
from ...recipe.io import recipe_from_dict
from ...recipe.schema import Recipe, recipe_sha256
from ...util.console import Stages
from ...util.files import write_json_atomic, write_text_atomic
from ...util.outdir import claim
from ...util.reading import read_json, read_regular
from ...weights.loading import model_weights
from ..official_mask import refuse_official
from ..step_export import release_dtype
from ..step_mask import load_step
from .cache import ResultCache, key_sha256
from .evaluator import _blocks, _Evaluator, _general_result, model_weights_sha256
from .procedure import (
    ArmOutcome,
    Confirmation,
    SweepPoint,
    confirm,
    format_verdict,
    halving_schedule,
    paired_test,
    pareto_front,
    promote,
    recommend,
    select_candidate,
    with_holm,
)
from .result import SweepResult, _num, _plot, _strict

__all__ = ["run_sweep", "check_sweep_folder", "sweep_problems", "format_shots"]

# a statistics cache key file is a few hundred bytes; a statistics file holds per-column sums (a 70B model's: ~40 MB)
_MAX_KEY_BYTES = 1024 * 1024
_MAX_STATS_BYTES = 1024**3

_KEYS = ("question", "answer", "prefill")


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


def _general_change(base_general: dict[str, Any], g: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """An edit's general result (loss sums per text, KL) and its paired change against the base's on the same
    texts (:func:`~mathneuro_edit.evaluation.results.compare`; empty when there is nothing to compare)."""
    base_g = _general_result(base_general["loss_sums"], base_general["tokens"])
    ed_g = _general_result(g.get("loss_sums", []), base_general["tokens"], float(g.get("kl", math.nan)))
    return ed_g, compare(base_g, ed_g) or {}


def _sweep_point(arm: _Arm, name: str, base_correct: Sequence[bool], base_general: dict[str, Any]) -> SweepPoint:
    """A :class:`SweepPoint` from an arm's flags (paired with the base's first ``len(flags)``) and general result."""
    n = len(arm.correct)
    k = sum(arm.correct)
    b, c = discordant_pairs(list(base_correct[:n]), arm.correct)
    p = mcnemar_exact(b, c)
    lo, hi = wilson_interval(k, n)
    g = arm.general or {}
    ed_g, cmp_ = _general_change(base_general, g)
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
    from ...engine.stats import ActivationStats

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
        fix = "delete both and run the same command again"
        try:  # through the one regular-file reader: a FIFO or a link to /dev/zero here is one line, never a hang
            saved = read_json(key_file, _MAX_KEY_BYTES, "a sweep cache key file", fix)
            stored = read_regular(path, _MAX_STATS_BYTES, "a statistics file", fix)
            ok = saved.get("key") == key and hashlib.sha256(stored).hexdigest() == saved["sha256"]
        except InputError:
            raise
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
    from ...engine.mask import Mask

    return Mask({n: mask[n] for n in mask if n in keep}, dict(mask.meta))


def format_shots(recipe: Recipe) -> list[dict[str, Any]]:
    """The worked examples of the confirmation's other prompt formats (``sweep.confirmation_formats``): drawn
    right after the confirmation problems by the same draw as :func:`sweep_problems` (a longer draw of the same
    seed starts with the same problems), never one of the sweep's problems.

    Raises:
        InputError: the source has too few problems for them.
    """
    ev, sw = recipe.evaluation, recipe.sweep
    need = max((f.n_shot for f in sw.confirmation_formats), default=0)
    if ev is None or not need:
        return []
    have = ev.n_shot + sw.selection_samples + sw.confirmation_samples
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        problems = load_math_problems(ev.math, have + need, ev.seed)
    used = {problem_sha256({k: p[k] for k in _KEYS if k in p}) for p in problems[:have]}
    extra = [{k: p[k] for k in _KEYS if k in p} for p in problems[have:]]
    extra = [p for p in extra if problem_sha256(p) not in used]
    if len(extra) < need:
        raise InputError(
            f"sweep.confirmation_formats: {ev.math.public_path()} has too few problems for {need} worked "
            "examples after the sweep's own; lower sweep.confirmation_samples or the formats' n_shot"
        )
    return extra[:need]


# the controls of every confirmation: (name, mask method). "general-specific" is magnitude-matched: the same count
# in every matrix as the candidate, taken from the weights that matter most for the general text (similar |W| and
# importance); "random" is uniform over each matrix, seeded (sweep.control_seed): mostly small weights, a weak control
_CONTROLS = (("general-specific", "general"), ("random", "random"))


def _control_masks(
    recipe: Recipe, weights: Any, group_stats: tuple[Any, list[Any]], top_k: float, candidate: Any, keep: set[str]
) -> list[tuple[str, str, Any]]:
    """``[(name, method, mask)]`` of the control edits: the candidate's count in every matrix, by another rule."""
    from ...engine.mask import Mask

    ms, gs = group_stats
    m, sw = recipe.mask, recipe.sweep
    out = []
    for name, method in _CONTROLS:
        (mask,) = find_math_params_multi(
            weights, ms, gs, top_ks=[top_k], method=method, granularity=m.granularity, seed=sw.control_seed
        )
        mask = Mask({n: mask[n] for n in mask if n in keep}, dict(mask.meta))
        if mask.counts() != {n: c for n, c in candidate.counts().items()}:
            raise RuntimeError(f"control {name}: its counts per matrix differ from the candidate's")
        out.append((name, method, mask))
    return out


@dataclass
class _ConfirmContext:
    """What the confirmation needs of the sweep: the model (rounded here to the release's dtype), its cache and
    printer, the selection's evaluator (general texts) and the other formats' worked examples."""

    model: Any
    tok: Any
    recipe: Recipe
    fingerprint: str
    cache: ResultCache
    progress: bool
    echo: Callable[[str], None]
    texts: list[str]
    evaluator: _Evaluator
    format_shots: list[dict[str, Any]]


def _general_cost(ctx: _ConfirmContext, mask: Any, scale: float) -> dict[str, Any]:
    """An edit's general loss change (paired, with its standard error) and KL on the selection's general texts."""
    base_g = ctx.evaluator.base_general()
    g = ctx.evaluator.general(mask, scale)
    e, cmp_ = _general_change(base_g, g)
    return {
        "texts": len(ctx.texts),
        "tokens": e.n_tokens,  # the base's token counts: the same texts
        "loss": _num(e.loss),
        "loss_change": _num(cmp_.get("loss_change")),
        "loss_change_se": _num(cmp_.get("loss_change_se")),
        "kl": _num(e.kl),
    }


def _confirm(
    ctx: _ConfirmContext,
    arm: _Arm,
    point: SweepPoint,
    variant: _Variant,
    index: int,
    controls: list[tuple[str, str, Any]],
    problems: list[dict[str, Any]],
    shots: list[dict[str, Any]],
) -> Confirmation:
    """The candidate, the base and the controls on the confirmation problems, under the recipe's prompt and each
    ``sweep.confirmation_formats`` entry, measured on the weights the release stores.

    Why rounded weights: the release stores ``outputs.dtype`` (bfloat16 for a GGUF base) while the sweep's model is
    float32; the edits are prepared from the unrounded weights (the release computes from them), then the model is
    rounded in place, so each arm is exactly the checkpoint a user loads. The model is not used afterwards.
    """
    sw = ctx.recipe.sweep
    general = {"candidate": _general_cost(ctx, arm.mask, arm.scale)}
    for name, _, mask in controls:
        ctx.echo(f"      general loss and KL of the {name} control on {len(ctx.texts)} texts")
        general[name] = _general_cost(ctx, mask, arm.scale)
    store = release_dtype(ctx.recipe)
    edits = {"candidate": (arm.mask, ReversibleEdit(ctx.model, arm.mask, arm.scale, store_dtype=store))}
    for name, _, mask in controls:
        edits[name] = (mask, ReversibleEdit(ctx.model, mask, arm.scale, store_dtype=store))
    rounded = round_weights_(ctx.model, store)
    weights = str(store).removeprefix("torch.") if rounded else None
    formats = [(None, "recipe's prompt", problems, shots)] + [
        (f, f.name, problems[: sw.format_samples or len(problems)], ctx.format_shots) for f in sw.confirmation_formats
    ]
    results = []
    for fi, (fmt, label, probs, fshots) in enumerate(formats):
        ev = _Evaluator(
            ctx.model, ctx.tok, ctx.recipe, fshots, ctx.texts, ctx.fingerprint, ctx.cache, ctx.progress, fmt, weights
        )
        names = ["base", "candidate", *[c[0] for c in controls]] if fi == 0 else ["base", "candidate", controls[0][0]]
        outcomes = {}
        for name in names:
            ctx.echo(f"      {label}: {name} on {len(probs)} problems" + (f" ({weights} weights)" if weights else ""))
            mask, edit = edits.get(name, (None, None))
            correct: list[bool] = []
            completions: list[str] = []
            for a, b in _blocks(0, len(probs), []):
                c, t = ev.outcomes(probs[a:b], mask, arm.scale, edit)
                correct += c
                completions += t
            outcomes[name] = ArmOutcome(
                name,
                tuple(correct),
                tuple(answer_form(t, q.get("prefill")) for t, q in zip(completions, probs)),
                tuple(operation_of(q) for q in probs),
            )
        results.append(_format_record(fmt, label, probs, outcomes, controls[0][0], sw.alpha))
    primary = results[0]
    base, cand = primary["_outcomes"]["base"], primary["_outcomes"]["candidate"]
    b_, c_, pval, _ = confirm(list(base.correct), list(cand.correct), sw.alpha)
    for r in results:
        del r["_outcomes"]
    return Confirmation(
        len(problems),
        tuple(problem_sha256(q) for q in problems),
        point.top_k,
        point.scale,
        sum(base.correct),
        sum(cand.correct),
        b_,
        c_,
        pval,
        primary["verdict"] == "math-boost",
        sw.alpha,
        index,
        arm.mask.sha256,
        variant.name,
        variant.overrides,
        verdict=primary["verdict"],
        formats=tuple(results),
        controls=tuple(
            {
                "name": name,
                "method": method,
                "seed": sw.control_seed if method == "random" else None,
                "mask_sha256": mask.sha256,
                "selected": mask.total()[0],
                "general": general[name],
            }
            for name, method, mask in controls
        ),
        weights_dtype=weights or str(next(ctx.model.parameters()).dtype).removeprefix("torch."),
        general=general["candidate"],
    )


def _format_record(
    fmt: Any, label: str, probs: list[dict[str, Any]], outcomes: dict[str, ArmOutcome], control: str, alpha: float
) -> dict[str, Any]:
    """One prompt format's arms, paired tests and verdict (``_outcomes`` kept for the caller, then dropped)."""
    base, cand = outcomes["base"], outcomes["candidate"]
    verdict, _ = format_verdict(base, cand, outcomes[control], alpha)
    tests = [paired_test(base, cand, alpha), paired_test(base, cand, alpha, answered_only=True)]
    for name, o in outcomes.items():
        if name not in ("base", "candidate"):
            tests += [paired_test(o, cand, alpha), paired_test(base, o, alpha)]
    return {
        "name": label,
        "primary": fmt is None,
        "prompt": None if fmt is None else fmt.model_dump(mode="json"),
        "n": len(probs),
        "problems_sha256": [problem_sha256(q) for q in probs],
        "verdict": verdict,
        "confirmed": verdict == "math-boost",
        "arms": {name: o.summary() for name, o in outcomes.items()},
        "tests": tests,
        "_outcomes": outcomes,
    }


def _is_regular(path: Path) -> bool:
    """Whether ``path`` is a regular file itself (a symbolic link to one, a folder or a FIFO is not)."""
    try:
        return stat.S_ISREG(path.lstat().st_mode)
    except OSError:
        return False


def check_sweep_folder(out: Path, overwrite: bool) -> None:
    """Refuse a sweep's ``--out`` that exists, holds anything, and is not a sweep folder, unless ``overwrite``.

    A sweep folder holds :data:`~mathneuro_edit.layout.SWEEP_MARKER` (written when a sweep starts) or, from a
    sweep finished by an older version, ``sweep.json``; each must be a regular file. Why not a ``cache/`` folder
    or a ``stats/*.key.json`` file, as before: they are common names, and a sweep resumed into such a folder of
    the user's own wrote its cache and statistics there, replacing files of the same names (issue 41).

    Raises:
        InputError: a file at ``out``, or a folder that is not a sweep's, without ``overwrite``.
    """
    if out.exists() and not out.is_dir():
        raise InputError(f"{out}: is a file; choose a folder for --out")
    if not out.is_dir() or not any(out.iterdir()) or overwrite:
        return
    if not (_is_regular(out / SWEEP_MARKER) or _is_regular(out / SWEEP_JSON)):
        raise InputError(
            f"{out}: already exists and is not a sweep folder (no {SWEEP_MARKER} or {SWEEP_JSON} in it); choose "
            "another --out, or pass --overwrite to write the sweep into it (an unfinished sweep of an older "
            "version resumes that way)"
        )


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
    every selection problem; with it, successive halving (:func:`~.procedure.halving_schedule`,
    :func:`~.procedure.promote`). The candidate is the largest gain over the base among the points that
    reached the last round, within ``sweep.kl_budget``; it and the base are then evaluated on
    ``sweep.confirmation_samples`` other problems, with one exact McNemar test.

    Resumable: every block of work (the base or a point, on <= 128 problems or on the general texts) is kept in
    ``out_dir/cache`` keyed by its content (:mod:`.cache`); the same command run again after a kill
    continues where it stopped and writes the same ``sweep.json`` as an uninterrupted run. ``sweep.json``,
    ``sweep.csv`` and ``sweep.png`` are written (atomically) when the sweep is complete.

    Args:
        recipe: a recipe with an ``evaluation`` section; its ``sweep`` section sets sizes, grid, rounds, budget.
        out_dir: the sweep folder (created; an existing one is resumed if a sweep made it:
            :func:`check_sweep_folder`).
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
    check_sweep_folder(out, overwrite)
    variants = _variants(recipe)
    shots, selection, confirmation_problems = sweep_problems(recipe)  # a bad source fails before calibration
    texts, _ = load_set(ev.general, sw.general_samples or ev.samples, ev.seed)
    if ev.lm_eval is not None:
        echo("      evaluation.lm_eval is not run by a sweep (run it on the release)")
    n_sets = len({_set_label(v.recipe, src) for v in variants for src in [v.recipe.data.math, *v.recipe.data.general]})
    stages = Stages(5 + n_sets, echo)  # load, each set, masks, base, rounds, confirm
    with claim(out):
        out.mkdir(parents=True, exist_ok=True)
        if not _is_regular(out / SWEEP_MARKER):  # first: a kill during the load or calibration still resumes
            write_json_atomic(out / SWEEP_MARKER, {"format": "mathneuro-edit sweep folder", "version": 1})
        cache = ResultCache(out)
        cache.folder.mkdir(exist_ok=True)
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
            p, arm, v = points[candidate], arms[candidate], variants[arms[candidate].variant]
            stages.start(
                f"confirm {(v.name + ' ') if v.name else ''}top_k={p.top_k:g} scale={p.scale:g} on "
                f"{len(confirmation_problems)} other problems, against the base and two control edits"
            )
            keep = set(arm.mask)
            controls = _control_masks(recipe, weights, stats[v.group], p.top_k, arm.mask, keep)
            context = _ConfirmContext(
                model, tok, recipe, fingerprint, cache, progress, echo, texts, evaluator, format_shots(recipe)
            )
            confirmation = _confirm(context, arm, p, v, candidate, controls, confirmation_problems, shots)
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
