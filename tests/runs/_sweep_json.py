"""A confirmation's evidence as a sweep.json records it, for tests that write sweep.json files by hand."""

from __future__ import annotations

import functools
import json
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mathneuro_edit.evaluation.significance import mcnemar_exact
from mathneuro_edit.recipe.io import quickstart_recipe, recipe_from_dict
from mathneuro_edit.recipe.schema import Recipe
from mathneuro_edit.runs.single_steps import calibrate_to_folder, mask_from_stats
from mathneuro_edit.runs.steps.export import base_identity

# the selection's and the confirmation's problem hashes: disjoint, as a real sweep's are
SEL = [f"{i:064x}" for i in range(10)]
CONF = [f"{i + 1000:064x}" for i in range(8)]


def control_evidence(n: int, base_only: int, edited_only: int, control_only: int = 0) -> dict[str, Any]:
    """``verdict`` and ``formats`` of a confirmation whose candidate beat the base (``edited_only`` vs
    ``base_only`` discordant, every problem answered by both) and the general-specific control (``edited_only`` vs
    ``control_only``); ``confirmed`` follows from the counts at level 0.05."""

    def test(before: str, answered: bool, b: int, c: int) -> dict[str, Any]:
        p = mcnemar_exact(b, c)
        return {
            "before": before,
            "after": "candidate",
            "answered_only": answered,
            "n": n,
            "before_only": b,
            "after_only": c,
            "mcnemar_p": p,
            "passes": c > b and p < 0.05,
        }

    tests = [
        test("base", False, base_only, edited_only),
        test("base", True, base_only, edited_only),
        test("general-specific", False, control_only, edited_only),
    ]
    verdict = "math-boost" if all(t["passes"] for t in tests) else "no-gain"
    return {
        "verdict": verdict,
        "formats": [
            {"name": "recipe's prompt", "primary": True, "n": n, "verdict": verdict, "arms": {}, "tests": tests}
        ],
    }


def release_mask_sha256(recipe: Recipe, top_k: float = 0.05) -> str:
    """The sha256 of the mask a release of ``recipe`` at ``top_k`` computes (``calibrate`` then ``mask``, as
    ``mathneuro-edit mask`` derives it), computed once per recipe in a session: the mask a hand-made confirmation
    must name for ``run --from-sweep`` to release (a release whose mask is not the confirmation's is refused)."""
    resolved = recipe.resolved_dict()
    resolved["mask"]["top_k"] = top_k
    return _mask_sha256(json.dumps(resolved, sort_keys=True))


@functools.cache
def _mask_sha256(resolved: str) -> str:
    recipe = recipe_from_dict(json.loads(resolved))
    with tempfile.TemporaryDirectory(prefix="mathneuro-test-mask-") as tmp:
        calibrate_to_folder(recipe, Path(tmp) / "stats", progress=False, echo=lambda s: None)
        mask = mask_from_stats(
            recipe, Path(tmp) / "stats", Path(tmp) / "mask.safetensors", progress=False, echo=lambda s: None
        )
        return mask.sha256


def passed_confirmation(problems_sha256: Sequence[str], mask_sha256: str = "") -> dict[str, Any]:
    """A sweep.json ``confirmation`` that passed on 8 problems: top_k 0.05 at x1.1, 6 right only after the edit and
    none only before (p = 1/32), and it beat the general-specific control 6 to 0; it tested the mask
    ``mask_sha256`` (:func:`release_mask_sha256`; empty: none recorded)."""
    return {
        "n": len(problems_sha256),
        "problems_sha256": list(problems_sha256),
        "top_k": 0.05,
        "scale": 1.1,
        "base_correct": 1,
        "edited_correct": 7,
        "base_only": 0,
        "edited_only": 6,
        "mcnemar_p": 0.03125,
        "confirmed": True,
        "alpha": 0.05,
        "point": 0,
        "mask_sha256": mask_sha256,
        **control_evidence(len(problems_sha256), 0, 6),
    }


def valid_sweep(recipe_sets: Sequence[str] = ()) -> dict[str, Any]:
    """A sweep.json whose confirmation passed: 6 of 8 problems right only after the edit, none only before
    (p = 1/32), on the quickstart recipe with ``recipe_sets``."""
    point = {
        "top_k": 0.05,
        "scale": 1.1,
        "selected": 1000,
        "math_correct": 7,
        "math_total": 10,
        "mcnemar_p": 0.25,
        "holm_p": 0.25,
        "general_kl": 0.01,
        "general_loss": 0.7,
    }
    return {
        "selection": {"n": len(SEL), "problems_sha256": list(SEL), "base": {"math_correct": 5}, "points": [point]},
        "confirmation": passed_confirmation(CONF),
        "recommendation": "top_k=0.05 scale=1.1: confirmed",
        "recipe": quickstart_recipe(recipe_sets).public_dict(),
        "base_identity": organism_identity(),
    }


def organism_identity() -> dict[str, Any]:
    """The quickstart base's identity as a sweep records it: the shipped organism's safetensors sha256."""
    return base_identity(quickstart_recipe().base)
