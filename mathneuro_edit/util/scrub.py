"""Local paths never leave the machine: find and blank them in JSON files before they are published.

A string value is a local path when it is a Windows drive path, starts with ``~``, lies under the user's home, is
an absolute POSIX path of two or more components (``/srv/models/x``), or is an absolute path that exists here.
Strings with whitespace are left alone (chat templates, prose); so are one-component strings such as a
tokenizer's ``"/s"`` token that name nothing on this machine.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

__all__ = ["is_private_path", "scrub_json", "scrub_json_bytes", "scrub_token"]

_WINDOWS = re.compile(r"^(?:[A-Za-z]:[\\/]|\\\\)")
_POSIX = re.compile(r"^/[^\s/]+(?:/[^\s/]*)+$")  # /a/b..., no whitespace


def is_private_path(value: Any) -> bool:
    """Whether a JSON string value names a local file or folder (see the module docstring).

    Example:
        >>> is_private_path("/home/alice/models/llama"), is_private_path("meta-llama/Llama-3.2-1B")
        (True, False)
    """
    if not isinstance(value, str) or len(value) < 2 or any(c.isspace() for c in value):
        return False
    if value.startswith("~") or _WINDOWS.match(value):
        return True
    home = os.path.expanduser("~").rstrip("/")
    if home and (value == home or value.startswith(home + "/")):
        return True
    return value.startswith("/") and (bool(_POSIX.match(value)) or os.path.exists(value))


def scrub_json(data: Any, where: str = "") -> tuple[Any, list[str]]:
    """``data`` with every local-path string (any key, any depth) replaced by ``""``, and the dotted keys changed."""
    if isinstance(data, dict):
        out: dict[Any, Any] = {}
        found: list[str] = []
        for k, v in data.items():
            out[k], sub = scrub_json(v, f"{where}.{k}" if where else str(k))
            found += sub
        return out, found
    if isinstance(data, list):
        items, found = [], []
        for i, v in enumerate(data):
            new, sub = scrub_json(v, f"{where}[{i}]")
            items.append(new)
            found += sub
        return items, found
    if is_private_path(data):
        return "", [where or "(value)"]
    return data, []


def scrub_json_bytes(path: Path) -> tuple[bytes | None, list[str]]:
    """A JSON file's scrubbed content (``None`` when nothing needs scrubbing or it is not JSON) and the keys changed."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None, []
    new, found = scrub_json(data)
    if not found:
        return None, []
    return (json.dumps(new, indent=2, ensure_ascii=False) + "\n").encode("utf-8"), found


def scrub_token(text: str, token: str | None = None) -> str:
    """``text`` with a Hugging Face token (the one given, ``HF_TOKEN``, or the stored login huggingface_hub would
    send) replaced by ``***``: no message, report or JSON document of ours ever shows a token.

    Example:
        >>> scrub_token("401 for hf_abcdefgh", "hf_abcdefgh")
        '401 for ***'
    """
    tokens = {token, os.environ.get("HF_TOKEN"), os.environ.get("HUGGING_FACE_HUB_TOKEN")}
    try:
        from huggingface_hub import get_token

        tokens.add(get_token())
    except Exception:  # noqa: BLE001 - no stored login readable: nothing more to scrub
        pass
    for t in sorted((t for t in tokens if t and len(t) >= 8), key=len, reverse=True):
        text = text.replace(t, "***")
    return text
