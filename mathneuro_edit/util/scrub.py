"""Local paths never leave the machine: find and blank them in JSON files before they are published.

Redaction goes by meaning, not by shape: only a field that can hold a local path is looked at, named by its key
(:func:`names_a_path`: ``_name_or_path``, ``tokenizer_file``, ``cache_dir``, ``source``, ``path``, ...). Tokenizer
content is never touched: the files that hold only tokens (``tokenizer.json``, ``vocab.json``,
``special_tokens_map.json``, ``added_tokens.json``, ``chat_template.json``: :data:`TOKENIZER_FILES`) are not read,
and no key that holds tokens or templates names a path (``vocab``, ``merges``, ``added_tokens_decoder``,
``content``, ``eos_token``, ``chat_template``). Why: BPE merges and tokens such as ``//`` or ``~~`` look like paths
(``//`` even exists here), a blanked one makes the tokenizer refuse to load ("Token `` out of vocabulary"), and
no tokenizer stores a path in them.

A value under a path key is a local path when it is a Windows drive path (``C:\\Users\\...``) or a UNC path
(``\\\\server\\share``, ``//server/share``), starts with ``~`` (``~/x``, ``~alice/x``), is a ``file:`` URL, lies under the
user's home, is an absolute POSIX path of two or more components (``/srv/models/x``), or is an absolute path that exists here
(:func:`is_private_path`). Spaces inside a component do not make it prose (``/home/u/My Models/llama``,
``/Users/u/Library/Application Support/x``): a value is prose only when it does not start like a path (leading and
trailing blanks aside), or holds a line break or tab.
"""

from __future__ import annotations

import json
import os
import re
from contextlib import suppress
from pathlib import Path
from typing import Any

__all__ = [
    "TOKENIZER_FILES",
    "is_private_path",
    "names_a_path",
    "redact_url_credentials",
    "scrub_json",
    "scrub_json_bytes",
    "scrub_token",
]

# ``C:\\...`` / ``C:/...``, ``\\\\server\\share`` (UNC), ``\\\\?\\C:\\...``, ``//server/share`` (UNC with slashes)
_WINDOWS = re.compile(r"^(?:[A-Za-z]:[\\/]|\\\\[^\\\s]+\\|//[^/\s]+/)")
# ``~``, ``~/...``, ``~alice/...``, ``~\\...``
_TILDE = re.compile(r"^~[^/\\\s]*(?:[/\\]|$)")
# /a/b...: two or more components, spaces allowed inside one (``/home/u/My Models/x``), none empty or blank first
_POSIX = re.compile(r"^/[^/\s][^/]*(?:/[^/]*)+$")
_BREAKS = re.compile(r"[\n\r\t\v\f]")


def is_private_path(value: Any) -> bool:
    """Whether a JSON string value names a local file or folder (see the module docstring).

    Example:
        >>> is_private_path("/home/alice/models/llama"), is_private_path("meta-llama/Llama-3.2-1B")
        (True, False)
        >>> is_private_path("/home/alice/My Models/llama"), is_private_path("C:\\\\Users\\\\alice"), is_private_path("~/x")
        (True, True, True)
    """
    if not isinstance(value, str):
        return False
    value = value.strip()  # `` /home/u/x`` is as private as ``/home/u/x``
    if value == "~":  # the home folder itself
        return True
    if len(value) < 2 or _BREAKS.search(value):
        return False
    if _TILDE.match(value) or _WINDOWS.match(value) or value[:5].lower() == "file:":
        return True
    home = os.path.expanduser("~").rstrip("/\\")
    if home and (value == home or value.startswith((home + "/", home + "\\"))):
        return True
    if not value.startswith("/"):
        return False
    try:
        return bool(_POSIX.match(value)) or os.path.exists(value)
    except (OSError, ValueError):  # a NUL byte, a name too long: not a path of this machine
        return bool(_POSIX.match(value))


# files that hold tokenizer content only (vocabulary, merges, added tokens, templates): uploaded as they are
TOKENIZER_FILES = frozenset(
    {"tokenizer.json", "vocab.json", "special_tokens_map.json", "added_tokens.json", "chat_template.json"}
)
# the last word of a key that names a file or folder (``tokenizer_file``, ``cache_dir``, ``_name_or_path``), or a
# model that may be a local folder (``base_model``)
_PATH_WORDS = frozenset(
    "path paths dir dirs directory folder file files filename source sources root location checkpoint pretrained "
    "model".split()
)
_WORD = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")


