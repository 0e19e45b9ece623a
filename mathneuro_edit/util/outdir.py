"""Claiming and writing an output safely: one run per ``--out``, no temporary folder left behind, clear disk errors.

A run's lock file ``.<name>.lock`` beside its output is held with ``fcntl.flock`` (a run killed with ``kill -9``
releases it) and records pid, host, start time and command, so the run that loses names the holder. Temporary
folders ``.<name>.tmp-*`` carry an owner marker (pid + host): the next run into the same parent removes those whose
process is gone. ENOSPC / EDQUOT / EROFS become one line naming the output and the space needed; SIGTERM and SIGHUP
clean up like Ctrl-C; :func:`check_output` is the one output-claiming rule of every writing command.

POSIX only, as the package is (``fcntl.flock``; :func:`~.files.atomic_writer`'s ``os.fchmod``).
"""

from __future__ import annotations

import errno
import fcntl
import functools
import itertools
import json
import math
import os
import re
import shutil
import signal
import socket
import stat
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from ..errors import InputError, NoSpaceError, OutputBusyError, Terminated
from .files import dir_mode

__all__ = [
    "atomic_dir",
    "claim",
    "as_space_error",
    "sweep_stale",
    "disk_errors",
    "space_message",
    "refuse_overlap",
    "check_output",
    "install_signal_handlers",
    "OWNER_MARKER",
]

OWNER_MARKER = ".mathneuro-edit-owner.json"  # inside a temporary folder until it is renamed to the output
_SPACE_ERRNOS = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}


def as_space_error(exc: BaseException, out: str | Path, needed: int | None) -> NoSpaceError | None:
    """``exc`` as a :class:`NoSpaceError` naming ``out`` if it is a disk-space / read-only error, else None."""
    os_error = exc.os_error if isinstance(exc, NoSpaceError) else exc
    if type(exc).__name__ == "SafetensorError":  # safetensors' writer wraps the OS error: "... (os error 28)"
        found = re.search(r"os error (\d+)|code: (\d+)", str(exc))
        os_error = OSError(int(found.group(1) or found.group(2)), str(exc)) if found else exc
    if not isinstance(os_error, OSError):
        return None
    text = space_message(os_error, out, needed)
    return None if text is None else NoSpaceError(text, os_error, needed)


def _record() -> dict[str, Any]:
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])[:300],
    }


def _alive(rec: dict[str, Any]) -> bool | None:
    """Whether the process of a record still runs: True/False on this host, None (unknown) on another."""
    if rec.get("host") != socket.gethostname() or not isinstance(rec.get("pid"), int):
        return None
    try:
        os.kill(rec["pid"], 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        pass
    return True


def _read(path: Path) -> dict[str, Any] | None:
    try:
        rec = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) else None


@contextmanager
def claim(out: str | Path) -> Iterator[Path]:
    """Hold ``.<out name>.lock`` beside ``out`` exclusively for the duration of the block; an OutputBusyError
    naming the holder's pid, host and command when another live run holds it."""
    out = Path(out).expanduser().absolute()
    out.parent.mkdir(parents=True, exist_ok=True)
    lock = out.parent / f".{out.name}.lock"
    fd = _acquire(lock, out)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, (json.dumps(_record()) + "\n").encode())
        yield lock
    finally:
        with suppress(OSError):
            lock.unlink()  # while still held: a waiting process then re-checks the inode and retries
        os.close(fd)


def _open_lock(lock: Path) -> int:
    """Open (or create) the lock file, refusing a symbolic link or anything but a regular file at its name.

    Why: the name is fixed (every run must find it), and :func:`claim` truncates and writes the file it opens; a
    link planted there by another account would make the run overwrite the file it names (issue 41).
    """
    fix = "remove it (a run's lock is a plain file; someone else may have put this one there) and run again"
    try:
        fd = os.open(lock, os.O_CREAT | os.O_RDWR | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0), 0o644)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise InputError(f"{lock}: a symbolic link where the output's lock file goes; {fix}") from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise InputError(f"{lock}: not a regular file where the output's lock file goes; {fix}")
    return fd


def _acquire(lock: Path, out: Path) -> int:
    for _ in range(100):
        fd = _open_lock(lock)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            for _ in range(20):  # the holder writes its record right after locking
                rec = _read(lock)
                if rec:
                    break
                time.sleep(0.01)
            holder = (
                f"another run (pid {rec.get('pid')} on {rec.get('host')}, started {rec.get('started')}: "
                f"{rec.get('command')})"
                if rec
                else "another run"
            )
            raise OutputBusyError(
                f"{out}: {holder} is writing it; wait for it to finish or choose another --out"
            ) from None
        try:  # the holder unlinks the file before releasing it: make sure ours is still the one at the path
            same = os.stat(lock).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)
    raise OutputBusyError(f"{out}: its lock file {lock} keeps changing; another run is writing it")  # pragma: no cover


