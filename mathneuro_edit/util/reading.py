"""Reading a small file someone else may have made (a model's JSON files, a sweep's cache key files): the one
regular-file reader.

A path may name a FIFO (opening it for reading blocks until someone writes), a link to ``/dev/zero`` (reading it
never ends) or a file of gigabytes (reading it exhausts memory), and a JSON file may nest 100,000 levels deep
(``json.loads`` ends in ``RecursionError``). :func:`read_regular` opens without blocking and reads only a regular
file no larger than the caller's bound; :func:`read_json` adds the nesting. Each refusal is one
:class:`~mathneuro_edit.errors.InputError` line naming the file; a missing file stays ``FileNotFoundError`` and
text that is not JSON stays ``ValueError``, which each caller treats as it always did (a missing
tokenizer_config.json is normal; a config.json that is not JSON is transformers' to report).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from ..errors import InputError

__all__ = ["open_regular", "read_regular", "read_json"]


def open_regular(path: Path, fix: str) -> tuple[int, os.stat_result]:
    """A read-only descriptor of ``path`` and its ``fstat``, opened without blocking (a FIFO opens at once, then is
    refused): the one check that a file read here or mapped (a GGUF header) is a regular file. The caller closes it.

    Raises:
        OSError: the file cannot be opened or examined (each caller words it; ``FileNotFoundError`` included).
        InputError: ``"<path>: not a regular file (a FIFO, device or folder); <fix>"`` (the descriptor closed).
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InputError(f"{path}: not a regular file (a FIFO, device or folder); {fix}")
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def read_regular(path: str | Path, limit: int, what: str, fix: str) -> bytes:
    """The bytes of ``path``, which must be a regular file (after links) of at most ``limit`` bytes (checked on its
    size, then on what is read: it may grow). ``what`` and ``fix`` word the messages (``"a config.json"``, ``"use the
    model's own config.json"``). A FIFO is opened non-blocking and never read.

    Example:
        >>> read_regular("/dev/zero", 100, "a config.json", "use the model's own")
        Traceback (most recent call last):
        ...
        mathneuro_edit.errors.InputError: /dev/zero: not a regular file (a FIFO, device or folder); use the model's own
    """
    p = Path(path)
    try:
        fd, st = open_regular(p, fix)
    except FileNotFoundError:
        raise
    except IsADirectoryError:
        raise InputError(f"{p}: not a regular file (a FIFO, device or folder); {fix}") from None
    except OSError as e:
        raise InputError(f"{p}: cannot read it ({e.strerror}); {fix}") from None
    try:
        if st.st_size > limit:
            raise InputError(f"{p}: {st.st_size:,} bytes, more than {what} holds ({limit:,}); {fix}")
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(limit + 1)
    except OSError as e:
        raise InputError(f"{p}: cannot read it ({e.strerror}); {fix}") from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise InputError(f"{p}: more than {what} holds ({limit:,} bytes); {fix}")
    return data


def read_json(path: str | Path, limit: int, what: str, fix: str) -> Any:
    """:func:`read_regular`, then the JSON it holds; JSON nested too deep for a parser (Python's stops near 1,000
    levels) is an :class:`InputError` too."""
    raw = read_regular(path, limit, what, fix)
    try:
        return json.loads(raw.decode("utf-8"))
    except RecursionError:
        raise InputError(f"{path}: nested too deep to be {what}; {fix}") from None
