"""Publishing: the lock that pins a run, the model card that describes it, and the push to the Hub (each module's
part: docs/architecture.md). No local path and no token leaves the machine.
"""

import lazy_loader

# the face's names are __init__.pyi's imports (its one list, which type checkers read too), each loaded on first
# access from the module that defines it: importing the face imports none of the package's modules, and no torch
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
