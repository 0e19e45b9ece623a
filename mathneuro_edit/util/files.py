"""Writing small output files: byte-identical across runs, with the permissions the user's umask gives.

Why this module: ``tempfile.mkstemp`` (used for atomic writes) creates files with mode ``0600`` whatever the
umask, and safetensors' own ``save_file`` also leaves ``0600`` files; a model folder is normally readable by the
group/others the umask allows, so every file written here gets ``0666 & ~umask`` (folders ``0777 & ~umask``),
as ``open()`` would give. safetensors files with content-determined bytes: :mod:`.tensor_files` (it imports
torch; this module does not, so claiming ``--out`` and input errors answer before torch loads).

Every file is written through :func:`atomic_writer` (whole or not at all; it says why and how).
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

from ..errors import InputError

__all__ = [
    "umask",
    "file_mode",
    "dir_mode",
    "TEMP_SUFFIX",
    "atomic_writer",
    "write_text_atomic",
    "write_json_atomic",
    "write_bytes_atomic",
]

_UMASK_LOCK = threading.Lock()
# temporary files are ``.<target name>-<random>.tmp`` beside the target (a leftover of a killed run ends so)
TEMP_SUFFIX = ".tmp"


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
    """``data`` written to ``path`` through :func:`atomic_writer`.

    Example:
        >>> p = write_bytes_atomic(Path(tempfile.mkdtemp()) / "a.txt", b"hi")
        >>> p.read_bytes(), oct(p.stat().st_mode & 0o777) == oct(file_mode())
        (b'hi', True)
    """
    with atomic_writer(path) as f:
        f.write(data)
    return Path(path)


def write_text_atomic(path: str | Path, text: str) -> Path:
    """:func:`write_bytes_atomic` of UTF-8 text (newlines written as given)."""
    return write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path: str | Path, data: Any) -> Path:
    """:func:`write_text_atomic` of ``data`` in the one JSON style of every file we write (eval.json, sweep.json,
    consistency.json, ...): 2-space indent, UTF-8 text as is, no NaN/inf, final newline.

    Raises:
        ValueError: ``data`` holds NaN or infinity (JSON has no such numbers; say ``null`` instead).
    """
    return write_text_atomic(path, json.dumps(data, indent=2, allow_nan=False, ensure_ascii=False) + "\n")
