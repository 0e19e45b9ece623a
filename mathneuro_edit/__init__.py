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

Heavy dependencies (torch, transformers) load lazily, so ``import mathneuro_edit`` and the CLI's ``--help``
stay fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> module that defines it (loaded on first access)
_LAZY: dict[str, str] = {
    "calibrate": "calibration",
    "texts_sha256": "calibration",
    "ActivationStats": "stats",
    "find_math_params": "mask",
    "find_math_params_multi": "mask",
    "Mask": "mask",
    "apply_mask": "apply",
    "scale_masked": "apply",
    "ReversibleEdit": "apply",
    "find_targets": "targets",
    "Target": "targets",
    "export_checkpoint": "export",
    "export_adapter": "adapter",
    "load_edited": "adapter",
    "AdapterExport": "adapter",
    "verify": "audit",
    "VerifyReport": "audit",
    "evaluate": "evaluation",
    "EvalResults": "evaluation",
    "MathTask": "evaluation",
    "GeneralTask": "evaluation",
    "Recipe": "recipe",
    "load_recipe": "recipe_io",
    "run_recipe": "pipeline",
    "push_to_hub": "hub",
    "load_model": "loading",
    "load_texts": "data",
    "model_weights": "loading",
    "weights_from_checkpoint": "loading",
    "dequantize_gguf": "gguf_base",
    "calibrate_distributed": "distributed",
    "plan_from_config": "plan",
    "MathNeuroEditError": "errors",
    "InputError": "errors",
}

__all__ = ["__version__", *_LAZY]

if TYPE_CHECKING:
    from .adapter import AdapterExport, export_adapter, load_edited
    from .apply import ReversibleEdit, apply_mask, scale_masked
    from .evaluation import EvalResults, GeneralTask, MathTask, evaluate
    from .export import export_checkpoint
    from .distributed import calibrate_distributed
    from .hub import push_to_hub
    from .loading import load_model, model_weights, weights_from_checkpoint
    from .gguf_base import dequantize_gguf
    from .plan import plan_from_config
    from .pipeline import run_recipe
    from .recipe import Recipe
    from .recipe_io import load_recipe
    from .audit import VerifyReport, verify
    from .calibration import calibrate, texts_sha256
    from .data import load_texts
    from .errors import InputError, MathNeuroEditError
    from .mask import Mask, find_math_params, find_math_params_multi
    from .stats import ActivationStats
    from .targets import Target, find_targets


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'mathneuro_edit' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
