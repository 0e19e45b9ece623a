"""The sweep: choose an edit's setting on one set of problems, confirm it on another, release it (issue 21).

One public face for the family of modules that share the sweep's private names (they stay inside this package):

- :mod:`.search`: :func:`run_sweep`, the composition (the run's load, calibrate and mask steps, then the
  selection rounds and the confirmation) and the sweep folder;
- :mod:`.problems`: the selection, confirmation and worked-example problems, disjoint;
- :mod:`.grid`: the variants, one arm per ``(variant, top_k, scale)`` and each arm's point;
- :mod:`.calibration`: each distinct calibration set once, kept under its content key;
- :mod:`.evaluator`: how one point is evaluated (math blocks, general loss and KL), cached;
- :mod:`.confirmation`: the candidate and two control edits on the confirmation problems;
- :mod:`.procedure`: the rules (pure functions of the counts): candidate, confirmation, Holm, halving;
- :mod:`.cache`: the content-keyed result cache that makes a killed sweep resume;
- :mod:`.result`: :class:`SweepResult`, its JSON, CSV, table and plot;
- :mod:`.evidence`: a finished ``sweep.json`` read back and checked, and the release made from it.

Names load lazily (:func:`~mathneuro_edit.util.lazy.lazy_face`): importing this face imports no submodule and no
torch.
"""

from __future__ import annotations

from ...util.lazy import lazy_face

# public name -> the module of this package that defines it
_LAZY: dict[str, str] = {
    "run_sweep": "search",
    "check_sweep_folder": "search",
    "DEFAULT_TOP_KS": "search",
    "DEFAULT_SCALES": "search",
    "sweep_problems": "problems",
    "format_shots": "problems",
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

__getattr__, __dir__ = lazy_face(__name__, _LAZY)
