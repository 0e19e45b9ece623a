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
    """The state of one run, filled in step by step.

    Attributes:
        recipe: the validated recipe (never changed by a step).
        stages: the stage printer (:class:`~mathneuro_edit.util.console.Stages`); ``None``: silent.
        workers: checkpoint shards written at once (the checkpoint's step).
        kinds: the outputs written into a folder of their own, in order (:func:`~.export.output_kinds`).
        tasks: the evaluation tasks (:func:`~.evaluate.eval_tasks`); empty: no evaluation stage.
        sweep_evidence: the sweep's confirmation of this setting (``run --from-sweep``), for the lock and card.
        model: the loaded base (``load``); dropped before the exports, which stream from the base's files.
        tokenizer: its tokenizer (``load``).
        stats: the calibration statistics (``calibrate``, or loaded from a folder).
        mask: the edit's mask (``mask``, or loaded from a file).
        results: the paired evaluation (``evaluate``).
        evaluation: ``(eval.json's dict, lm-eval's own result files)`` as saved (``None, {}`` without one).
        n_params: the model's parameter count (from the model, or from the base's files for an export).
        base: what the exports, the lock and the cards record about the base.
        written: what each output's step returned, by kind (the adapter: its size as a fraction of the
            checkpoint's; others ``None``).
    """

    recipe: Recipe
    stages: Any = None
    progress: bool = True
    workers: int = 1
    kinds: list[str] = field(default_factory=list)
    tasks: list[Any] = field(default_factory=list)
    sweep_evidence: Mapping[str, Any] | None = None
    model: Any = None
    tokenizer: Any = None
    stats: Any = None
    mask: Any = None
    results: Any = None
    evaluation: tuple[dict[str, Any] | None, Mapping[str, Any]] = field(default_factory=lambda: (None, {}))
    n_params: int = 0
    base: Any = None
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
