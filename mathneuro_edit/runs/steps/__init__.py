"""The steps of a recipe, one function each: what ``run``, ``export``, ``calibrate``, ``mask``, ``eval``,
``consistency`` and ``sweep`` compose (:mod:`..pipeline`, :mod:`..single_steps`, :mod:`..sweep`,
:mod:`..consistency`), so no step is written twice.

load -> calibrate -> mask (:mod:`.mask`) -> evaluate (:mod:`.evaluate`) -> export (:mod:`.export`) -> seal (lock +
cards, :mod:`.seal`); :func:`stage_count` (:mod:`.count`) counts the stage lines a composition announces. Each step
takes the run's one :class:`~.record.RunRecord` (the recipe, how to report, and what the steps before it filled in)
and extends it, announces itself on a :class:`~mathneuro_edit.util.console.Stages` and writes nothing of its own
unless it is given a folder.
"""

import lazy_loader

# __init__.pyi's imports (one list, type checkers read it too), each loaded on first access: no torch at import
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
