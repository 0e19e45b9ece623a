"""The model organism: a tiny causal LM shipped with the package, with two separable skills (math, general text).

It was trained from scratch by ``scripts/train_organism.py`` on the synthetic data of
:mod:`mathneuro_edit.organism.data`, so MathNeuro can be demonstrated and tested offline: pruning its
math-specific weights should collapse math accuracy while general-text loss holds.
"""

import lazy_loader

# the face's names: __init__.pyi's imports, each loaded on first access (importing the face loads no torch)
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
