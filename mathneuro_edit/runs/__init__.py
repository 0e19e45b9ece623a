"""Runs: whole jobs that chain the stages (a recipe run, export, sweep, consistency, plan, reproduce, inspect).

Contract: every CLI command calls one function here or in a stage package; these functions compose the stages
and write their run folders atomically, and hold no method of their own.
"""

from __future__ import annotations

from .consistency import run_consistency
from .pipeline import RunResult, export_recipe, run_recipe
from .plan import plan_from_config, plan_recipe
from .reproduce import reproduce
from .sweep import SweepResult, run_sweep

__all__ = [
    "run_consistency",
    "RunResult",
    "export_recipe",
    "run_recipe",
    "plan_from_config",
    "plan_recipe",
    "reproduce",
    "SweepResult",
    "run_sweep",
]