def sweep_stale(parent: Path) -> None:
    """Remove temporary folders in ``parent`` (the output's parent folder) left by runs of this host that no longer
    exist; report the others on stderr."""
    try:
        candidates = sorted(p for p in parent.iterdir() if p.name.startswith(".") and ".tmp-" in p.name and p.is_dir())
    except OSError:
        return
    say = functools.partial(print, file=sys.stderr)
    for p in candidates:
        rec = _read(p / OWNER_MARKER)
        if rec is None:
            continue  # not ours (no marker), or being renamed right now
        alive = _alive(rec)
        if alive is False:
            shutil.rmtree(p, ignore_errors=True)
            say(f"note: removed {p}, a temporary folder left by pid {rec.get('pid')} (no longer running)")
        elif alive is None:
            say(
                f"note: {p} is a temporary folder of a run on host {rec.get('host')} (pid {rec.get('pid')}); "
                "delete it if that run is over"
            )


def _stats(path: Path, follow: bool = False) -> Iterator[os.stat_result]:
    """The ``stat`` (``lstat`` unless ``follow``) of ``path`` when it is a file, else of every file in the folder;
    a file that cannot be examined (removed meanwhile) is skipped."""
    files = [path] if path.is_file() else (os.path.join(root, f) for root, _, names in os.walk(path) for f in names)
    for f in files:
        try:
            st = os.stat(f) if follow else os.lstat(f)
        except OSError:
            continue
        yield st


def _tree_size(path: Path) -> int:
    return sum(st.st_size for st in _stats(path))


def space_message(exc: OSError, out: str | Path, needed: int | None = None) -> str | None:
    """The one-line message for a full or read-only disk naming ``out``, or None for any other OSError. ``needed``:
    the bytes the whole output needs, when known (else what was written so far counts)."""
    if exc.errno == errno.EROFS:
        return f"read-only file system: cannot write {out}; choose another --out"
    if exc.errno not in _SPACE_ERRNOS:
        return None
    target = Path(out)
    probe = next((p for p in (target, *target.parents) if p.exists()), Path("."))
    try:
        free = shutil.disk_usage(probe).free
    except OSError:
        free = 0
    need = needed if needed is not None else (_tree_size(target) if target.is_dir() else 0)
    what = "quota exceeded" if exc.errno != errno.ENOSPC else "no space left on device"
    if need > free:  # what the output lacks, rounded up
        return f"{what} writing {out}; free {math.ceil((need - free) / 1e6)} MB or choose another --out"
    # what it lacks is not known (or the disk filled meanwhile): say what is free, never a made-up "free 1 MB"
    shown = f"{free // 10**6:,} MB" if free >= 10**6 else f"{free:,} bytes"
    return f"{what} writing {out} ({shown} free there); make room or choose another --out"


@contextmanager
def disk_errors(out: str | Path, needed: int | None = None) -> Iterator[None]:
    """Turn ENOSPC / EDQUOT / EROFS raised in the block into one :class:`InputError` naming ``out`` (``needed``: the
    bytes the output needs, when known)."""
    try:
        yield
    except Exception as e:
        err = as_space_error(e, out, needed)
        if err is None:
            raise
        raise err from None


def refuse_overlap(out: str | Path, protect: Sequence[str | Path]) -> None:
    """Refuse an output that is, contains, or lies inside one of ``protect`` (the base folder), in one
    :class:`InputError` naming both paths."""
    r = Path(out).expanduser().resolve()
    for p in protect:
        p = Path(p).expanduser().resolve()
        if r == p or p in r.parents or r in p.parents:
            raise InputError(
                f"out_dir: {Path(out).expanduser().absolute()} overlaps the base folder {p}; write the "
                "output somewhere else"
            )


def _inodes(path: Path) -> set[tuple[int, int]]:
    """``(device, inode)`` of a file, or of every file in a folder (the first 20,000): to see hard links."""
    return {(st.st_dev, st.st_ino) for st in itertools.islice(_stats(path, follow=True), 20_000)}


