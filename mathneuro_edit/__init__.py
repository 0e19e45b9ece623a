"""mathneuro-edit: find and edit the math-specific weights of language models with MathNeuro.

MathNeuro (Christ et al., arXiv 2410.16930) scores every weight as ``|W_ij| x sum over samples of the L2 norm
of input feature j`` using forward passes only, keeps the top-K per matrix on math data minus the top-K on
general data, and prunes (x0) or scales (e.g. x1.1) those weights.

Example:
    >>> from mathneuro_edit import load_model, load_texts, calibrate, find_math_params, apply_mask  # doctest: +SKIP
    >>> model, tok = load_model("organism", dtype="float32")  # doctest: +SKIP
    >>> math = calibrate(model, tok, load_texts("organism:math", 100, seed=0).texts)  # doctest: +SKIP
    >>> general = calibrate(model, tok, load_texts("organism:general", 100, seed=0).texts)  # doctest: +SKIP
    >>> mask = find_math_params(model, math, general, top_k=0.05)  # doctest: +SKIP
    >>> apply_mask(model, mask, scale=1.1)  # doctest: +SKIP

Every command has its function here: ``run`` -> :func:`run_recipe` (``--from-sweep``: :func:`run_from_sweep`),
``sweep`` -> :func:`run_sweep`, ``calibrate`` -> :func:`calibrate`, ``mask`` -> :func:`find_math_params`, ``export``
-> :func:`export_checkpoint`, :func:`export_adapter`, :func:`export_gguf`, ``eval`` -> :func:`evaluate`, ``card`` ->
:func:`rewrite_cards` (:func:`build_card` + :func:`write_card` for one folder), ``push`` -> :func:`push_to_hub`,
``verify`` -> :func:`verify`, ``reproduce`` -> :func:`reproduce`, ``plan`` -> :func:`plan_from_config`,
``dequantize`` -> :func:`dequantize_gguf`, ``consistency`` -> :func:`run_consistency`, ``inspect`` ->
:meth:`Mask.load` / :meth:`ActivationStats.load`.

Heavy dependencies (torch, transformers) load lazily, so ``import mathneuro_edit`` and the CLI's ``--help``
stay fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._version import __version__
from .util.lazy import lazy_face

# public name -> module that defines it (loaded on first access)
_LAZY: dict[str, str] = {
    "calibrate": "engine.calibration",
    "texts_sha256": "util.hashing",
    "ActivationStats": "engine.stats",
    "find_math_params": "engine.mask",
    "find_math_params_multi": "engine.mask",
    "Mask": "engine.mask",
    "apply_mask": "engine.apply",
    "scale_masked": "engine.apply",
    "ReversibleEdit": "engine.apply",
    "find_targets": "engine.targets",
    "Target": "engine.targets",
    "export_checkpoint": "weights.checkpoint_writer",
    "export_adapter": "weights.adapter",
    "export_gguf": "weights.gguf_writer",
    "load_edited": "weights.adapter",
    "AdapterExport": "weights.adapter",
    "verify": "weights.audit",
    "VerifyReport": "weights.audit",
    "evaluate": "evaluation.runner",
    "EvalResults": "evaluation.results",
    "MathTask": "evaluation.tasks",
    "GeneralTask": "evaluation.tasks",
    "Recipe": "recipe.schema",
    "load_recipe": "recipe.io",
    "run_recipe": "runs.pipeline",
    "run_sweep": "runs.sweep.search",
    "SweepResult": "runs.sweep.result",
    "run_from_sweep": "runs.sweep.evidence",
    "reproduce": "runs.reproduce",
    "ReproduceReport": "runs.reproduce",
    "build_card": "publish.card",
    "write_card": "publish.card",
    "rewrite_cards": "runs.release",
    "run_consistency": "runs.consistency",
    "push_to_hub": "publish.hub",
    "load_model": "weights.loading",
    "load_texts": "data.sources",
    "model_weights": "weights.loading",
    "weights_from_checkpoint": "weights.loading",
    "dequantize_gguf": "weights.gguf_reader",
    "calibrate_distributed": "engine.distributed",
    "plan_from_config": "runs.plan",
    "MathNeuroEditError": "errors",
    "InputError": "errors",
}

# the public API spelled out (for readers and linters): _LAZY's names; tests/test_python_api.py checks they agree
__all__ = [
    "__version__",
    "calibrate",
    "texts_sha256",
    "ActivationStats",
    "find_math_params",
    "find_math_params_multi",
    "Mask",
    "apply_mask",
    "scale_masked",
    "ReversibleEdit",
    "find_targets",
    "Target",
    "export_checkpoint",
    "export_adapter",
    "export_gguf",
    "load_edited",
    "AdapterExport",
    "verify",
    "VerifyReport",
    "evaluate",
    "EvalResults",
    "MathTask",
    "GeneralTask",
    "Recipe",
    "load_recipe",
    "run_recipe",
    "run_sweep",
    "SweepResult",
    "run_from_sweep",
    "reproduce",
    "ReproduceReport",
    "build_card",
    "write_card",
    "rewrite_cards",
    "run_consistency",
    "push_to_hub",
    "load_model",
    "load_texts",
    "model_weights",
    "weights_from_checkpoint",
    "dequantize_gguf",
    "calibrate_distributed",
    "plan_from_config",
    "MathNeuroEditError",
    "InputError",
]

if TYPE_CHECKING:
    from .data.sources import load_texts
    from .engine.apply import ReversibleEdit, apply_mask, scale_masked
    from .engine.calibration import calibrate
    from .engine.distributed import calibrate_distributed
    from .engine.mask import Mask, find_math_params, find_math_params_multi
    from .engine.stats import ActivationStats
    from .engine.targets import Target, find_targets
    from .errors import InputError, MathNeuroEditError
    from .evaluation.results import EvalResults
    from .evaluation.runner import evaluate
    from .evaluation.tasks import GeneralTask, MathTask
    from .publish.card import build_card, write_card
    from .publish.hub import push_to_hub
    from .recipe.io import load_recipe
    from .recipe.schema import Recipe
    from .runs.consistency import run_consistency
    from .runs.pipeline import run_recipe
    from .runs.plan import plan_from_config
    from .runs.release import rewrite_cards
    from .runs.reproduce import ReproduceReport, reproduce
    from .runs.sweep.evidence import run_from_sweep
    from .runs.sweep.result import SweepResult
    from .runs.sweep.search import run_sweep
    from .util.hashing import texts_sha256
    from .weights.adapter import AdapterExport, export_adapter, load_edited
    from .weights.audit import VerifyReport, verify
    from .weights.checkpoint_writer import export_checkpoint
    from .weights.gguf_reader import dequantize_gguf
    from .weights.gguf_writer import export_gguf
    from .weights.loading import load_model, model_weights, weights_from_checkpoint


__getattr__ = lazy_face(__name__, _LAZY)[0]


def __dir__() -> list[str]:
    return sorted(__all__)
