"""Text sources for calibration and evaluation: files, Hub datasets, the organism's data, the arithmetic task.

Contract: a source string (``organism:math``, ``arithmetic``, a local file, ``hf://datasets/...``) becomes texts
or problems, sampled reproducibly by seed, with a content fingerprint of what was used.
"""

from __future__ import annotations

from .arithmetic import arithmetic_problems
from .sources import (
    LoadedTexts,
    load_math_problems,
    load_set,
    load_texts,
    problem_sha256,
)

__all__ = ["arithmetic_problems", "LoadedTexts", "load_math_problems", "load_set", "load_texts", "problem_sha256"]
