"""Runs: whole jobs that chain the stages (a recipe run, export, sweep, consistency, plan, reproduce, inspect).

Contract: every CLI command calls one function here or in a stage package; these functions compose the stages
and write their run folders atomically, and hold no method of their own.
"""

import lazy_loader

# __init__.pyi's imports (one list, type checkers read it too), each loaded on first access: no torch at import
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
