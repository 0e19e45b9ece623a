"""The model organism: a tiny causal LM shipped with the package, with two separable skills (math, general text).

It was trained from scratch by ``scripts/train_organism.py`` on the synthetic data of
:mod:`mathneuro_edit.organism.data`, so MathNeuro can be demonstrated and tested offline: pruning its
math-specific weights should collapse math accuracy while general-text loss holds.
"""

import lazy_loader

# the face's names are __init__.pyi's imports (its one list, which type checkers read too), each loaded on first
# access from the module that defines it: importing the face imports none of the package's modules, and no torch
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
