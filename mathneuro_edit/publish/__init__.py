"""Publishing: the lock that pins a run, the model card that describes it, and the push to the Hub.

Contract: :mod:`.lock` writes and reads ``mathneuro_recipe.lock.yaml`` (the recipe with every default explicit and
every hash); :mod:`.card` and :mod:`.card_sections` build the README.md card from the lock and eval.json alone;
:mod:`.hub` pushes one output folder in one commit. No local path leaves the machine.
"""


from __future__ import annotations

from .card import build_card, write_card
from .hub import PushResult, push_to_hub
from .lock import build_lock, read_lock, write_lock

__all__ = ["build_card", "write_card", "PushResult", "push_to_hub", "build_lock", "read_lock", "write_lock"]
