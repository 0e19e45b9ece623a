"""Text sources for calibration and evaluation: files, Hub datasets, the organism's data, the arithmetic task.

Contract: a source string (``organism:math``, ``arithmetic``, a local file, ``hf://datasets/...``) becomes texts
or problems, sampled reproducibly by seed, with a content fingerprint of what was used.
"""

import lazy_loader

# the face's names: __init__.pyi's imports, each loaded on first access (importing the face loads no torch)
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
