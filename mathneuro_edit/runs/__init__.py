"""Runs: whole jobs that chain the stages (a recipe run, export, sweep, consistency, plan, reproduce, inspect).

Contract: every CLI command calls one function here or in a stage package; these functions compose the stages
and write their run folders atomically, and hold no method of their own.
"""

import lazy_loader

# the face's names are __init__.pyi's imports (its one list, which type checkers read too), each loaded on first
# access from the module that defines it: importing the face imports none of the package's modules, and no torch
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
