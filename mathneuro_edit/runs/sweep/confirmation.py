"""The confirmation of a sweep's candidate: the candidate, the base and two control edits on problems the selection
never saw, under the recipe's prompt and each ``sweep.confirmation_formats`` entry, on the weights the release
stores; one paired exact McNemar test decides (:func:`~.procedure.confirm`, :func:`~.procedure.format_verdict`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...data.sources import problem_sha256
from ...engine.apply import ReversibleEdit, round_weights_
from ...engine.edit_map import show_setting
from ...evaluation.prompts import answer_form, operation_of
from ...util.console import Stages
from ..steps.export import release_dtype
from ..steps.mask import Statistics, recipe_masks
from .evaluator import _blocks, _Context, _Evaluator, _general_change
from .grid import _Arm, _Variant, _variant_mask
from .problems import format_shots
from .procedure import ArmOutcome, Confirmation, SweepPoint, confirm, format_verdict, paired_test
from .result import _num

# the controls of every confirmation: (name, mask method). "general-specific" is magnitude-matched: the same count
# in every matrix as the candidate, taken from the weights that matter most for the general text (similar |W| and
# importance); "random" is uniform over each matrix, seeded (sweep.control_seed): mostly small weights, a weak control
_CONTROLS = (("general-specific", "general"), ("random", "random"))


@dataclass(frozen=True)
class _Candidate:
    """The one setting the selection chose: its index among the points, its arm, point and variant."""

    index: int
    arm: _Arm
    point: SweepPoint
    variant: _Variant


def _control_masks(recipe: Any, weights: Any, stats: Statistics, candidate: _Candidate) -> list[tuple[str, str, Any]]:
    """``[(name, method, mask)]`` of the control edits: the candidate's count in every matrix, by another rule."""
    mask, keep = candidate.arm.mask, set(candidate.arm.mask)
    out = []
    for name, method in _CONTROLS:
        (control,) = recipe_masks(
            recipe, stats, [candidate.point.top_k], weights, method=method, seed=recipe.sweep.control_seed
        )
        control = _variant_mask(control, keep)
        if control.counts() != mask.counts():
            raise RuntimeError(f"control {name}: its counts per matrix differ from the candidate's")
        out.append((name, method, control))
    return out


def _general_cost(evaluator: _Evaluator, mask: Any, scale: float) -> dict[str, Any]:
    """An edit's general loss change (paired, with its standard error) and KL on the selection's general texts."""
    e, cmp_ = _general_change(evaluator.base_general(), evaluator.general(mask, scale))
    return {
        "texts": len(evaluator.texts),
        "tokens": e.n_tokens,  # the base's token counts: the same texts
        "loss": _num(e.loss),
        "loss_change": _num(cmp_.get("loss_change")),
        "loss_change_se": _num(cmp_.get("loss_change_se")),
        "kl": _num(e.kl),
    }


def _general_costs(
    ctx: _Context, evaluator: _Evaluator, arm: _Arm, controls: list[tuple[str, str, Any]]
) -> dict[str, dict[str, Any]]:
    """The candidate's and each control's general cost, on the unrounded model (the selection's measure)."""
    general = {"candidate": _general_cost(evaluator, arm.mask, arm.scale)}
    for name, _, mask in controls:
        ctx.echo(f"      general loss and KL of the {name} control on {len(evaluator.texts)} texts")
        general[name] = _general_cost(evaluator, mask, arm.scale)
    return general


def _rounded_edits(
    ctx: _Context, arm: _Arm, controls: list[tuple[str, str, Any]]
) -> tuple[dict[str, tuple[Any, Any]], str | None]:
    """Each arm's prepared edit, then the model rounded in place to the release's dtype; returns the edits and
    the dtype's name when the rounding changed the weights (``None``: the model already held it).

    Why this order: the edits are prepared from the unrounded weights (the release computes from them), then the
    model is rounded, so each arm is exactly the checkpoint a user loads. The model is not used afterwards."""
    store = release_dtype(ctx.run.recipe)
    masks = {"candidate": arm.mask} | {name: mask for name, _, mask in controls}
    edits = {name: (m, ReversibleEdit(ctx.run.model, m, arm.scale, store_dtype=store)) for name, m in masks.items()}
    rounded = round_weights_(ctx.run.model, store)
    return edits, (str(store).removeprefix("torch.") if rounded else None)


