"""The sweep: choose an edit's setting on one set of problems, confirm it on another, release it (issue 21).

One public face for the family of modules that share the sweep's private names (they stay inside this package):

- :mod:`.search`: :func:`run_sweep`, the composition (the run's load, calibrate and mask steps, then the
  selection rounds and the confirmation) and the sweep folder; :mod:`.optuna_search`, ``sweep.search: optuna``;
- :mod:`.stages`: what both searches share (the inputs, the base, the candidate, the result);
- :mod:`.problems`: the selection, confirmation and worked-example problems, disjoint;
- :mod:`.grid`: the variants, one arm per ``(variant, top_k, scale)`` and each arm's point;
- :mod:`.calibration`: each distinct calibration set once, kept under its content key;
- :mod:`.evaluator`: how one point is evaluated (math blocks, general loss and KL), cached;
- :mod:`.confirmation`: the candidate and two control edits on the confirmation problems;
- :mod:`.procedure`: the rules (pure functions of the counts): candidate, confirmation, Holm, halving;
- :mod:`.cache`: the content-keyed result cache that makes a killed sweep resume;
- :mod:`.result`: :class:`SweepResult`, its JSON, CSV, table and plot;
- :mod:`.evidence`: a finished ``sweep.json`` read back and checked, and the release made from it.
"""

import lazy_loader

# __init__.pyi's imports (one list, type checkers read it too), each loaded on first access: no torch at import
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
