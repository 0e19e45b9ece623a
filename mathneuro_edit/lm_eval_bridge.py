"""Optional bridge to EleutherAI's lm-evaluation-harness: run its tasks on the in-memory model, base and edited.

Installed with ``pip install mathneuro-edit[eval]``; without it, an :class:`LmEvalTask` raises an
:class:`~mathneuro_edit.errors.InputError` that says so before anything is computed.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from .errors import InputError

__all__ = ["LmEvalTask", "LmEvalResult", "require_lm_eval", "run_lm_eval"]

_INSTALL_HINT = "pip install mathneuro-edit[eval]"


@dataclass(frozen=True)
class LmEvalTask:
    """A group of lm-evaluation-harness tasks, run on the in-memory model (``lm_eval.simple_evaluate``).

    Args:
        name: the name of this entry in the results (unique within one :func:`~mathneuro_edit.evaluation.evaluate`).
        tasks: lm-eval task names, e.g. ``["gsm8k_cot", "mmlu"]``.
        limit: evaluate only the first ``limit`` documents of each task (``None``: all); a float in (0, 1) is a
            fraction, as in lm-eval.

    Example:
        >>> LmEvalTask("harness", tasks=["gsm8k_cot"], limit=100).tasks
        ('gsm8k_cot',)
    """

    name: str
    tasks: Sequence[str] = ("gsm8k_cot",)
    limit: int | float | None = None

    def __post_init__(self) -> None:
        if isinstance(self.tasks, str) or not self.tasks or not all(isinstance(t, str) and t for t in self.tasks):
            raise InputError(
                f"LmEvalTask {self.name!r}: tasks must be a non-empty list of lm-eval task names, got "
                f"{self.tasks!r}; e.g. tasks=['gsm8k_cot']"
            )
        object.__setattr__(self, "tasks", tuple(self.tasks))
        if self.limit is not None and (isinstance(self.limit, bool) or not self.limit > 0):
            raise InputError(f"LmEvalTask {self.name!r}: limit must be > 0 or None, got {self.limit!r}")

    @property
    def sha256(self) -> str:
        """Fingerprint of the task's settings (a cached base result is only reused for the same fingerprint)."""
        spec = {"kind": "lm_eval", "tasks": list(self.tasks), "limit": self.limit}
        return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class LmEvalResult:
    """Numeric metrics of one lm-eval run, flattened as ``"{task}/{metric,filter}"`` -> value.

    Example:
        >>> LmEvalResult({"gsm8k_cot/exact_match,strict-match": 0.25}).metrics()
        {'gsm8k_cot/exact_match,strict-match': 0.25}
    """

    values: dict[str, float]
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)  # lm-eval's "results" section
    task_sha256: str = ""

    def metrics(self) -> dict[str, float]:
        """The metrics as a flat dict (the form of ``eval.json``)."""
        return dict(self.values)


def require_lm_eval(task_name: str) -> tuple[Any, Any]:
    """Import lm-evaluation-harness, or raise a one-line :class:`InputError` saying how to install it.

    Args:
        task_name: the :class:`LmEvalTask` that needs it (named in the message).

    Returns:
        ``(lm_eval module, HFLM class)``.

    Example:
        >>> require_lm_eval("harness")  # doctest: +SKIP
    """
    try:
        import lm_eval
        from lm_eval.models.huggingface import HFLM
    except ImportError:
        raise InputError(
            f"LmEvalTask {task_name!r}: lm-evaluation-harness is not installed; install it with "
            f"`{_INSTALL_HINT}` or remove this task"
        ) from None
    return lm_eval, HFLM


def _flatten(results: dict[str, dict[str, Any]]) -> dict[str, float]:
    # keep numbers only: lm-eval mixes in "alias" strings and "N/A" placeholders for missing stderr
    return {
        f"{task}/{metric}": float(value)
        for task, metrics in results.items()
        for metric, value in metrics.items()
        if isinstance(value, (int, float)) and not isinstance(value, bool)
    }


def run_lm_eval(
    model: nn.Module, tokenizer: Any, task: LmEvalTask, *, edit: Any = None, base: LmEvalResult | None = None,
    batch_size: int = 16,
) -> tuple[LmEvalResult, LmEvalResult | None]:
    """Run one :class:`LmEvalTask` on the in-memory model: base (unless given), then edited (with ``edit``).

    Args:
        model: a ``transformers.PreTrainedModel`` with its base weights (not reloaded from disk).
        tokenizer: its tokenizer; lm-eval gets a deep copy (it may set a pad token), the caller's is untouched.
        task: the task group.
        edit: a :class:`~mathneuro_edit.apply.ReversibleEdit` on ``model`` or ``None``; restored on return.
        base: a cached base result for this task (skips the base run).
        batch_size: lm-eval's batch size.

    Returns:
        ``(base, edited)``; ``edited`` is ``None`` without an edit.

    Example:
        >>> base, edited = run_lm_eval(model, tok, LmEvalTask("h", ["gsm8k_cot"]), edit=edit)  # doctest: +SKIP
    """
    lm_eval, hflm_class = require_lm_eval(task.name)
    lm = hflm_class(pretrained=model, tokenizer=copy.deepcopy(tokenizer), batch_size=batch_size)

    def run() -> LmEvalResult:
        result = lm_eval.simple_evaluate(model=lm, tasks=list(task.tasks), limit=task.limit)
        if result is None:  # non-zero rank of a distributed run: lm-eval returns nothing there
            raise InputError(f"LmEvalTask {task.name!r}: lm-eval returned no results; run it in a single process")
        raw = dict(result.get("results", {}))
        return LmEvalResult(_flatten(raw), raw, task.sha256)

    if base is None:
        base = run()
    if edit is None:
        return base, None
    edit.apply()
    try:
        return base, run()
    finally:
        edit.restore()