def _format_outcomes(
    ev: _Evaluator, label: str, probs: list[dict[str, Any]], names: list[str], edits: dict[str, Any], scale: float
) -> dict[str, ArmOutcome]:
    """Each named arm (the base: no edit) on one prompt format's problems, block by block through the cache: its
    flags, each completion's answer form and each problem's operation."""
    outcomes = {}
    for name in names:
        ev.echo(f"      {label}: {name} on {len(probs)} problems" + (f" ({ev.weights} weights)" if ev.weights else ""))
        mask, edit = edits.get(name, (None, None))
        correct: list[bool] = []
        completions: list[str] = []
        for a, b in _blocks(0, len(probs), []):
            c, t = ev.outcomes(probs[a:b], mask, scale, edit)
            correct += c
            completions += t
        forms = tuple(answer_form(t, q.get("prefill")) for t, q in zip(completions, probs))
        outcomes[name] = ArmOutcome(name, tuple(correct), forms, tuple(operation_of(q) for q in probs))
    return outcomes


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
        "prompt": None if fmt is None else fmt.model_dump(),
        "n": len(probs),
        "problems_sha256": [problem_sha256(q) for q in probs],
        "verdict": verdict,
        "confirmed": verdict == "math-boost",
        "arms": {name: o.summary() for name, o in outcomes.items()},
        "tests": tests,
        "_outcomes": outcomes,
    }


def _confirm(
    ctx: _Context,
    evaluator: _Evaluator,
    candidate: _Candidate | None,
    scored: tuple[Statistics, Any] | None,
    problems: list[dict[str, Any]],
    shots: list[dict[str, Any]],
    stages: Stages,
) -> Confirmation | None:
    """The confirmation stage: the candidate, the base and two control edits (made from the candidate's statistics
    group and the weights it was scored on, ``scored``) on the confirmation problems, under the recipe's prompt and
    each ``sweep.confirmation_formats`` entry, measured on the weights the release stores; a line saying that
    nothing is tested when there is no candidate.

    Why rounded weights: the release stores ``outputs.dtype`` (bfloat16 for a GGUF base) while the sweep's model is
    float32 (:func:`_rounded_edits`). The general costs are measured before, on the selection's unrounded model.
    """
    if candidate is None or scored is None:
        stages.start("confirm: no candidate (no finalist gains within the KL budget); nothing is tested")
        return None
    stages.start(
        f"confirm {candidate.variant.prefix}top_k={show_setting(candidate.point.top_k)} "
        f"scale={show_setting(candidate.point.scale)} on {len(problems)} other problems, against the base and two "
        "control edits"
    )
    controls = _control_masks(ctx.run.recipe, scored[1], scored[0], candidate)
    sw, arm = ctx.run.recipe.sweep, candidate.arm
    other_shots = format_shots(ctx.run.recipe)
    general = _general_costs(ctx, evaluator, arm, controls)
    edits, weights = _rounded_edits(ctx, arm, controls)
    formats = [(None, "recipe's prompt", problems, shots)] + [
        (f, f.name, problems[: sw.format_samples or len(problems)], other_shots) for f in sw.confirmation_formats
    ]
    results = []
    # every format measures every arm (a second format without the random control could not tell a gain from any
    # edit of that size there)
    names = ["base", "candidate", *[name for name, _, _ in controls]]
    for fmt, label, probs, fshots in formats:
        ev = _Evaluator(ctx, fshots, evaluator.texts, fmt, weights)
        outcomes = _format_outcomes(ev, label, probs, names, edits, arm.scale)
        results.append(_format_record(fmt, label, probs, outcomes, controls[0][0], sw.alpha))
    return _confirmation(ctx, candidate, problems, results, controls, general, weights)


def _confirmation(
    ctx: _Context,
    candidate: _Candidate,
    problems: list[dict[str, Any]],
    results: list[dict[str, Any]],
    controls: list[tuple[str, str, Any]],
    general: dict[str, dict[str, Any]],
    weights: str | None,
) -> Confirmation:
    """The :class:`Confirmation`: the primary format's one test, every format's record, the controls' masks and
    general costs, and the dtype of the weights the arms were measured on (``weights``, the release's when the
    model was rounded to it, else the model's own)."""
    sw, arm, point, variant = ctx.run.recipe.sweep, candidate.arm, candidate.point, candidate.variant
    compute_dtype = str(next(ctx.run.model.parameters()).dtype).removeprefix("torch.")
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
        candidate.index,
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
        weights_dtype=weights or compute_dtype,
        general=general["candidate"],
        compute_dtype=compute_dtype,
    )
