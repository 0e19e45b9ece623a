"""Runs: whole jobs that chain the stages (a recipe run, export, sweep, consistency, plan, reproduce, inspect).

Contract: every CLI command calls one function here or in a stage package; these functions compose the stages
and write their run folders atomically, and hold no method of their own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..util.lazy import lazy_face

# public name -> the module that defines it, imported on first access (importing one module of this package
# never imports its siblings: torch loads only where it is used)
_LAZY: dict[str, str] = {
    "run_consistency": "consistency",
    "RunResult": "pipeline",
    "export_recipe": "pipeline",
    "run_recipe": "pipeline",
    "plan_from_config": "plan",
    "plan_recipe": "plan",
    "SweepResult": "sweep.result",
    "run_sweep": "sweep.search",
}

__all__ = [
    "run_consistency",
    "RunResult",
    "export_recipe",
    "run_recipe",
    "plan_from_config",
    "plan_recipe",
    "SweepResult",
    "run_sweep",
]

if TYPE_CHECKING:
    from .consistency import run_consistency
    from .pipeline import RunResult, export_recipe, run_recipe
    from .plan import plan_from_config, plan_recipe
    from .sweep.result import SweepResult
    from .sweep.search import run_sweep

__getattr__, __dir__ = lazy_face(__name__, _LAZY)
