"""The sweep: choose an edit's setting on one set of problems, confirm it on another, release it (issue 21).

One public face for the family of modules that share the sweep's private names (they stay inside this package):

- :mod:`.search`: :func:`run_sweep`, the grid, its problems and its folder;
- :mod:`.procedure`: the rules (pure functions of the counts): candidate, confirmation, Holm, halving;
- :mod:`.evaluator`: how one point is evaluated (math blocks, general loss and KL), cached;
- :mod:`.cache`: the content-keyed cache that makes a killed sweep resume;
- :mod:`.result`: :class:`SweepResult`, its JSON, CSV, table and plot;
- :mod:`.evidence`: a finished ``sweep.json`` read back and checked, and the release made from it.

Names load lazily (a module-level ``__getattr__``): importing this face imports no submodule and no torch.
"""

from __future__ import annotations

import importlib
from typing import Any

# public name -> the module of this package that defines it
_LAZY = {
    "run_sweep": "search",
    "check_sweep_folder": "search",
    "sweep_problems": "search",
    "format_shots": "search",
    "DEFAULT_TOP_KS": "search",
    "DEFAULT_SCALES": "search",
    "SweepResult": "result",
    "SweepEvidence": "evidence",
    "read_sweep": "evidence",
    "recipe_from_sweep": "evidence",
    "run_from_sweep": "evidence",
    "ResultCache": "cache",
    "key_sha256": "cache",
    "model_weights_sha256": "evaluator",
    "SweepPoint": "procedure",
    "Confirmation": "procedure",
    "ArmOutcome": "procedure",
    "paired_test": "procedure",
    "format_verdict": "procedure",
    "VERDICTS": "procedure",
    "with_holm": "procedure",
    "pareto_front": "procedure",
    "math_merit": "procedure",
    "select_candidate": "procedure",
    "confirm": "procedure",
    "recommend": "procedure",
    "evidence_text": "procedure",
    "halving_schedule": "procedure",
    "promote": "procedure",
}

__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    """Import the defining module of ``name`` on first use (PEP 562)."""
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)


def __dir__() -> list[str]:
    return sorted(__all__)