def check_output(
    out: str | Path, inputs: Sequence[tuple[str, str | Path | None]], *, kind: str = "dir", label: str = "--out"
) -> Path:
    """The output-claiming rule of every command that writes: refuse an output that would write onto an input.

    The output may not be, contain, or lie inside any input, compared after resolving symlinks and ``..``; an
    existing output file may not be a hard link of an input file. It must be a regular file or folder path: an
    existing device node, FIFO or socket (``/dev/null``, ``/dev/stdout``) is refused, and so is a folder where a
    file is written (``kind="file"``) or a file where a folder is (``kind="dir"``). ``inputs``: ``(what, path)`` of
    every local input (``("base folder", ...)``, ``("mask", ...)``; a ``None`` path is skipped); ``label``: how the
    message names the output. Returns ``out`` as an absolute path; a refusal is one :class:`InputError` naming the
    output, the input and what to do.

    Example:
        >>> check_output("/tmp/x/mask.safetensors", [("statistics", "/tmp/x/stats")], kind="file")
        PosixPath('/tmp/x/mask.safetensors')
    """
    shown = Path(out).expanduser().absolute()
    for folder in reversed(shown.parents):  # every folder above the output must be one (mkdir would fail on it)
        if os.path.lexists(folder) and not folder.is_dir():
            what = (
                "a symbolic link to a missing folder" if folder.is_symlink() and not folder.exists() else "not a folder"
            )
            raise InputError(
                f"{label}: {folder} is {what}, so {shown} cannot be written there; create the folder "
                "or choose another path"
            )
    resolved = Path(out).expanduser().resolve()
    try:
        mode = os.stat(resolved).st_mode
    except OSError:  # nothing there yet (or a dangling link)
        mode = None
    if mode is not None and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise InputError(
            f"{label}: {shown} is not a regular file or folder (a device, FIFO or socket); give a "
            "file or folder path to write"
        )
    if mode is not None and kind == "file" and stat.S_ISDIR(mode):
        raise InputError(f"{label}: {shown} is a folder; give the path of the file to write")
    if mode is not None and kind == "dir" and stat.S_ISREG(mode):
        raise InputError(f"{label}: {shown} exists and is not a folder; remove it or choose another path")
    out_inodes = _inodes(resolved) if resolved.exists() else set()
    for what, path in inputs:
        if path is None or str(path) == "":
            continue
        p = Path(path).expanduser()
        r = p.resolve()
        if resolved == r or r in resolved.parents or resolved in r.parents:
            raise InputError(
                f"{label}: {shown} overlaps the {what} {r}; the output may not be, contain or lie inside "
                "an input: write it somewhere else"
            )
        if out_inodes and p.exists() and out_inodes & _inodes(r):
            raise InputError(
                f"{label}: {shown} is a hard link of a file of the {what} {r}; writing it would change "
                "the input: write it somewhere else"
            )
    return shown


@contextmanager
def install_signal_handlers() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP raise :class:`Terminated` in the main thread (no-op in other threads),
    so a ``kill PID`` unwinds like Ctrl-C (temporary folders are removed); the previous handlers come back after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        raise Terminated(signum)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@contextmanager
def atomic_dir(
    out_dir: str | Path,
    *,
    overwrite: bool,
    protect: Sequence[Path] = (),
    needed: int | Callable[[], int | None] | None = None,
    inputs: Sequence[tuple[str, str | Path | None]] = (),
) -> Iterator[Path]:
    """Yield a temporary folder beside ``out_dir``; rename it to ``out_dir`` on success, remove it on error.

    The output is claimed first (:func:`~mathneuro_edit.util.outdir.claim`: a second run to the same ``out_dir``
    fails naming this one), stale temporary folders of killed runs beside it are removed, and a full or
    read-only disk becomes one :class:`~mathneuro_edit.errors.InputError` (``needed``: the output's bytes, for
    the message, or a function giving them, called only when the disk fills; default what was written so far).
    """
    out = Path(out_dir).expanduser().absolute()
    refuse_overlap(out, protect)
    check_output(out, inputs, kind="dir", label="out_dir")
    with claim(out):  # one run per output: a second one exits naming this one
        if out.exists() and not overwrite:  # (check_output refused a file or device there)
            raise InputError(f"out_dir: {out} already exists; pass overwrite=True or choose another folder")
        sweep_stale(out.parent)  # temporary folders of runs killed with kill -9
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
        (tmp / OWNER_MARKER).write_text(json.dumps(_record()) + "\n")  # pid + host, for sweep_stale
        try:
            yield tmp
            (tmp / OWNER_MARKER).unlink(missing_ok=True)
            os.chmod(tmp, dir_mode())  # mkdtemp makes it private; a model folder follows the user's umask
            old = out.with_name(f".{out.name}.old-{uuid.uuid4().hex[:8]}")
            if out.exists():  # replaced only once the new folder is complete
                out.rename(old)
            tmp.rename(out)
            shutil.rmtree(old, ignore_errors=True)
        except BaseException as e:
            # what the output needs: its known size, or what this run wrote before the failure plus what the file
            # that failed needed (a GGUF written into an export folder, a statistics file), whichever is larger:
            # a run's known size counts its checkpoint, whose own writer's error also names it (counted once)
            written = _tree_size(tmp) + (getattr(e, "needed", None) or 0)
            shutil.rmtree(tmp, ignore_errors=True)  # first: the free space then counts what this run had written
            if callable(needed):  # the output's size, worked out only for a full disk's message
                needed = needed() if as_space_error(e, out, written) is not None else None
            err = as_space_error(e, out, max(needed or 0, written))
            if err is not None:
                raise err from None
            raise
