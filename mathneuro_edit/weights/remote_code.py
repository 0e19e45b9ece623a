"""Repository code never runs without an explicit opt-in (``base.trust_remote_code: true``).

transformers runs a repository's own Python (``auto_map``) when ``trust_remote_code=True`` and asks on the terminal
when it is unset; mathneuro-edit passes the recipe's value (default ``False``) and checks a local folder first, so
the user gets one line instead of a prompt (docs/recipes.md, ``base``).
"""

from __future__ import annotations

from pathlib import Path

from ..errors import InputError
from ..util.config_sizes import model_json_object

__all__ = ["check_remote_code", "REMOTE_CODE_FIX", "remote_code_error"]

REMOTE_CODE_FIX = (
    "pass `base.trust_remote_code: true` (recipe, or --set base.trust_remote_code=true) only if you trust that code"
)
_FILES = ("config.json", "tokenizer_config.json")


def _auto_map(folder: Path) -> str | None:
    """The file (and sub-config, 8 levels at most) whose first non-empty ``auto_map`` asks for the repository's
    code: a sub-config's too (``text_config.auto_map`` was an internal error instead of this refusal)."""
    for name in _FILES:
        data = model_json_object(folder / name)  # a FIFO or /dev/zero here: one line, never a hang
        stack: list[tuple[str, dict, int]] = [("", data, 0)] if data is not None else []
        while stack:
            prefix, node, depth = stack.pop(0)
            if node.get("auto_map"):
                return f"{name}'s {prefix.removesuffix('.')}" if prefix else name
            stack += [(f"{prefix}{k}.", v, depth + 1) for k, v in node.items() if isinstance(v, dict) and depth < 8]
    return None


def check_remote_code(model: str | Path, trust_remote_code: bool) -> None:
    """Refuse a local model folder whose config asks for its own code (``auto_map`` in ``config.json`` /
    ``tokenizer_config.json``), unless ``trust_remote_code``; a Hub id is transformers' to refuse
    (:func:`remote_code_error`).

    Example:
        >>> check_remote_code("/nonexistent", False)
    """
    if trust_remote_code:
        return
    folder = Path(model).expanduser()
    found = _auto_map(folder) if folder.is_dir() else None
    if found:
        raise InputError(
            f"base: {folder} needs its own Python code ({found} has auto_map), which is never run "
            f"without asking; {REMOTE_CODE_FIX}"
        )


def remote_code_error(model: str | Path, exc: BaseException) -> InputError | None:
    """transformers' refusal of a Hub repo that needs remote code, as one line with the fix (else None)."""
    text = str(exc)
    if "trust_remote_code" in text or "custom code" in text:
        return InputError(
            f"base: {model} needs its own Python code, which is never run without asking; {REMOTE_CODE_FIX}"
        )
    return None
