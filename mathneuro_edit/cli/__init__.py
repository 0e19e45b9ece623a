"""The ``mathneuro-edit`` command line: thin commands that parse, call one function of the API, and report.

``python -m mathneuro_edit.cli`` runs it too (and ``torchrun -m mathneuro_edit.cli calibrate ...``).
"""

from __future__ import annotations

from .main import main

__all__ = ["main"]
