"""The sweep: choose an edit's setting on one set of problems, confirm it on another, release it (issue 21).

One public face for the family of modules that share the sweep's private names (they stay inside this package);
what each module holds: docs/architecture.md.
"""

import lazy_loader

# __init__.pyi's imports (one list, type checkers read it too), each loaded on first access: no torch at import
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
