"""Publishing: the lock that pins a run, the model card that describes it, and the push to the Hub.

Contract: :mod:`.lock` writes and reads ``mathneuro_recipe.lock.yaml`` (the recipe with every default explicit and
every hash) and :mod:`.lock_policy` decides what a lock may choose (a lock is data); :mod:`.card` and :mod:`.card_sections` build the README.md card from the lock and eval.json alone;
:mod:`.hub` makes one Hub repo per output (checkpoint, adapter, GGUF) equal to it, in one commit; :mod:`.integrity`
checks the files you have (a folder, or a Hub repo's LFS sha256) against the lock, for ``verify`` and
``reproduce``: the outputs, and the rest of a run that :mod:`.run_files` records (mask, statistics, evaluation,
cards, sealed with the lock). No local path and no token leaves the machine.
"""

import lazy_loader

# the face's names are __init__.pyi's imports (its one list, which type checkers read too), each loaded on first
# access from the module that defines it: importing the face imports none of the package's modules, and no torch
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
