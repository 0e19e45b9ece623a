"""Content hashes: the one home of the sha256 fingerprints of files and of text lists.

Fingerprints are of content, never of places: two machines with the same inputs get the same digests.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

__all__ = ["sha256_file", "texts_sha256"]


_CHUNK = 1 << 20  # 1 MiB reads: streamed hashing of multi-GB shards in constant memory


def sha256_file(path: str | Path) -> str:
    """SHA-256 hex digest of a file, read in 1 MiB chunks.

    Example:
        >>> import tempfile; f = tempfile.NamedTemporaryFile(delete=False); _ = f.write(b"abc"); f.close()
        >>> sha256_file(f.name)[:12]
        'ba7816bf8f01'
    """
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def texts_sha256(texts: Sequence[str]) -> str:
    """sha256 fingerprint of a list of texts, order included.

    Example:
        >>> texts_sha256(["a", "b"]) != texts_sha256(["b", "a"])
        True
    """
    return hashlib.sha256(json.dumps(list(texts), ensure_ascii=False).encode()).hexdigest()
