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

from .apply import ReversibleEdit, apply_mask, check_scale, scale_masked
from .calibration import calibrate
from .distributed import calibrate_distributed
from .mask import Mask, as_mask, find_math_params, find_math_params_multi, k_of
from .stats import ActivationStats
from .targets import Target, find_targets, model_fingerprint
from .topk import top_fraction, top_fraction_flat

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
