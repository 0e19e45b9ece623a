"""Writing small output files: byte-identical across runs, with the permissions the user's umask gives.

Why this module: ``tempfile.mkstemp`` (used for atomic writes) creates files with mode ``0600`` whatever the
umask, and safetensors' own ``save_file`` also leaves ``0600`` files; a model folder is normally readable by the
group/others the umask allows, so every file written here gets ``0666 & ~umask`` (folders ``0777 & ~umask``),
as ``open()`` would give. And safetensors' ``save_file`` writes its ``__metadata__`` map in the order of a Rust
``HashMap`` (it changes from process to process), so two runs of the same recipe wrote mask and statistics files
that differed byte for byte although their content was equal: :func:`save_file` here writes the metadata keys
sorted and the tensors in a fixed order.

Every file is written through :func:`atomic_writer`: a temporary file created exclusively beside the target (never
a fixed or predictable name, never through a symbolic link), synced, then renamed onto it.
"""

from __future__ import annotations

import json
import os
import struct
import tempfile
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

import torch

from ..errors import InputError

__all__ = [
    "umask",
    "file_mode",
    "dir_mode",
    "TEMP_SUFFIX",
    "atomic_writer",
    "write_text_atomic",
    "write_json_atomic",
    "json_text",
    "write_bytes_atomic",
    "save_file",
    "SAFETENSORS_CODES",
    "DTYPE_OF_CODE",
    "FLOAT_DTYPES",
    "FLOAT_CODES",
]

_UMASK_LOCK = threading.Lock()
# temporary files are ``.<target name>-<random>.tmp`` beside the target (a leftover of a killed run ends so)
TEMP_SUFFIX = ".tmp"
# The one dtype table: torch dtype <-> safetensors code (the format's names; bool is stored as one byte per entry)
# <-> the names a recipe uses for the floating-point formats. Written here (save_file), read by the checkpoint
# reader, the shard writer, the loader and the audit.
SAFETENSORS_CODES: dict[torch.dtype, str] = {
    torch.float64: "F64",
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.int16: "I16",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.bool: "BOOL",
    torch.float8_e4m3fn: "F8_E4M3",
    torch.float8_e5m2: "F8_E5M2",
}
DTYPE_OF_CODE: dict[str, torch.dtype] = {code: dtype for dtype, code in SAFETENSORS_CODES.items()}
# outputs.dtype and load_model(dtype=...): the floating-point formats by name, in the order messages list them
FLOAT_DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
FLOAT_CODES: dict[str, str] = {name: SAFETENSORS_CODES[dtype] for name, dtype in FLOAT_DTYPES.items()}


def umask() -> int:
    """The process's current umask (read without changing it for longer than the call).

    Example:
        >>> 0 <= umask() <= 0o777
        True
    """
    with _UMASK_LOCK:  # os.umask can only be read by setting it: keep other threads from seeing the 0
        current = os.umask(0)
        os.umask(current)
    return current


def file_mode() -> int:
    """Mode of a new file under the current umask (``0o644`` for the usual ``022``)."""
    return 0o666 & ~umask()


def dir_mode() -> int:
    """Mode of a new folder under the current umask (``0o755`` for the usual ``022``)."""
    return 0o777 & ~umask()


@contextmanager
def atomic_writer(path: str | Path) -> Iterator[BinaryIO]:
    """A binary file through which ``path`` is written whole or not at all: every writer of the package uses it.

    The file is a new temporary file beside ``path`` (``.<name>-<random>.tmp``, the umask's mode); when the block
    ends without an error it is flushed, synced to disk and renamed onto ``path`` (a symbolic link at ``path`` is
    replaced, never followed); on an error it is removed and the error goes on.

    Why exclusive: a fixed or predictable temporary name (``.NAME.tmp``, ``.NAME.PID.tmp``) in a folder another
    account can write let that account plant a symbolic link there, and a plain ``open`` then wrote our bytes into
    whichever file of ours the link named (issue 41). ``tempfile.mkstemp`` creates the file with ``O_CREAT |
    O_EXCL`` (and ``O_NOFOLLOW``) under a random name: an existing name, a link included, is never opened. Why the
    sync: the data is on disk before the name, so a power cut leaves the old file or the new one, never an empty one.

    Raises:
        InputError: the folder does not exist.

    Example:
        >>> target = Path(tempfile.mkdtemp()) / "a.bin"
        >>> with atomic_writer(target) as f:
        ...     _ = f.write(b"hi")
        >>> target.read_bytes(), [p.name for p in target.parent.iterdir()]
        (b'hi', ['a.bin'])
    """
    path = Path(path)
    if not path.parent.is_dir():
        raise InputError(f"{path.parent}: output folder does not exist; create it or run the pipeline first")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}-", suffix=TEMP_SUFFIX)
    try:
        os.fchmod(fd, file_mode())  # mkstemp's 0600 would make the published file private
        with os.fdopen(fd, "wb") as f:
            fd = -1  # the file object owns it now
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        Path(tmp).unlink(missing_ok=True)
        raise


