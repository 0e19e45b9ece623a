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

import lazy_loader

from ._version import __version__ as __version__

# the public names are __init__.pyi's imports (its one list, which type checkers read too), each but __version__
# loaded on first access from the module that defines it: importing the package imports no torch
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
