"""What the outputs' card snippets and metadata share: the lock's base as they read it, its Hub origin, the fields
a derived card carries from the base's card, the variables a snippet reads a local base from, what a snippet prompts.

Every function reads the lock's public form (no local path can reach a card through here).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..util.config_sizes import model_json_object
from ..util.paths import LOCAL, ORGANISM

__all__ = [
    "BASE_ENV",
    "BASE_GGUF_ENV",
    "FLOAT_DTYPE_NAMES",
    "CARD_FIELDS",
    "card_fields",
    "folder_dtype",
    "lock_base",
    "base_kind",
    "hub_origin",
    "snippet_facts",
    "snippet_prompt",
    "label",
]

BASE_ENV = "BASE_MODEL_DIR"  # the variable the snippets read a local base's folder from (no placeholder path)
BASE_GGUF_ENV = "BASE_MODEL_GGUF"  # the same for a GGUF base: its .gguf file, what `reproduce --base` takes
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


def folder_dtype(folder: str | Path) -> str | None:
    """The dtype a model folder's ``config.json`` names (``dtype``, else ``torch_dtype``), or ``None``."""
    path = Path(folder) / "config.json"
    cfg = (model_json_object(path) if path.is_file() else None) or {}
    value = cfg.get("dtype") or cfg.get("torch_dtype")
    return value if isinstance(value, str) else None


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


# worked examples for a snippet's few-shot arithmetic prompt (the evaluation draws its own from the same generator)
_SHOTS = (("12 + 34", 46), ("75 - 28", 47), ("6 * 7", 42), ("53 + 19", 72), ("81 - 45", 36), ("4 * 8", 32))
# the dtypes a card's figures are computed and loaded in, by name (util.tensor_files.FLOAT_DTYPES maps the same
# names to torch dtypes; the cards render without torch)
FLOAT_DTYPE_NAMES = ("float32", "bfloat16", "float16")


def snippet_facts(view: Any) -> dict[str, Any]:
    """What every "How to use" snippet shares (``card_template.md``'s ``prompt_lines``): the repo it loads (``"."``,
    this folder, until ``push`` renders the card for its repo), the dtype to load in when a default load would
    compute in another (:attr:`~.registry.CardView.load_dtype`), and the prompt of :func:`snippet_prompt`."""
    dtype = view.load_dtype if view.load_dtype in FLOAT_DTYPE_NAMES else None
    return {"repo": view.repo or ".", "dtype": dtype, "prompt": snippet_prompt(view.prompt, view.chat)}


def snippet_prompt(prompt: Mapping[str, Any] | None, chat: bool) -> dict[str, Any] | None:
    """How a snippet prompts one problem: as the card's math figures were measured (``prompt``:
    :attr:`~.registry.CardView.prompt`; ``chat``: the tokenizer has a chat template), the answer started with the
    problem (``27 + 15 = ``) and read as its first number; without a prompt record, a plain chat turn for a chat
    model (``{"turn": True}``), nothing for another (``None``).

    Example:
        >>> snippet_prompt({"n_shot": 1, "chat_template": False, "prompt_style": "equations", "prefill": True}, False)
        {'chat': False, 'shots': [('12 + 34', 46)], 'equations': True, 'tokens': 8}
    """
    if not isinstance(prompt, Mapping) or not prompt.get("prefill"):
        return {"turn": True} if chat else None
    n = prompt.get("n_shot") if isinstance(prompt.get("n_shot"), int) else 0
    setting = prompt.get("chat_template", "auto")
    return {
        "chat": setting is True or (setting == "auto" and chat),
        "shots": [_SHOTS[i % len(_SHOTS)] for i in range(max(0, min(n, 32)))],
        "equations": prompt.get("prompt_style") == "equations",
        "tokens": prompt.get("max_new_tokens") if isinstance(prompt.get("max_new_tokens"), int) else 8,
    }


def label(x: Any) -> str:
    """A name from a file a card reads but may not have written (a shared sweep file, a folder's gguf_eval.json and
    gguf_survival.json) as card text: letters, digits, spaces and ``_.,+'-():/`` only, so no Markdown or HTML can
    form, at most 80 characters.

    Example:
        >>> label("llama-cpp-python 0.3.36"), label("x\\n## Injected <img src=x onerror=alert(1)>")
        ('llama-cpp-python 0.3.36', 'x Injected img srcx onerroralert(1)')
    """
    return re.sub(r"[^A-Za-z0-9 _.,+'():/-]", "", str(x))[:80] or "?"
