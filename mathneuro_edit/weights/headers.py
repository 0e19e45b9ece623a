"""Checks of a safetensors header against its file, before any tensor is read.

A truncated download, a header length field of 2^62 or a tensor whose byte range does not match its dtype and
shape would otherwise surface as a ``MemoryError`` or a ``RuntimeError`` deep inside a reader; here each is one
:class:`~mathneuro_edit.errors.InputError` naming the file and the tensor.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..errors import InputError

__all__ = ["check_header_length", "check_entries", "ITEM_BYTES", "KNOWN_DTYPES", "MAX_HEADER"]

# bytes per element of each safetensors dtype code (sub-byte and unknown codes are not size-checked)
_BY_SIZE = {8: "F64 I64 U64", 4: "F32 I32 U32", 2: "F16 BF16 I16 U16", 1: "I8 U8 BOOL F8_E4M3 F8_E5M2"}
ITEM_BYTES = {code: size for size, codes in _BY_SIZE.items() for code in codes.split()}
MAX_HEADER = 100 * 1024 * 1024  # the reference reader's own limit on the JSON header
# every dtype code the safetensors format defines (sub-byte ones are not size-checked); any other is refused
KNOWN_DTYPES = set(ITEM_BYTES) | {"F8_E8M0", "F4", "F6_E2M3", "F6_E3M2", "C64", "U4", "I4"}


def check_header_length(path: Path, n: int, size: int, fix: str) -> None:
    """Refuse a header length longer than the file (or than the reference reader's 100 MB limit).

    Example:
        >>> check_header_length(Path("m.safetensors"), 2**62, 1000, "re-save it")
        Traceback (most recent call last):
        ...
        mathneuro_edit.errors.InputError: m.safetensors: header length 4611686018427387904 exceeds the file (1000 bytes); the file is truncated or corrupt: re-save it
    """
    if n > min(size - 8, MAX_HEADER):
        raise InputError(
            f"{path}: header length {n} exceeds the file ({size} bytes); the file is truncated or corrupt: {fix}"
        )


def check_entries(path: Path, entries: Iterable[Any], base: int, size: int, fix: str) -> None:
    """Refuse a tensor (``name, dtype, shape, start, end`` as absolute byte offsets) that lies outside the file's
    data, whose byte count is not ``numel x item size``, whose dtype the format does not define, or whose bytes
    overlap another tensor's."""
    previous = None
    for e in sorted(entries, key=lambda e: (e.start, e.end)):
        at, damage = f"tensor {e.name}", "corrupt"
        if not isinstance(e.dtype, str) or e.dtype not in KNOWN_DTYPES:
            why, damage = f"has the unknown dtype {str(e.dtype)[:40]!r}", "corrupt or not a safetensors file"
        elif any(not isinstance(d, int) or isinstance(d, bool) or d < 0 for d in e.shape):
            why = f"has an invalid shape {list(e.shape)[:8]}"
        elif not isinstance(e.start, int) or not isinstance(e.end, int) or e.end < e.start or e.start < base:
            why = "has invalid data offsets"
        elif e.end > size:
            why, damage = f"ends at byte {e.end} but the file has {size}", "truncated"
        elif e.dtype in ITEM_BYTES and e.end - e.start != (need := math.prod(e.shape) * ITEM_BYTES[e.dtype]):
            why = f"stores {e.end - e.start} bytes but {e.dtype} {list(e.shape)} needs {need}"
        elif previous is not None and e.start < previous.end:
            at = f"tensors {previous.name} and {e.name}"
            why = f"overlap (bytes {e.start - base}...{previous.end - base} of the data)"
        else:
            previous = e
            continue
        raise InputError(f"{path}: {at} {why}; the file is {damage}: {fix}")
