"""What a derived model's card carries from its base's card: license, license name and link, language, datasets.

Read locally only (a model folder's README.md, or the Hub cache; never downloaded), with huggingface_hub's
``ModelCard`` (:func:`base_card_fields`, for the card and the GGUF metadata). A malformed value is dropped, not
guessed.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from huggingface_hub import ModelCard, try_to_load_from_cache
from huggingface_hub.utils import HFValidationError

from ..outputs.common import card_fields
from ..util.paths import is_local_path
from ..util.reading import read_regular

__all__ = ["base_card_fields"]


def base_card_fields(base: str | Path, revision: str | None = None) -> dict[str, Any]:
    """The metadata a derived model's card carries from its base's card: each key the module docstring names that
    the base card has.

    Example:
        >>> base_card_fields("/nonexistent/folder")
        {}
    """
    readme = _base_card_file(base, revision)
    if readme is None:
        return {}
    text = read_regular(readme, _MAX_CARD_BYTES, "a model card", "use the base's own README.md").decode(
        "utf-8", errors="replace"
    )
    if not _METADATA.match(text):  # no metadata block: nothing to carry, and huggingface_hub's warning about it
        return {}  # ("Repo card metadata block was not found") is not printed as the last line of `run -q`
    return card_fields(ModelCard(text, ignore_metadata_errors=True).data.to_dict())


_MAX_CARD_BYTES = 16 << 20  # model cards are a few KB to a few hundred KB
_METADATA = re.compile(r"\s*---[\r\n]")  # where huggingface_hub's card metadata block starts


def _base_card_file(base: str | Path, revision: str | None) -> Path | None:
    """The base's README.md: in its local folder, or in the Hub cache (never downloaded); ``None`` without one."""
    folder = Path(base).expanduser()
    readme: Any = folder / "README.md" if folder.is_dir() else None
    if readme is None and not is_local_path(str(base)):
        try:
            readme = try_to_load_from_cache(repo_id=str(base), filename="README.md", revision=revision)
        except HFValidationError:
            return None
    return Path(readme) if isinstance(readme, (str, Path)) and Path(readme).is_file() else None
