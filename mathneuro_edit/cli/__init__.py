"""The ``mathneuro-edit`` command line: thin commands that parse, call one function of the API, and report.

``python -m mathneuro_edit.cli`` runs it too (and ``torchrun -m mathneuro_edit.cli calibrate ...``).
"""

import lazy_loader

# the face's names: __init__.pyi's imports, each loaded on first access (importing the face loads no torch)
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
