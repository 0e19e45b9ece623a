"""The package's exception types.

Two kinds, so that callers (and the CLI) can tell them apart:

- :class:`InputError`: the user's input is wrong (a path, a value, a file from another model). The message
  says what is wrong, where, and how to fix it; the CLI prints it as one line and exits with status 2.
- :class:`MathNeuroEditError`: the base type; anything else of ours that goes wrong (exit status 3; 1 is kept for a check that found a difference).
"""

from __future__ import annotations

__all__ = ["MathNeuroEditError", "InputError", "OutputBusyError", "NoSpaceError", "LockMismatchError", "Terminated"]


class MathNeuroEditError(Exception):
    """Base class of every error raised by mathneuro-edit on purpose."""


class InputError(MathNeuroEditError, ValueError):
    """Bad user input: the message names what is wrong, where, and how to fix it.

    Example:
        >>> raise InputError("top_k: must be in (0, 1], got 1.5; pass a fraction such as 0.05")
        Traceback (most recent call last):
        ...
        mathneuro_edit.errors.InputError: top_k: must be in (0, 1], got 1.5; pass a fraction such as 0.05
    """


class OutputBusyError(InputError):
    """Another live run holds the output's lock file."""


class LockMismatchError(MathNeuroEditError):
    """A lock whose fields disagree with its recipe hash (edited after the run): exit 1, naming the field."""


class NoSpaceError(InputError):
    """A full disk, an exceeded quota or a read-only file system while writing an output.

    Attributes:
        os_error: the original error (an outer writer re-words the message with its own output's name).
        needed: bytes the failed write needed, when known (an outer writer adds what it wrote before).
    """

    def __init__(self, message: str, os_error: OSError, needed: int | None = None) -> None:
        super().__init__(message)
        self.os_error = os_error
        self.needed = needed


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP arrived; a ``KeyboardInterrupt`` so every cleanup written for Ctrl-C runs."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum
