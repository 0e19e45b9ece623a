"""The stages of a recipe, one function each: what ``run``, ``export``, ``calibrate``, ``mask``, ``eval``,
``consistency`` and ``sweep`` compose (:mod:`.pipeline`, :mod:`.stages`), so no stage is written twice.

load -> calibrate -> mask -> evaluate -> export -> seal (lock + cards). Each step takes the validated recipe and
what the step before it returned, announces itself on a :class:`~mathneuro_edit.util.console.Stages` and writes
nothing of its own unless it is given a folder; the statistics have one layout (:class:`Statistics`:
``math.stats.safetensors``, ``general-<i>.stats.safetensors``) wherever they are saved. How many stage lines a
composition announces comes from the steps it lists (:func:`stage_count`), not from a hand count.

Where each stage lives (this module re-exports them):

- :mod:`.step_mask`: load, calibrate (:class:`Statistics`), mask (from the base's files: :func:`checkpoint_weights`),
  and the lock's data records (:func:`data_records`);
- :mod:`.step_evaluate`: the evaluation tasks, the paired evaluation and ``eval.json``;
- :mod:`.step_export`: one output per call, by that output's own step (:mod:`mathneuro_edit.outputs`), and what
  the exports record about the base (:class:`BaseRecord`);
- :mod:`.step_seal`: the lock and each output folder's lock, evaluation and model card.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..outputs.adapter import check_adapter_support
from ..outputs.checkpoint import output_dtype
from ..outputs.registry import BaseRecord
from ..recipe.schema import Recipe
from .step_evaluate import describe_tasks, eval_tasks, evaluate_step, note_evaluation, save_evaluation
from .step_export import base_record, export_step, output_kinds
from .step_mask import (
    Statistics,
    calibrate_step,
    checkpoint_weights,
    data_records,
    load_recipe_model,
    load_step,
    mask_step,
)
from .step_seal import evidence_with_overlap, publish_folder, seal_lock, seal_run

__all__ = [
    "Statistics",
    "BaseRecord",
    "stage_count",
    "load_recipe_model",
    "load_step",
    "calibrate_step",
    "mask_step",
    "checkpoint_weights",
    "eval_tasks",
    "describe_tasks",
    "evaluate_step",
    "save_evaluation",
    "note_evaluation",
    "export_step",
    "output_kinds",
    "seal_lock",
    "seal_run",
    "publish_folder",
    "base_record",
    "data_records",
    "evidence_with_overlap",
    "output_dtype",
    "check_adapter_support",
]


def stage_count(recipe: Recipe, steps: Sequence[str], *, tasks: Sequence[Any] = (), kinds: Sequence[str] = ()) -> int:
    """How many ``[i/n]`` lines the listed steps announce: load 1, calibrate one per set, mask 1, evaluate 1 (when
    there are tasks), export one per output kind, seal 1."""
    lines = {
        "load": 1,
        "calibrate": 1 + len(recipe.data.general),
        "mask": 1,
        "evaluate": int(bool(tasks)),
        "export": len(kinds),
        "seal": 1,
    }
    return sum(lines[s] for s in steps)
