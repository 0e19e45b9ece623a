"""The run folder: the one home of its file names, and finding them in a folder.

``mathneuro-edit run`` writes::

    OUT/
      checkpoint/                      the edited model (README.md card, lock, eval.json inside)
      adapter/                         the same edit as a PEFT adapter (when outputs.adapter)
      mask.safetensors                 the math-specific weights
      stats/math.stats.safetensors     calibration statistics, one file per set
      stats/general-<i>.stats.safetensors
      eval.json                        base vs edited, with intervals and paired tests
      mathneuro_recipe.lock.yaml       the recipe with every default explicit, plus every hash

The output folders (``checkpoint/``, ``adapter/``) are their outputs' own (:mod:`mathneuro_edit.outputs`).
``calibrate --out`` writes the ``*.stats.safetensors`` files directly; ``sweep --out`` writes ``sweep.json``,
``sweep.csv``, ``sweep.png`` and the statistics; ``consistency --out`` writes ``consistency.json``. Every writer and reader of
these names imports them from here.
"""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "LOCK_NAME",
    "MASK_NAME",
    "EVAL_NAME",
    "LM_EVAL_RESULTS",
    "STATS_DIR",
    "MATH_STATS_NAME",
    "SWEEP_JSON",
    "SWEEP_CSV",
    "SWEEP_PNG",
    "SWEEP_MARKER",
    "OPTUNA_STUDY",
    "OPTUNA_PNGS",
    "CONSISTENCY_JSON",
    "MATHNEURO_CONFIG",
    "MATHNEURO_MASK",
    "general_stats_name",
    "general_stats_files",
]

LOCK_NAME = "mathneuro_recipe.lock.yaml"
MASK_NAME = "mask.safetensors"
EVAL_NAME = "eval.json"
# lm-eval's own results file, one per model evaluated (base, edited), beside eval.json
LM_EVAL_RESULTS = ("lm_eval_results.base.json", "lm_eval_results.edited.json")
STATS_DIR = "stats"
MATH_STATS_NAME = "math.stats.safetensors"
SWEEP_JSON = "sweep.json"
SWEEP_CSV = "sweep.csv"
SWEEP_PNG = "sweep.png"
# sweep.search: optuna: the study (SQLite: a killed search resumes from it) and Optuna's plots beside sweep.json
OPTUNA_STUDY = "optuna.sqlite3"
OPTUNA_PNGS = ("optuna-history.png", "optuna-importances.png", "optuna-front.png")
# written first into a sweep's --out: a folder is resumed only when it holds this (or a finished sweep's sweep.json),
# never because it has a cache/ or stats/ folder of its own
SWEEP_MARKER = ".mathneuro-sweep.json"
CONSISTENCY_JSON = "consistency.json"
# an adapter folder's own files beside PEFT's (adapter_config.json): read by the torch-free output registry too
MATHNEURO_CONFIG = "mathneuro_edit_adapter.json"
MATHNEURO_MASK = "mathneuro_edit_mask.safetensors"
_GENERAL_GLOB = "general-*.stats.safetensors"


def general_stats_name(i: int) -> str:
    """File name of the ``i``-th general statistics set.

    Example:
        >>> general_stats_name(0)
        'general-0.stats.safetensors'
    """
    return f"general-{i}.stats.safetensors"


def general_stats_files(folder: str | Path) -> list[Path]:
    """The general statistics files of a statistics folder, in set order (``general-0``, ``general-1``, ...)."""

    def index(p: Path) -> tuple[int, str]:
        digits = p.name.removeprefix("general-").split(".", 1)[0]
        return (int(digits), p.name) if digits.isdigit() else (1 << 62, p.name)

    return sorted(Path(folder).glob(_GENERAL_GLOB), key=index)