def names_a_path(key: object) -> bool:
    """Whether a JSON key names a field that can hold a local path: its last word is one of :data:`_PATH_WORDS`
    (``_name_or_path``, ``tokenizer_file``, ``cacheDir``). No key of tokenizer content does (``merges``, ``vocab``,
    ``added_tokens_decoder``, ``content``, ``eos_token``, ``chat_template``).

    Example:
        >>> names_a_path("_name_or_path"), names_a_path("vocab_file"), names_a_path("merges"), names_a_path("eos_token")
        (True, True, False, False)
    """
    if not isinstance(key, str):
        return False
    words = _WORD.findall(key)
    return bool(words) and words[-1].lower() in _PATH_WORDS


def scrub_json(data: Any, where: str = "", *, path_field: bool = False) -> tuple[Any, list[str]]:
    """``data`` with every local path in a field that can hold one (:func:`names_a_path`, at any depth) replaced
    by ``""``, and the dotted keys changed. Nothing else is looked at: tokens, merges and templates never.

    ``path_field``: ``data`` is the value of a path key (a list's strings are judged by the list's key; a dict's
    values by their own keys).

    Example:
        >>> scrub_json({"_name_or_path": "/srv/models/x", "merges": [["/", "/"], ["~", "~~"]], "sep": "//"})
        ({'_name_or_path': '', 'merges': [['/', '/'], ['~', '~~']], 'sep': '//'}, ['_name_or_path'])
    """
    if isinstance(data, dict):
        done = {
            k: scrub_json(v, f"{where}.{k}" if where else str(k), path_field=names_a_path(k)) for k, v in data.items()
        }
        return {k: new for k, (new, _) in done.items()}, [key for _, found in done.values() for key in found]
    if isinstance(data, list):
        items = [scrub_json(v, f"{where}[{i}]", path_field=path_field) for i, v in enumerate(data)]
        return [new for new, _ in items], [key for _, found in items for key in found]
    if path_field and is_private_path(data):
        return "", [where or "(value)"]
    return data, []


def scrub_json_bytes(path: Path) -> tuple[bytes | None, list[str]]:
    """A JSON file's scrubbed content (``None`` when nothing needs scrubbing, it is not JSON, or it is a tokenizer
    file of :data:`TOKENIZER_FILES`, uploaded byte for byte) and the keys changed."""
    if path.name in TOKENIZER_FILES:
        return None, []
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None, []
    new, found = scrub_json(data)
    if not found:
        return None, []
    return (json.dumps(new, indent=2, ensure_ascii=False) + "\n").encode("utf-8"), found


# ``scheme://user:password@host``: everything between ``://`` and the last ``@`` before the host's end
_URL_USERINFO = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]*://)[^\s/?#]*@")
# a query parameter whose name says it is a secret: ``?token=...``, ``&api_key=...``, ``X-Amz-Signature=...``
_URL_SECRET = re.compile(
    r"([?&;][^=&#\s]*(?:token|key|secret|sig|signature|password|passwd|pwd|auth|credential)[^=&#\s]*=)[^&#\s]*",
    re.IGNORECASE,
)


def redact_url_credentials(text: str) -> str:
    """``text`` with the credentials of every URL in it replaced by ``***``: the ``user:password@`` before a
    host, and the value of a query parameter named like a secret (``token``, ``key``, ``sig``, ``password``, ...).

    Why: ``HF_ENDPOINT`` (or a proxy) may carry credentials in its URL (``https://alice:s3cret@hub.example``), and
    the endpoint is printed in push, reproduce and download errors, which users paste into issues. Every such
    message goes through here (and through :func:`scrub_token`, which calls it).

    Example:
        >>> redact_url_credentials("cannot reach the Hub at https://alice:s3cret@hub.example:8080/api?token=abc&x=1")
        'cannot reach the Hub at https://***@hub.example:8080/api?token=***&x=1'
        >>> redact_url_credentials("https://huggingface.co/me/model (mail me@example.com)")
        'https://huggingface.co/me/model (mail me@example.com)'
    """
    return _URL_SECRET.sub(r"\1***", _URL_USERINFO.sub(r"\1***@", text))


def scrub_token(text: str, token: str | None = None) -> str:
    """``text`` with a Hugging Face token (the one given, ``HF_TOKEN``, or the stored login huggingface_hub would
    send) replaced by ``***``, and the credentials of any URL in it (:func:`redact_url_credentials`): no message,
    report or JSON document of ours ever shows a token.

    Example:
        >>> scrub_token("401 for hf_abcdefgh", "hf_abcdefgh")
        '401 for ***'
    """
    tokens = {token, os.environ.get("HF_TOKEN"), os.environ.get("HUGGING_FACE_HUB_TOKEN")}
    with suppress(Exception):  # no stored login readable: nothing more to scrub
        from huggingface_hub import get_token

        tokens.add(get_token())
    for t in sorted((t for t in tokens if t and len(t) >= 8), key=len, reverse=True):
        text = text.replace(t, "***")
    return redact_url_credentials(text)
