"""The recipe: the single source of truth of a run (pydantic schema, YAML and ``--set`` overrides).

Contract: :class:`~.schema.Recipe` validates every key with one error that lists every problem; :mod:`.io`
reads YAML (duplicate keys refused) and applies overrides; :mod:`.types` holds the constrained value types;
:mod:`.lm_eval_keys` the ``evaluation.lm_eval`` section. Recipes never load a model or read data.
"""

import lazy_loader

# the face's names: __init__.pyi's imports, each loaded on first access (importing the face loads no torch)
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
