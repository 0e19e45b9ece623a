"""The steps of a recipe, one function each: what ``run``, ``export``, ``calibrate``, ``mask``, ``eval``,
``consistency`` and ``sweep`` compose (:mod:`..pipeline`, :mod:`..single_steps`, :mod:`..sweep`,
:mod:`..consistency`), so no step is written twice.

load -> calibrate -> mask -> evaluate -> export -> seal (lock + cards). Each step takes the run's one
:class:`~.record.RunRecord` (the recipe, how to report, and what the steps before it filled in) and extends it,
announces itself on a :class:`~mathneuro_edit.util.console.Stages` and writes
nothing of its own unless it is given a folder; the statistics have one layout (:class:`Statistics`:
``math.stats.safetensors``, ``general-<i>.stats.safetensors``) wherever they are saved. How many stage lines a
composition announces comes from the steps it lists (:func:`stage_count`), not from a hand count.

- :mod:`.mask`: load, calibrate (:class:`Statistics`), mask (from the base's files: :func:`checkpoint_weights`),
  and the lock's data records (:func:`data_records`);
- :mod:`.evaluate`: the evaluation tasks, the paired evaluation and ``eval.json``;
- :mod:`.export`: one output per call, by that output's own step (:mod:`mathneuro_edit.outputs`), and what the
  exports record about the base;
- :mod:`.seal`: the lock and each output folder's lock, evaluation and model card;
- :mod:`.record`: :class:`RunRecord`, the state the steps read and extend;
- :mod:`.count`: :func:`stage_count`.

Names load lazily (:func:`~mathneuro_edit.util.lazy.lazy_face`): importing this face imports no step and no torch.
"""

from __future__ import annotations

from ...util.lazy import lazy_face

# public name -> the module of this package that defines it
_LAZY: dict[str, str] = {
    "stage_count": "count",
    "RunRecord": "record",
    "Statistics": "mask",
    "load_recipe_model": "mask",
    "load_step": "mask",
    "calibrate_set": "mask",
    "calibrate_step": "mask",
    "data_records": "mask",
    "mask_step": "mask",
    "recipe_masks": "mask",
    "checkpoint_weights": "mask",
    "eval_tasks": "evaluate",
    "describe_tasks": "evaluate",
    "evaluate_step": "evaluate",
    "save_evaluation": "evaluate",
    "note_evaluation": "evaluate",
    "output_kinds": "export",
    "base_record": "export",
    "release_dtype": "export",
    "export_step": "export",
    "seal_run": "seal",
    "seal_lock": "seal",
    "publish_folder": "seal",
    "evidence_with_overlap": "seal",
}

__all__ = list(_LAZY)

__getattr__, __dir__ = lazy_face(__name__, _LAZY)
