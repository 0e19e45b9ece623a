"""Publishing: the lock that pins a run, the model card that describes it, and the push to the Hub.

Contract: :mod:`.lock` writes and reads ``mathneuro_recipe.lock.yaml`` (the recipe with every default explicit and
every hash) and :mod:`.lock_policy` decides what a lock may choose (a lock is data); :mod:`.card` and :mod:`.card_sections` build the README.md card from the lock and eval.json alone;
:mod:`.hub` makes one Hub repo per output (checkpoint, adapter, GGUF) equal to it, in one commit; :mod:`.integrity`
checks the files you have (a folder, or a Hub repo's LFS sha256) against the lock, for ``verify`` and
``reproduce``. No local path and no token leaves the machine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..util.lazy import lazy_face

# public name -> the module that defines it, imported on first access (importing one module of this package
# never imports its siblings: torch loads only where it is used)
_LAZY: dict[str, str] = {
    "build_card": "card",
    "write_card": "card",
    "PushResult": "hub",
    "push_to_hub": "hub",
    "build_lock": "lock",
    "read_lock": "lock",
    "write_lock": "lock",
}

__all__ = [
    "build_card",
    "write_card",
    "PushResult",
    "push_to_hub",
    "build_lock",
    "read_lock",
    "write_lock",
]

if TYPE_CHECKING:
    from .card import build_card, write_card
    from .hub import PushResult, push_to_hub
    from .lock import build_lock, read_lock, write_lock

__getattr__, __dir__ = lazy_face(__name__, _LAZY)
