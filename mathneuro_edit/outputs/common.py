"""What the outputs' card snippets and metadata share: the lock's base as they read it, its Hub origin, the fields
a derived card carries from the base's card, the variables a snippet reads a local base from, the chat turn.

Every function reads the lock's public form (no local path can reach a card through here).
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
    "usage_prompt",
    "load_kwargs",
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
    return f'"{view_repo or "."}"'


# worked examples for a snippet's few-shot arithmetic prompt (the evaluation draws its own from the same generator)
_SHOTS = (("12 + 34", 46), ("75 - 28", 47), ("6 * 7", 42), ("53 + 19", 72), ("81 - 45", 36), ("4 * 8", 32))


def load_kwargs(dtype: str | None) -> tuple[str, str]:
    """``(import line, from_pretrained arguments)`` that load in ``dtype`` (``("", "")``: a default load).

    Example:
        >>> load_kwargs("float32")
        ('import torch\\n', ', dtype=torch.float32')
    """
    if dtype not in ("float32", "bfloat16", "float16"):
        return "", ""
    return "import torch\n", f", dtype=torch.{dtype}"


def usage_prompt(prompt: Mapping[str, Any] | None, chat: bool) -> str:
    """The snippet's lines after the model and tokenizer are loaded: one problem prompted as the card's math figures
    were measured (``prompt``: :attr:`~.registry.CardView.prompt`; ``chat``: the tokenizer has a chat template),
    generated greedily and decoded. An arithmetic evaluation's answer is started with the problem (``27 + 15 = ``)
    and read as its first number; without a prompt record, a chat model gets a plain chat turn (:data:`CHAT`).

    Example:
        >>> print(usage_prompt({"n_shot": 1, "chat_template": False, "prompt_style": "equations",
        ...                     "max_new_tokens": 8, "prefill": True}, chat=False).splitlines()[2])
        text = "12 + 34 = 46\\n27 + 15 = "
    """
    if not isinstance(prompt, Mapping) or not prompt.get("prefill"):
        return CHAT if chat else ""
    n = prompt.get("n_shot") if isinstance(prompt.get("n_shot"), int) else 0
    shots = [_SHOTS[i % len(_SHOTS)] for i in range(max(0, min(n, 32)))]
    tokens = prompt.get("max_new_tokens") if isinstance(prompt.get("max_new_tokens"), int) else 8
    setting = prompt.get("chat_template", "auto")
    use_chat = setting is True or (setting == "auto" and chat)
    if use_chat:
        turns = "".join(
            f'    {{"role": "user", "content": "What is {q}?"}},\n    {{"role": "assistant", "content": "{q} = {a}"}},\n'
            for q, a in shots
        )
        build = (
            f'messages = [\n{turns}    {{"role": "user", "content": "What is 27 + 15?"}},\n]\n'
            'text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) + "27 + 15 = "\n'
            'inputs = tokenizer(text, add_special_tokens=False, return_tensors="pt")  # the template wrote them'
        )
    else:
        if prompt.get("prompt_style") == "equations":
            text = "".join(f"{q} = {a}\\n" for q, a in shots) + "27 + 15 = "
        else:
            text = "".join(f"Question: What is {q}?\\nAnswer: {q} = {a}\\n\\n" for q, a in shots)
            text += "Question: What is 27 + 15?\\nAnswer: 27 + 15 = "
        build = f'text = "{text}"\ninputs = tokenizer(text, return_tensors="pt")'
    how = f"{'chat template' if use_chat else 'plain text'}, {len(shots)}-shot"
    how += ": worked examples like those the evaluation drew from its generator" if shots else ""
    return f"""
# the prompt the math figures above were measured under ({how}; the answer started); greedy, the first number is the answer
{build}
output = model.generate(**inputs, max_new_tokens={tokens}, do_sample=False)
print(tokenizer.decode(output[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True))"""
