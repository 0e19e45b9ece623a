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

import lazy_loader

# the face's names are __init__.pyi's imports (its one list, which type checkers read too), each loaded on first
# access from the module that defines it: importing the face imports none of the package's modules, and no torch
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
