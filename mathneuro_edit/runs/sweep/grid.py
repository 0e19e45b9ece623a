"""The grid of a sweep: its variants (the recipe and each ``sweep.variants`` entry), one arm per
``(variant, top_k, scale)`` with its mask, and each arm's :class:`~.procedure.SweepPoint`."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ...engine.mask import Mask
from ...engine.targets import find_targets
from ...errors import InputError
from ...evaluation.significance import discordant_pairs, mcnemar_exact, significant, wilson_interval
from ...recipe.io import recipe_from_dict
from ...recipe.schema import Recipe
from .evaluator import _general_change
from .procedure import SweepPoint
from .result import _num


@dataclass
class _Variant:
    """One calibration / target choice: its recipe, its statistics group and its target names."""

    name: str
    overrides: tuple[str, ...]
    recipe: Recipe
    group: int  # index of its statistics (variants that differ in targets only share one calibration)

    @property
    def prefix(self) -> str:
        """``"<name> "`` before a point's settings in the sweep's lines, or nothing for the recipe itself."""
        return f"{self.name} " if self.name else ""


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


@dataclass
class _Grid:
    """The sweep's variants and its arms (variant x top_k x scale, scale 1.0 left out: it is the base)."""

    variants: list[_Variant]
    arms: list[_Arm]


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
        r = recipe_from_dict(recipe.resolved_dict(), list(sets), where=f"sweep.variants[{name}]") if sets else recipe
        d = r.resolved_dict()
        g = json.dumps([d["data"], d["calibration"]], sort_keys=True)
        if g not in groups:
            groups.append(g)
        out.append(_Variant(name, sets, r, groups.index(g)))
    names = [v.name for v in out]
    if len(set(names)) != len(names):
        raise InputError("sweep.variants: two variants have the same name; give each its own")
    return out


def _variant_mask(mask: Any, keep: set[str]) -> Any:
    """``mask`` restricted to the parameter names a variant targets."""
    return Mask({n: mask[n] for n in mask if n in keep}, dict(mask.meta))


def _arms(
    model: Any,
    variants: list[_Variant],
    group_masks: dict[int, list[Any]],
    top_ks: Sequence[float],
    scales: Sequence[float],
) -> list[_Arm]:
    """Every ``(variant, top_k, scale)`` arm with its mask: the variant's statistics group's mask at ``top_k``,
    restricted to the variant's own targets (a variant may only restrict the recipe's)."""
    arms: list[_Arm] = []
    for vi, v in enumerate(variants):
        t = v.recipe.targets
        keep = set(find_targets(model, include=t.include or None, exclude=t.exclude or None))
        for ki, k in enumerate(top_ks):
            mask = group_masks[v.group][ki]
            if v.overrides:
                if extra := keep - set(mask):
                    raise InputError(
                        f"sweep.variants[{v.name}]: targets {sorted(extra)[:2]} are not among the "
                        "recipe's own targets; a variant may only restrict them"
                    )
                mask = _variant_mask(mask, keep)
            arms += [_Arm(vi, k, s, mask) for s in scales if s != 1.0]
    return arms
