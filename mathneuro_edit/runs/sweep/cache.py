"""The sweep's result store: every evaluated block kept in the sweep folder, keyed by its content.

A sweep is hours of forward passes; it must survive Ctrl-C, SIGTERM and a machine that goes away, and continue
where it stopped when the same command runs again. Each unit of work (the base or one edit, on one block of
problems or on the general texts) is a pure function of its inputs: the model's weights, the statistics, the mask
settings, the scale, the prompt settings and the problems. Its result is stored as ``cache/<sha256 of key>.json``
holding the key itself, the result and the result's sha256, written atomically (a temporary file renamed over),
so a kill leaves either the whole entry or none.

A run looks an entry up by its key; an entry whose name, key or result hash do not match is refused
(:class:`~mathneuro_edit.errors.InputError`: one line naming the file), never trusted: a folder someone edited or a
disk that corrupted a file must not decide which edit is published.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...errors import InputError
from ...util.files import TEMP_SUFFIX, write_bytes_atomic

__all__ = ["ResultCache", "key_sha256"]

CACHE_DIR = "cache"
# entries are small (a block's correct flags and completions); a larger file is not one of ours
_MAX_ENTRY_BYTES = 16 * 1024**2


def _canonical(x: Any, allow_nan: bool = False) -> str:
    # results may hold a non-finite loss (a pruned model can give a token probability 0): JSON's NaN/Infinity
    # extension, which Python reads back; keys are strict JSON
    return json.dumps(x, sort_keys=True, ensure_ascii=True, separators=(",", ":"), allow_nan=allow_nan)


def key_sha256(key: Mapping[str, Any]) -> str:
    """The entry name of a key: sha256 of its canonical JSON.

    Example:
        >>> key_sha256({"b": 1, "a": [2]}) == key_sha256({"a": [2], "b": 1})
        True
    """
    return hashlib.sha256(_canonical(key).encode()).hexdigest()


class ResultCache:
    """Content-keyed JSON results under ``folder/cache``.

    Example:
        >>> import tempfile; c = ResultCache(tempfile.mkdtemp())
        >>> c.put({"what": "base"}, {"correct": [True]}); c.get({"what": "base"})
        {'correct': [True]}
    """

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder) / CACHE_DIR
        self.hits = 0
        self.misses = 0

    def _path(self, key: Mapping[str, Any]) -> Path:
        return self.folder / f"{key_sha256(key)}.json"

    def get(self, key: Mapping[str, Any]) -> Any | None:
        """The stored result of ``key``, or ``None`` when there is none; an entry that does not match its key
        (edited, truncated or from another file) is refused."""
        path = self._path(key)
        if not path.is_file():
            self.misses += 1
            return None
        fix = f"delete it (or the whole {self.folder}) and run the same command again"
        try:
            if path.stat().st_size > _MAX_ENTRY_BYTES:
                raise ValueError("too large")
            entry = json.loads(path.read_text(encoding="utf-8"))
            ok = (
                isinstance(entry, dict)
                and _canonical(entry.get("key")) == _canonical(key)
                and entry.get("result_sha256")
                == hashlib.sha256(_canonical(entry.get("result"), True).encode()).hexdigest()
            )
        except (OSError, ValueError, TypeError, RecursionError):
            ok = False
        if not ok:
            raise InputError(f"sweep cache: {path} does not match its key (edited, truncated or corrupted); {fix}")
        self.hits += 1
        return entry["result"]

    def put(self, key: Mapping[str, Any], result: Any) -> None:
        """Store ``result`` under ``key`` atomically (a kill leaves the whole entry or none)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self._path(key)
        result_sha256 = hashlib.sha256(_canonical(result, True).encode()).hexdigest()
        body = {"key": key, "result": result, "result_sha256": result_sha256}
        # an exclusive temporary file, synced before the rename: a power cut leaves no empty entry, and a link
        # planted in the cache folder is never written through
        write_bytes_atomic(path, (_canonical(body, True) + "\n").encode("utf-8"))

    def clean_temporary(self) -> None:
        """Remove the temporary files of a run that was killed while writing an entry (``.<entry>-<random>.tmp``,
        :func:`~mathneuro_edit.util.files.atomic_writer`'s names; a link is removed, never followed)."""
        if self.folder.is_dir():
            for p in self.folder.glob(f".*{TEMP_SUFFIX}"):
                p.unlink(missing_ok=True)
