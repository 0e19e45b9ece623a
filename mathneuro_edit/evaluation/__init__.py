"""Evaluation: did the edit change math, and at what general cost? (n, intervals, paired tests).

Contract: :func:`~.runner.evaluate` runs tasks on a model as it is and as edited (math accuracy by greedy
generation, general-text loss and KL, lm-eval tasks through :mod:`.lm_eval_bridge`) and returns one
:class:`~.results.EvalResults`; :mod:`.significance` holds the statistics (Wilson intervals, exact McNemar);
:mod:`.report` turns results into the table and verdict that the console, eval.json, the card and sweeps share;
:mod:`.prompts` renders prompts (chat templates included) and reads answers. Named ``evaluation`` (not
``evaluate``) so that ``from mathneuro_edit import evaluate`` is always the function.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..util.lazy import lazy_face

# public name -> the module that defines it, imported on first access (importing one module of this package
# never imports its siblings: torch loads only where it is used)
_LAZY: dict[str, str] = {
    "LmEvalTask": "lm_eval_task",
    "EvalResults": "results",
    "GeneralTask": "tasks",
    "MathTask": "tasks",
    "evaluate": "runner",
    "mcnemar_exact": "significance",
    "wilson_interval": "significance",
}

__all__ = [
    "LmEvalTask",
    "EvalResults",
    "GeneralTask",
    "MathTask",
    "evaluate",
    "mcnemar_exact",
    "wilson_interval",
]

if TYPE_CHECKING:
    from .lm_eval_task import LmEvalTask
    from .results import EvalResults
    from .runner import evaluate
    from .significance import mcnemar_exact, wilson_interval
    from .tasks import GeneralTask, MathTask

__getattr__, __dir__ = lazy_face(__name__, _LAZY)
