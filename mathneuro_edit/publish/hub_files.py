"""What a push uploads: the files of one artifact, under the names of its repo, checked before any request.

What a push guarantees of them is docs/publishing.md's. Kept apart from :mod:`.hub` (the repo, its branch and the
one commit) because this part only reads the folder and its lock: what leaves the machine is decided, and tested,
without the request code.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..layout import LOCK_NAME
from ..outputs.registry import output, own_files
from ..util.hashing import sha256_file
from ..util.paths import is_local_path
from ..util.scrub import is_private_path, scrub_json_bytes
from .integrity import NOT_OUTPUTS, compare_files

__all__ = ["folder_files", "artifact_files", "check_artifact_against_lock", "uploaded_contents"]


def folder_files(out: Path) -> list[tuple[str, Path]]:
    """``(path in repo, local path)`` of every file to publish, sorted; hidden files/folders (temp files,
    ``.cache``) are left out. A file or folder that is a symbolic link resolving outside ``out`` (it would publish a
    file from elsewhere on this machine) is an :class:`InputError` naming it."""
    root = out.resolve()
    files = []
    for p in sorted(out.rglob("*")):
        rel = p.relative_to(out)
        if any(part.startswith(".") for part in rel.parts):
            continue
        if p.is_symlink() or p.is_file():
            try:
                target = p.resolve(strict=True)
            except (OSError, RuntimeError) as e:  # a dangling link, or a loop (RuntimeError before Python 3.13)
                raise InputError(
                    f"{out / rel}: a symbolic link that leads nowhere ({type(e).__name__}: "
                    f"{str(e)[:100]}); replace it with the file itself or remove it"
                ) from None
            if not target.is_relative_to(root):
                raise InputError(
                    f"{out / rel}: a symbolic link to {target}, outside the folder; only files inside "
                    "it are published: replace the link with the file itself or remove it"
                )
        if p.is_file():
            files.append((rel.as_posix(), p))
    return files


def uploaded_contents(files: list[tuple[str, Path]]) -> tuple[dict[str, Path | bytes], tuple[str, ...]]:
    """What a push sends for each file (``path in repo -> local file``, or its bytes with local paths blanked) and
    the ``"file: key"`` of every path blanked (at any depth, in the fields of a JSON file that can hold one:
    :func:`~mathneuro_edit.util.scrub.scrub_json`; the files on disk stay as they are). The one place that decides
    it, so a test loads what is uploaded.

    Raises:
        InputError: an adapter config names a local base (PEFT needs the base's Hub id: a blank would break loading).
    """
    contents: dict[str, Path | bytes] = dict(files)
    blanked: list[str] = []
    for rel, p in files:
        if not rel.endswith(".json") or p.stat().st_size > 64 << 20:  # JSON weights-scale data is not a config
            continue
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            continue
        if rel.rsplit("/", 1)[-1] == "adapter_config.json" and isinstance(data, dict):
            value = data.get("base_model_name_or_path")
            if isinstance(value, str) and (is_local_path(value) or is_private_path(value)):
                raise InputError(
                    f"{rel}: base_model_name_or_path is a local path ({value}); it would be published: "
                    "set it to the base model's Hub id (or null) before pushing"
                )
        content, keys = scrub_json_bytes(p)
        if content is not None:
            contents[rel] = content
            blanked += [f"{rel}: {key}" for key in keys]
    return contents, tuple(blanked)


def artifact_files(folder: Path, kind: str, lock: dict[str, Any]) -> list[tuple[str, Path]]:
    """``(path in repo, local path)`` of an artifact: the checkpoint folder without its GGUF files (they have a
    repo of their own), the adapter folder, or the GGUF files under llama.cpp's naming with the lock (the card
    is rendered for the repo): each output's own files (:meth:`~.outputs.Output.owns`), under the names of its
    repo (:attr:`~.outputs.Output.repo_file_name`)."""
    files = folder_files(folder)
    out = output(kind)
    own = [(rel, p) for rel, p in files if out.owns(f"{out.folder}/{rel}")]
    if out.repo_file_name is None:
        return own
    named = [(out.name_in_repo(lock, rel), p) for rel, p in own]  # names of their own in their repo, beside the lock
    if not named:
        raise InputError(f"{folder}: {out.absent}")
    return sorted(named) + [(rel, p) for rel, p in files if rel == LOCK_NAME]


def check_artifact_against_lock(folder: Path, kind: str, lock: dict[str, Any], files: list[tuple[str, Path]]) -> None:
    """The files a push would upload against the lock's sha256, as ``verify`` checks them: every recorded output
    of this artifact present and unchanged, and no file the lock does not list (the card, the lock and
    ``eval.json`` are written after the lock and are not outputs). An :class:`InputError` names each file that is
    ``changed``, ``missing`` or ``extra``; nothing was sent."""
    out = output(kind)
    local = [p.relative_to(folder).as_posix() for _, p in files]  # a GGUF file's name in the folder, not the repo
    present = {rel: sha256_file(folder / rel) for rel in local if rel not in NOT_OUTPUTS}
    states = compare_files(present, own_files(out, lock))  # the lock's outputs: their paths checked by validate_lock
    bad = {f"{out.folder}/{p}": s for p, s in states.items() if s != "match"}
    if bad:
        listed = ", ".join(f"{p} ({s})" for p, s in sorted(bad.items())[:10]) + (" ..." if len(bad) > 10 else "")
        raise InputError(
            f"{folder}: {len(bad)} file(s) differ from the lock's sha256: {listed}; the folder was "
            "changed after the run (`mathneuro-edit verify` shows it): push the folder the run wrote, or "
            "re-run the recipe; nothing was uploaded"
        )
