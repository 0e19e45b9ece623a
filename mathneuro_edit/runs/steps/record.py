"""One run's record: the state every step of a job reads and extends (llm-compressor's one ``State``): a job makes
one from its recipe and how to report and hands it to its steps in order (:class:`RunRecord` names which step fills
which field).

Why one object: the steps used to take 8-15 loose parameters each (the recipe, the model, the tokenizer, the
statistics, the mask, the tasks, progress, workers, the stage printer, ...), passed again at every call; a step now
says which fields it reads and which it fills, and an output's step reads the record through
:class:`~mathneuro_edit.outputs.registry.RunView`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ...recipe.schema import Recipe

__all__ = ["RunRecord"]


@dataclass
class RunRecord:
    """The state of one run, filled in step by step (each field says which step fills it)."""

    recipe: Recipe  # validated; never changed by a step
    stages: Any = None  # the stage printer (util.console.Stages); None: silent
    progress: bool = True
    workers: int = 1  # checkpoint shards written at once (the checkpoint's step)
    kinds: list[str] = field(default_factory=list)  # the outputs with a folder of their own, in order (output_kinds)
    tasks: list[Any] = field(default_factory=list)  # the evaluation tasks (eval_tasks); empty: no evaluation stage
    sweep_evidence: Mapping[str, Any] | None = None  # the sweep's confirmation (run --from-sweep), for lock and card
    model: Any = None  # the loaded base (load); dropped before the exports, which stream from the base's files
    tokenizer: Any = None  # its tokenizer (load)
    stats: Any = None  # the calibration statistics (calibrate, or loaded from a folder)
    mask: Any = None  # the edit's mask (mask, or loaded from a file)
    results: Any = None  # the paired evaluation (evaluate)
    # (eval.json's dict, lm-eval's own result files) as saved; (None, {}) without an evaluation
    evaluation: tuple[dict[str, Any] | None, Mapping[str, Any]] = field(default_factory=lambda: (None, {}))
    n_params: int = 0  # the model's parameter count (from the model, or from the base's files for an export)
    base: Any = None  # what the exports, the lock and the cards record about the base (base_record)
    # what each output's step returned, by kind (the adapter: its size as a fraction of the checkpoint's)
    written: dict[str, float | None] = field(default_factory=dict)

    def start(self, line: str) -> None:
        """Announce a stage (``[i/n] line``), when the record has a stage printer."""
        if self.stages is not None:
            self.stages.start(line)

    def note(self, line: str) -> None:
        """A note under the current stage, when the record has a stage printer."""
        if self.stages is not None:
            self.stages.note(line)

    @property
    def size_ratio(self) -> float | None:
        """The adapter's size as a fraction of the checkpoint's, when an output reported one (``run --json``)."""
        reported = [r for r in self.written.values() if r is not None]
        return reported[-1] if reported else None
