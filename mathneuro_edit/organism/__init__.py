"""The model organism: a tiny causal LM shipped with the package, with two separable skills (math, general text).

It was trained from scratch by ``scripts/train_organism.py`` on the synthetic data of
:mod:`mathneuro_edit.organism.data`, so MathNeuro can be demonstrated and tested offline: pruning its
math-specific weights should collapse math accuracy while general-text loss holds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..util.lazy import lazy_face

# public name -> the module that defines it, imported on first access (importing one module of this package
# never imports its siblings: torch loads only where it is used)
_LAZY: dict[str, str] = {
    "organism_path": "shipped",
    "load_organism": "shipped",
    "SPLITS": "data",
    "format_math": "data",
    "general_text_entropy": "data",
    "general_texts": "data",
    "math_problems": "data",
    "math_texts": "data",
    "mixed_texts": "data",
    "parse_answer": "data",
}

__all__ = [
    "organism_path",
    "load_organism",
    "SPLITS",
    "format_math",
    "general_text_entropy",
    "general_texts",
    "math_problems",
    "math_texts",
    "mixed_texts",
    "parse_answer",
]

if TYPE_CHECKING:
    from .data import (
        SPLITS,
        format_math,
        general_text_entropy,
        general_texts,
        math_problems,
        math_texts,
        mixed_texts,
        parse_answer,
    )
    from .shipped import load_organism, organism_path

__getattr__, __dir__ = lazy_face(__name__, _LAZY)
