"""What the outputs' card snippets and metadata share: the lock's base as they read it, its Hub origin, the fields
a derived card carries from the base's card, the variables a snippet reads a local base from, the chat turn.

Every function reads the lock's public form (no local path can reach a card through here). The model card's own
sections (:mod:`mathneuro_edit.publish.card_sections`) read the same helpers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..util.paths import LOCAL, ORGANISM

__all__ = [
    "BASE_ENV",
    "BASE_GGUF_ENV",
    "CHAT",
    "CARD_FIELDS",
    "card_fields",
    "lock_base",
    "base_kind",
    "hub_origin",
    "where_loaded",
]

BASE_ENV = "BASE_MODEL_DIR"  # the variable the snippets read a local base's folder from (no placeholder path)
BASE_GGUF_ENV = "BASE_MODEL_GGUF"  # the same for a GGUF base: its .gguf file, what `reproduce --base` takes
# an instruct model's card shows a chat turn, the way its evaluation prompted it (evaluation.chat_template: auto)
CHAT = """
messages = [{"role": "user", "content": "What is 27 + 15?"}]
inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=True, return_tensors="pt")
output = model.generate(**inputs, max_new_tokens=32, do_sample=False)
print(tokenizer.decode(output[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True))"""
CARD_FIELDS = ("license", "license_name", "license_link", "language", "datasets")  # carried from the base card


def card_fields(meta: Mapping[str, Any]) -> dict[str, Any]:
    """The :data:`CARD_FIELDS` of a card's metadata, with strings/lists only (a malformed value is dropped).

    Example:
        >>> card_fields({"license": "mit", "language": "en", "tags": ["x"]})
        {'license': 'mit', 'language': ['en']}
    """
    found: dict[str, Any] = {}
    for key in CARD_FIELDS:
        value = meta.get(key)
        if isinstance(value, str) and value:
            found[key] = [value] if key in ("language", "datasets") else value
        elif isinstance(value, list) and value and all(isinstance(v, str) for v in value) and key != "license":
            found[key] = list(value)
    return found


def lock_base(lock: Mapping[str, Any]) -> Mapping[str, Any]:
    """The lock's ``base`` section (``{}`` without one)."""
    return lock.get("base") or {}


def base_kind(lock: Mapping[str, Any]) -> str:
    """``"organism"``, ``"local"`` (a local folder or GGUF file, redacted) or ``"hub"``: what the lock's base is."""
    model = lock_base(lock).get("model")
    return "organism" if model == ORGANISM else "local" if model == LOCAL else "hub"


def hub_origin(lock: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """``(base.hub_id, base.hub_revision)`` of the lock's recipe: the Hub origin a local base names, if any.

    Example:
        >>> hub_origin({"recipe": {"base": {"hub_id": "me/x"}}})
        ('me/x', None)
    """
    b = (lock.get("recipe") or {}).get("base") or {}
    return (str(b["hub_id"]) if b.get("hub_id") else None), (str(b["hub_revision"]) if b.get("hub_revision") else None)


def where_loaded(view_repo: str | None) -> str:
    """What a snippet loads: the repo the card is published in, or ``"."`` (this folder, until ``push`` renders
    the card for its repo)."""
    return f'"{view_repo}"' if view_repo else '"."'
