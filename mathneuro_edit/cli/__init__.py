"""The ``mathneuro-edit`` command line: thin commands that parse, call one function of the API, and report.

``python -m mathneuro_edit.cli`` runs it too (and ``torchrun -m mathneuro_edit.cli calibrate ...``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..util.lazy import lazy_face

# public name -> the module that defines it, imported on first access (importing one module of this package
# never imports its siblings: torch loads only where it is used)
_LAZY: dict[str, str] = {
    "main": "main",
}

__all__ = [
    "main",
]

if TYPE_CHECKING:
    from .main import main

__getattr__, __dir__ = lazy_face(__name__, _LAZY)
