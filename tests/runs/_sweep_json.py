"""A confirmation's evidence as a sweep.json records it, for tests that write sweep.json files by hand."""

from __future__ import annotations

from typing import Any

from mathneuro_edit.evaluation.significance import mcnemar_exact


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
