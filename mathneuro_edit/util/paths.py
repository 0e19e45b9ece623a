"""Local-path rules: which strings name a local path, the placeholder that replaces one in public outputs.

A model or data string is a local path, a Hub id, or a special value (``organism``, ``arithmetic``,
``organism:math``, ``hf://datasets/...``). Everything that may be published (lock, card, recipe hash) writes
:data:`LOCAL` instead of a local path, so outputs never depend on where the inputs live.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import InputError

__all__ = ["ORGANISM", "ARITHMETIC", "LOCAL", "is_local_path", "no_such_local_folder"]


ORGANISM = "organism"
ARITHMETIC = "arithmetic"  # the built-in arithmetic task (mathneuro_edit.data.arithmetic)
LOCAL = "<local>"  # stands for a redacted local path in public outputs (lock, card, recipe hash)


def is_local_path(value: str) -> bool:
    """Whether a model/data string names a local path rather than a Hub id or a special value.

    The rule is transformers' own (an existing path wins over a Hub id), plus strings that are plainly paths: one
    that starts with ``.``, ``/``, ``~`` or ``\\``, or whose first folder exists here (``models/llama`` when
    ``models/`` exists). Such a string is never looked up on the Hub, so a typo says "no such local folder".

    Example:
        >>> is_local_path("/models/llama"), is_local_path("meta-llama/Llama-3.2-1B"), is_local_path("organism")
        (True, False, False)
    """
    if value in (ORGANISM, ARITHMETIC) or value.startswith(("organism:", "hf://")) or value.startswith(LOCAL):
        return False
    if value.startswith(("/", "~", ".", "\\")):
        return True
    path = Path(value).expanduser()
    return path.exists() or (len(path.parts) > 1 and Path(path.parts[0]).is_dir())


def no_such_local_folder(value: str, label: str = "base.model") -> InputError:
    """The error for a local-looking model path that does not exist (never a Hub lookup of it).

    Example:
        >>> str(no_such_local_folder("./models/llama"))
        "base.model: no such local folder './models/llama'; check the path (a Hub id looks like owner/name)"
    """
    first = Path(value).expanduser().parts[0] if value else ""
    why = "" if value.startswith(("/", "~", ".", "\\")) else f" (read as a path because {first}/ exists here)"
    what = "file" if value.lower().endswith(".gguf") else "folder"
    return InputError(f"{label}: no such local {what} {value!r}{why}; check the path (a Hub id looks like owner/name)")