def write_bytes_atomic(path: str | Path, data: bytes) -> Path:
    """Write a file atomically through :func:`atomic_writer` (an exclusive temp file beside it, then a rename).

    Raises:
        InputError: the folder does not exist.

    Example:
        >>> p = write_bytes_atomic(Path(tempfile.mkdtemp()) / "a.txt", b"hi")
        >>> p.read_bytes(), oct(p.stat().st_mode & 0o777) == oct(file_mode())
        (b'hi', True)
    """
    path = Path(path)
    with atomic_writer(path) as f:
        f.write(data)
    return path


def write_text_atomic(path: str | Path, text: str) -> Path:
    """:func:`write_bytes_atomic` of UTF-8 text (newlines written as given).

    Raises:
        InputError: the folder does not exist.
    """
    return write_bytes_atomic(path, text.encode("utf-8"))


def json_text(data: Any) -> str:
    """The one JSON style of every file we write: 2-space indent, UTF-8 text as is, no NaN/inf, final newline.

    Example:
        >>> print(json_text({"a": [1, "é"]}), end="")
        {
          "a": [
            1,
            "é"
          ]
        }
    """
    return json.dumps(data, indent=2, allow_nan=False, ensure_ascii=False) + "\n"


def write_json_atomic(path: str | Path, data: Any) -> Path:
    """:func:`write_text_atomic` of :func:`json_text` (eval.json, sweep.json, consistency.json, ...).

    Raises:
        InputError: the folder does not exist.
        ValueError: ``data`` holds NaN or infinity (JSON has no such numbers; say ``null`` instead).
    """
    return write_text_atomic(path, json_text(data))


def save_file(
    tensors: Mapping[str, torch.Tensor], filename: str | Path, metadata: Mapping[str, str] | None = None
) -> None:
    """Drop-in for ``safetensors.torch.save_file`` whose bytes depend only on the content.

    Header: ``__metadata__`` first with its keys sorted, then the tensors ordered as safetensors' reference
    writer orders them (larger element size first, then by name: the data stays aligned), compact JSON padded
    with spaces to 8 bytes. The file gets the umask's mode. Any safetensors reader reads it.

    Args:
        tensors: name -> CPU tensor (any dtype of :data:`SAFETENSORS_CODES`).
        filename: the file to write, atomically (:func:`atomic_writer`: whole or not at all, never through a
            symbolic link).
        metadata: string key/values.

    Example:
        >>> d = tempfile.mkdtemp(); save_file({"b": torch.ones(2), "a": torch.zeros(1)}, f"{d}/x", {"z": "1", "a": "2"})
        >>> from safetensors.torch import load_file; sorted(load_file(f"{d}/x"))
        ['a', 'b']
    """
    order = sorted(tensors, key=lambda n: (-tensors[n].element_size(), n))
    header: dict[str, object] = {}
    if metadata:
        header["__metadata__"] = {k: str(metadata[k]) for k in sorted(metadata)}
    offset, blobs = 0, []
    for name in order:
        t = tensors[name].detach().contiguous().cpu()
        if t.dtype not in SAFETENSORS_CODES:
            raise InputError(f"{name}: dtype {t.dtype} cannot be stored in safetensors; convert it first")
        blob = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {
            "dtype": SAFETENSORS_CODES[t.dtype],
            "shape": list(t.shape),
            "data_offsets": [offset, offset + len(blob)],
        }
        offset += len(blob)
        blobs.append(blob)
    raw = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    raw += b" " * (-len(raw) % 8)  # as the reference writer: the data starts 8-byte aligned
    with atomic_writer(filename) as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        for blob in blobs:
            f.write(blob)
