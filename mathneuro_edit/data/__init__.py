"""Text sources for calibration and evaluation: files, Hub datasets, the organism's data, the arithmetic task.

Contract: a source string (``organism:math``, ``arithmetic``, a local file, ``hf://datasets/...``) becomes texts
or problems, sampled reproducibly by seed, with a content fingerprint of what was used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..util.lazy import lazy_face

# public name -> the module that defines it, imported on first access (importing one module of this package
# never imports its siblings: torch loads only where it is used)
_LAZY: dict[str, str] = {
    "arithmetic_problems": "arithmetic",
    "LoadedTexts": "sources",
    "load_math_problems": "sources",
    "load_set": "sources",
    "load_texts": "sources",
    "problem_sha256": "sources",
}

__all__ = [
    "arithmetic_problems",
    "LoadedTexts",
    "load_math_problems",
    "load_set",
    "load_texts",
    "problem_sha256",
]

if TYPE_CHECKING:
    from .arithmetic import arithmetic_problems
    from .sources import LoadedTexts, load_math_problems, load_set, load_texts, problem_sha256

__getattr__, __dir__ = lazy_face(__name__, _LAZY)
