"""A GGUF file's header checked against the file's size before gguf's reader allocates anything from it.

gguf's ``GGUFReader`` trusts the header (what a hostile or damaged one did to it: docs/reliability.md), and a GGUF
may be someone else's, so :func:`check_gguf_header` walks the header first, without recursion, every count bounded
by the bytes left (each item takes at least one byte: the walk is linear in the file's size) and every tensor's
data inside the file; only then does a reader open it. The safetensors counterpart: :mod:`.headers`.
"""

from __future__ import annotations

import math
import mmap
import os
import struct
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..util.reading import open_regular

__all__ = ["check_gguf_header", "MAX_ARRAY_DEPTH"]

MAX_ARRAY_DEPTH = 8  # llama.cpp's files nest arrays one level (token lists); deeper is a hostile file
_MAX_DIMS = 4  # GGML_MAX_DIMS
_MAGIC = b"GGUF"
# value type -> fixed size in bytes (8: string and 9: array have a length)
_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY, _UINT32 = 8, 9, 4


class _Bad(Exception):
    """The header is not a GGUF's: why (turned into one InputError line by :func:`check_gguf_header`)."""


class _Header:
    """The header's bytes with a read position; every read is bounded by what the file holds."""

    def __init__(self, data: Any, order: str) -> None:  # bytes or a read-only mmap
        self.data, self.pos, self.order = data, 0, order

    def take(self, n: int, what: str) -> bytes:
        self.skip(n, what)
        return bytes(self.data[self.pos - n : self.pos])

    def skip(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > len(self.data):
            raise _Bad(f"it ends inside its {what} (a truncated or damaged file)")
        self.pos += n

    def u32(self, what: str) -> int:
        return int(struct.unpack(self.order + "I", self.take(4, what))[0])

    def u64(self, what: str) -> int:
        return int(struct.unpack(self.order + "Q", self.take(8, what))[0])

    def strings(self, n: int, what: str) -> None:
        """Skip ``n`` length-prefixed strings (a vocabulary: 262,144 of them in Gemma 3, so without a copy each)."""
        data, pos, end, fmt = self.data, self.pos, len(self.data), self.order + "Q"
        for _ in range(n):
            if pos + 8 > end or (pos := pos + 8 + struct.unpack_from(fmt, data, pos)[0]) > end:
                raise _Bad(f"it ends inside its {what} (a truncated or damaged file)")
        self.pos = pos

    def count(self, what: str, each: int) -> int:
        """A count read from the file that its remaining bytes can hold (``each``: the least bytes per item)."""
        n = self.u64(what)
        if n * each > len(self.data) - self.pos:
            raise _Bad(f"its {what} is {n:,}, more than its {len(self.data):,} bytes can hold (a damaged file)")
        return n

    def string(self, what: str) -> str:
        raw = self.take(self.count(f"{what} length", 1), what)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise _Bad(f"its {what} is not UTF-8 text") from None


def _skip_value(h: _Header, kind: int, key: str) -> int | None:
    """Skip one value of type ``kind`` (arrays of arrays with an explicit stack, never recursion); the value when
    it is a UINT32 (``general.alignment`` is one)."""
    stack = [(kind, 1)]  # (type of the items, how many are left) per open array
    value = None
    while stack:
        kind, left = stack.pop()
        if left == 0:
            continue
        if kind in _SIZES:
            if len(stack) == 0 and left == 1 and kind == _UINT32:
                value = h.u32(f"value of {key}")
            else:
                h.skip(_SIZES[kind] * left, f"value of {key}")
        elif kind == _STRING:
            h.strings(left, f"value of {key}")  # values need not be UTF-8 (gguf decodes them only when asked)
        elif kind == _ARRAY:
            stack.append((_ARRAY, left - 1))
            if len(stack) > MAX_ARRAY_DEPTH:
                raise _Bad(f"{key} nests arrays more than {MAX_ARRAY_DEPTH} deep")
            inner = h.u32(f"array type of {key}")
            least = _SIZES.get(inner, 8 if inner == _STRING else 12)  # a string: its length; an array: its header
            stack.append((inner, h.count(f"array length of {key}", least)))
        else:
            raise _Bad(f"{key} has value type {kind}, not a GGUF type")
    return value


def _tensor_infos(h: _Header, n_tensors: int, sizes: dict[int, tuple[int, int]]) -> list[tuple[str, int, int]]:
    """Each tensor's ``(name, offset, bytes)``, its shape and type checked."""
    infos, names = [], set()
    for _ in range(n_tensors):
        name = h.string("tensor name")
        if name in names:
            raise _Bad(f"it lists the tensor {name!r} twice")
        names.add(name)
        n_dims = h.u32(f"dimension count of {name!r}")
        if not 1 <= n_dims <= _MAX_DIMS:
            raise _Bad(f"{name!r} has {n_dims} dimensions (a GGUF tensor has 1 to {_MAX_DIMS})")
        dims = [h.u64(f"shape of {name!r}") for _ in range(n_dims)]
        kind = h.u32(f"type of {name!r}")
        if kind not in sizes:
            raise _Bad(f"{name!r} has tensor type {kind}, not one gguf knows")
        block, size = sizes[kind]
        if any(d < 1 for d in dims) or dims[0] % block:
            raise _Bad(f"{name!r} has the shape {dims}, which its type's blocks of {block} cannot hold")
        if (n := math.prod(dims)) > 1 << 62:  # at most 4 dimensions: an exact product, never a huge loop
            raise _Bad(f"{name!r} has the shape {dims}, larger than any file")
        infos.append((name, h.u64(f"offset of {name!r}"), n // block * size))
    return infos


def check_gguf_header(path: str | Path) -> None:
    """Refuse, in one line, a file that is not a GGUF whose header gguf's reader can trust: not a regular file
    (a FIFO is never opened for reading: it would block; a link to ``/dev/zero`` is a device), not ``GGUF``
    version 2 or 3, counts or lengths larger than the file, arrays nested deeper than :data:`MAX_ARRAY_DEPTH`,
    duplicate keys or tensors, a tensor shape or type llama.cpp has not, or tensor data beyond the end.
    """
    path = Path(path)
    try:
        from gguf import GGML_QUANT_SIZES

        sizes = {int(k): v for k, v in GGML_QUANT_SIZES.items()}
    except ImportError:  # the caller names the missing extra; the shape checks need its table
        sizes = {}
    try:
        fd, st = open_regular(path, "a GGUF is a file")  # a FIFO opens at once, then is refused
    except OSError as e:
        raise InputError(f"{path}: cannot open it ({e.strerror}); pass a GGUF file") from None
    try:
        head = os.pread(fd, 24, 0)
        if len(head) < 24 or head[:4] != _MAGIC:
            raise InputError(f"{path}: not a GGUF file (no GGUF header); pass a .gguf file written by llama.cpp")
        order = "<" if struct.unpack("<I", head[4:8])[0] & 0xFFFF else ">"
        # mapped, not read: only the header's pages are touched (a model's GGUF is gigabytes)
        with mmap.mmap(fd, 0, access=mmap.ACCESS_READ) as data:
            _check(path, data, order, st.st_size, sizes)
    finally:
        os.close(fd)


def _check(path: Path, data: Any, order: str, size: int, sizes: dict[int, tuple[int, int]]) -> None:
    h = _Header(data, order)
    try:
        h.take(4, "magic")
        version = h.u32("version")
        if version not in (2, 3):
            raise _Bad(f"it is GGUF version {version}; gguf reads versions 2 and 3")
        n_tensors = h.count("tensor count", 24)  # name length, dimension count, one dimension, type, offset
        n_keys = h.count("key count", 13)  # key length, value type, one byte of value
        keys, align = set(), 32
        for _ in range(n_keys):
            key = h.string("key")
            if key in keys:
                raise _Bad(f"it has the key {key!r} twice")
            keys.add(key)
            value = _skip_value(h, h.u32(f"type of {key}"), key)
            if key == "general.alignment":
                if value is None or value < 1 or value & (value - 1):
                    raise _Bad("its general.alignment is not a power of two (a UINT32)")
                align = value
        infos = _tensor_infos(h, n_tensors, sizes) if sizes else []
        start = -(-h.pos // align) * align
        for name, offset, n_bytes in infos:
            if offset % align or start + offset + n_bytes > size:
                raise _Bad(f"the data of {name!r} lies beyond the end of the file (a truncated file)")
    except _Bad as e:
        raise InputError(f"{path}: not a readable GGUF file: {e}; re-export or re-download it") from None
