"""The steps of a recipe, one function each: what ``run``, ``export``, ``calibrate``, ``mask``, ``eval``,
``consistency`` and ``sweep`` compose (:mod:`..pipeline`, :mod:`..single_steps`, :mod:`..sweep`,
:mod:`..consistency`), so no step is written twice.

load -> calibrate -> mask -> evaluate -> export -> seal (lock + cards). Each step takes the run's one
:class:`~.record.RunRecord` (the recipe, how to report, and what the steps before it filled in) and extends it,
announces itself on a :class:`~mathneuro_edit.util.console.Stages` and writes
nothing of its own unless it is given a folder; the statistics have one layout (:class:`Statistics`:
``math.stats.safetensors``, ``general-<i>.stats.safetensors``) wherever they are saved.

- :mod:`.mask`: load, calibrate (:class:`Statistics`), mask (from the base's files: :func:`checkpoint_weights`),
  and the lock's data records (:func:`data_records`);
- :mod:`.evaluate`: the evaluation tasks, the paired evaluation and ``eval.json``;
- :mod:`.export`: one output per call, by that output's own step (:mod:`mathneuro_edit.outputs`), and what the
  exports record about the base;
- :mod:`.seal`: the lock and each output folder's lock, evaluation and model card;
- :mod:`.record`: :class:`RunRecord`, the state the steps read and extend;
- :mod:`.count`: :func:`stage_count`, how many stage lines a composition announces (from the steps it lists).
"""

import lazy_loader

# __init__.pyi's imports (one list, type checkers read it too), each loaded on first access: no torch at import
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
