"""The lock's ``run_files``: the sha256 of every file of a run that is not an output, so that ``reproduce`` and
``verify`` check all of them, not only the weights.

The lock's ``outputs`` hold the files of ``checkpoint/`` and ``adapter/`` that make the model; ``run_files`` holds
the rest, by the same relative paths:

- in a run folder: ``mask.safetensors``, every file of ``stats/``, ``eval.json`` and lm-eval's results files;
- in each output folder: its ``eval.json``, lm-eval's results files and its card (``README.md``).

A card names the lock beside it by its sha256, so the lock cannot hold the card's plain sha256 (each would name the
other): it records :func:`card_sha256`, the card's sha256 with that lock hash written as 64 zeros.
:func:`seal_cards` writes a folder's lock and cards that way; :func:`present_run_files` hashes what a folder holds
the same way, for the check (:mod:`.integrity`: what a lock written before ``run_files`` does not record is
``unchecked``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import MathNeuroEditError
from ..layout import EVAL_NAME, LM_EVAL_RESULTS, LOCK_NAME, MASK_NAME, STATS_DIR
from ..util.files import write_text_atomic
from ..util.hashing import sha256_file
from .lock import write_lock

__all__ = ["RUN_FILES", "CARD_NAME", "card_sha256", "present_run_files", "seal_cards"]

RUN_FILES = "run_files"  # the lock's key
CARD_NAME = "README.md"
_ZEROS = "0" * 64


def card_sha256(content: bytes, lock_sha256: str | None) -> str:
    """The sha256 the lock records of a card: its bytes with ``lock_sha256`` (the lock the card names) written as
    64 zeros.

    Example:
        >>> card_sha256(b"lock " + b"a" * 64, "a" * 64) == card_sha256(b"lock " + b"0" * 64, None)
        True
    """
    if lock_sha256:
        content = content.replace(lock_sha256.encode("ascii"), _ZEROS.encode("ascii"))
    return hashlib.sha256(content).hexdigest()


def present_run_files(root: Path, folders: Sequence[tuple[str, Path]], run_folder: bool) -> dict[str, str]:
    """``{path: sha256}`` of the files ``run_files`` records that are present: the run folder's mask, statistics and
    evaluation (``run_folder``), and each output folder's evaluation and card (``folders``: ``(prefix, folder)``,
    the prefix as in the lock: ``checkpoint/``), a card hashed by :func:`card_sha256` with the lock beside it."""

    def hashed(folder: Path, names: Sequence[str], prefix: str = "") -> dict[str, str]:
        return {prefix + name: sha256_file(folder / name) for name in names if (folder / name).is_file()}

    evaluation = (EVAL_NAME, *LM_EVAL_RESULTS)
    found: dict[str, str] = {}
    if run_folder:
        stats = sorted(p.name for p in (root / STATS_DIR).iterdir()) if (root / STATS_DIR).is_dir() else []
        found = hashed(root, [MASK_NAME, *(f"{STATS_DIR}/{n}" for n in stats if not n.startswith(".")), *evaluation])
    for prefix, folder in folders:
        found.update(hashed(folder, evaluation, prefix))
        if (folder / CARD_NAME).is_file():
            lock = folder / LOCK_NAME
            lock_sha = sha256_file(lock) if lock.is_file() else None
            found[prefix + CARD_NAME] = card_sha256((folder / CARD_NAME).read_bytes(), lock_sha)
    return found


def seal_cards(
    lock: Mapping[str, Any],
    folders: Sequence[tuple[str, Path]],
    root: Path | None,
    render: Callable[[Path, Mapping[str, Any]], str],
) -> dict[str, Any]:
    """Write the lock (into ``root`` and every output folder) and each folder's card, the cards' hashes in the
    lock's ``run_files``; returns the lock written.

    ``render(folder, lock)`` is the card of ``folder`` under the lock written there (it names that file's sha256).
    Each card is rendered twice: under the lock without its hash, then under the lock with it; the two must differ
    only in the lock hash they name (else the lock would record another card than the one written: a bug, raised).
    """
    where = [*([root] if root is not None else []), *(folder for _, folder in folders)]
    for folder in where:
        write_lock(folder, lock)
    hashes = {
        prefix + CARD_NAME: card_sha256(render(folder, lock).encode("utf-8"), sha256_file(folder / LOCK_NAME))
        for prefix, folder in folders
    }
    sealed = {**lock, RUN_FILES: {**(lock.get(RUN_FILES) or {}), **hashes}}
    for folder in where:
        write_lock(folder, sealed)
    for prefix, folder in folders:
        text = render(folder, sealed)
        if card_sha256(text.encode("utf-8"), sha256_file(folder / LOCK_NAME)) != hashes[prefix + CARD_NAME]:
            raise MathNeuroEditError(
                f"{folder / CARD_NAME}: the card changed with the lock's {RUN_FILES} entry, so the lock cannot "
                "record it; not written (please report)"
            )
        write_text_atomic(folder / CARD_NAME, text)
    return sealed
