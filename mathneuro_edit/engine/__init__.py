"""The method itself, free of recipes, files of other stages and runs: MathNeuro's statistics and masks.

Contract: plain arguments in, tensors and artifacts out (like ``safetensors.torch``). Nothing here reads a recipe,
a run folder or a model folder; :mod:`~mathneuro_edit.recipe`, :mod:`~mathneuro_edit.weights` and
:mod:`~mathneuro_edit.runs` call into it, never the other way round (the import rule in pyproject.toml).
Its modules are mapped in docs/architecture.md.
"""

import lazy_loader

# the face's names: __init__.pyi's imports, each loaded on first access (importing the face loads no torch)
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
