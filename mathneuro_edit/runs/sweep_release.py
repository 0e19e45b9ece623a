"""From a sweep to a release: the setting a sweep confirmed, read back and applied to a recipe (``run --from-sweep``).

:func:`read_sweep` reads a sweep folder's ``sweep.json`` and accepts it only when its confirmation holds (its
counts give ``p < alpha`` and its problems are not the selection's); :func:`recipe_from_sweep` applies the setting
to a recipe that shares the sweep's weights-deciding keys; :func:`run_from_sweep` runs it, and the lock and card
record the evidence (:meth:`SweepEvidence.lock_entry`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..evaluation.report import format_p
from ..evaluation.significance import mcnemar_exact
from ..layout import SWEEP_JSON
from ..recipe.io import recipe_from_dict
from ..recipe.schema import Recipe
from .pipeline import run_recipe

__all__ = ["SweepEvidence", "read_sweep", "recipe_from_sweep", "run_from_sweep"]


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
