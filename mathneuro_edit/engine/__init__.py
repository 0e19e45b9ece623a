"""The method itself, free of recipes, files of other stages and runs: MathNeuro's statistics and masks.

Contract: plain arguments in, tensors and artifacts out (like ``safetensors.torch``). Nothing here reads a recipe,
a run folder or a model folder; :mod:`~mathneuro_edit.recipe`, :mod:`~mathneuro_edit.weights` and
:mod:`~mathneuro_edit.runs` call into it, never the other way round (the import rule in pyproject.toml).

- :mod:`.targets`: which parameters are scored and how inputs map to weights;
- :mod:`.recorder`, :mod:`.forward_stop`, :mod:`.calibration`, :mod:`.distributed`: forward passes with hooks
  that accumulate the per-input-feature statistics (:class:`~.stats.ActivationStats`);
- :mod:`.topk`, :mod:`.mask`: top-K per matrix on math minus top-K on general (:class:`~.mask.Mask`);
- :mod:`.official`: the released MathNeuro script's selection, bit for bit (its own batch-1 pass; sums in the
  model's dtype);
- :mod:`.apply`: scaling or pruning the selected weights in memory (the one definition of an edited value).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..util.lazy import lazy_face

# public name -> the module that defines it, imported on first access (importing one module of this package
# never imports its siblings: torch loads only where it is used)
_LAZY: dict[str, str] = {
    "ReversibleEdit": "apply",
    "apply_mask": "apply",
    "check_scale": "apply",
    "scale_masked": "apply",
    "calibrate": "calibration",
    "calibrate_distributed": "distributed",
    "Mask": "mask",
    "as_mask": "mask",
    "find_math_params": "mask",
    "find_math_params_multi": "mask",
    "k_of": "mask",
    "ActivationStats": "stats",
    "Target": "targets",
    "find_targets": "targets",
    "model_fingerprint": "targets",
    "top_fraction": "topk",
    "top_fraction_flat": "topk",
}

__all__ = [
    "ReversibleEdit",
    "apply_mask",
    "check_scale",
    "scale_masked",
    "calibrate",
    "calibrate_distributed",
    "Mask",
    "as_mask",
    "find_math_params",
    "find_math_params_multi",
    "k_of",
    "ActivationStats",
    "Target",
    "find_targets",
    "model_fingerprint",
    "top_fraction",
    "top_fraction_flat",
]

if TYPE_CHECKING:
    from .apply import ReversibleEdit, apply_mask, check_scale, scale_masked
    from .calibration import calibrate
    from .distributed import calibrate_distributed
    from .mask import Mask, as_mask, find_math_params, find_math_params_multi, k_of
    from .stats import ActivationStats
    from .targets import Target, find_targets, model_fingerprint
    from .topk import top_fraction, top_fraction_flat

__getattr__, __dir__ = lazy_face(__name__, _LAZY)
