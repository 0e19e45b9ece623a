"""Publish an output folder (checkpoint or adapter, with its card and lock) to the Hugging Face Hub.

One call makes at most three requests that change anything: ``create_repo(exist_ok=True)``,
``create_branch(exist_ok=True)`` when a revision other than ``main`` is asked for, and ONE commit holding every
file. Why ``create_commit`` rather than ``upload_folder``: with ``hf_xet`` installed (a huggingface_hub
dependency), ``upload_folder`` streams through a multi-commit pipeline that may split a folder into several
commits (by file count, payload size or after 5 minutes), so the repo could briefly hold weights without their
card; one commit publishes the weights, card and lock together or not at all. Large files still go through
Xet/LFS inside that commit.

The card is rendered again for the target repo (:func:`mathneuro_edit.publish.card.card_for_folder`) and uploaded from
memory: the published ``README.md`` loads ``from_pretrained("user/name")`` and names the reproduce command for
that repo, while the local folder is left unchanged.

The token comes from the ``token`` argument, ``HF_TOKEN``, or huggingface_hub's stored login; it is only handed
to huggingface_hub (which sends it in the ``Authorization`` header) and is never written to disk, logged,
returned, or kept in an error message.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from huggingface_hub import CommitOperationAdd, HfApi, constants, get_token
from huggingface_hub.errors import (
    HfHubHTTPError,
    HFValidationError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.utils import validate_repo_id

from .._version import __version__
from ..errors import InputError, MathNeuroEditError
from ..util.paths import is_local_path
from ..util.scrub import is_private_path, scrub_json_bytes
from .card import card_for_folder
from .lock import read_lock

__all__ = ["PushResult", "push_to_hub", "commit_message_for"]


def _transport_errors() -> tuple[type[BaseException], ...]:
    """Network-level exception types of the HTTP client huggingface_hub uses (httpx2 in 2.x, httpx in 1.x)."""
    found: list[type[BaseException]] = [ConnectionError, TimeoutError]
    for module in ("httpx2", "httpx"):
        try:
            found.append(__import__(module).TransportError)
        except (ImportError, AttributeError):
            pass
    return tuple(found)


# (exception type, HTTP status or None for any, our error type, message). First match wins, so order matters:
# specific types before HfHubHTTPError, specific statuses before the catch-all. Placeholders: {repo_id},
# {revision}, {status}, {detail} (the Hub's first line, token removed), {endpoint}.
_ERROR_TABLE: list[tuple[tuple[type[BaseException], ...], int | None, type[MathNeuroEditError], str]] = [
    ((OfflineModeIsEnabled,), None, InputError, "HF_HUB_OFFLINE is set, so nothing can be pushed; unset it and retry"),
    ((RevisionNotFoundError,), None, InputError,
     "{repo_id}: revision {revision!r} not found ({detail}); push to a branch name, which is created if missing"),
    ((RepositoryNotFoundError,), None, InputError,
     "{repo_id}: repository not found or not accessible with this token ({detail}); check the repo id and that "
     "the token can write to its namespace"),
    ((HfHubHTTPError,), 401, InputError,
     "the Hub rejected the token (401 Unauthorized); log in again with `hf auth login` or set a valid HF_TOKEN"),
    ((HfHubHTTPError,), 403, InputError,
     "the token may not write to {repo_id} (403 Forbidden: {detail}); use a token with write access to that "
     "namespace"),
    ((HfHubHTTPError,), 404, InputError,
     "{repo_id}: not found on the Hub (404: {detail}); check the repo id and revision"),
    ((HfHubHTTPError,), 409, MathNeuroEditError,
     "{repo_id}: the Hub reported a conflict (409: {detail}); retry, or push to another revision"),
    ((HfHubHTTPError,), 429, MathNeuroEditError,
     "the Hub is rate-limiting requests (429); wait a few minutes and retry"),
    ((HfHubHTTPError,), None, MathNeuroEditError, "the Hub answered {status} for {repo_id} ({detail}); retry later"),
    (_transport_errors(), None, MathNeuroEditError, "cannot reach the Hub at {endpoint} ({detail}); check the network"),
    ((ValueError,), None, InputError, "the Hub client refused the upload of {repo_id}: {detail}"),
]


@contextmanager
def _hub_errors(repo_id: str, revision: str, token: str) -> Iterator[None]:
    """Translate huggingface_hub / network exceptions through :data:`_ERROR_TABLE` (token scrubbed)."""
    try:
        yield
    except MathNeuroEditError:
        raise
    except Exception as e:  # matched against the table below; anything unknown is re-raised unchanged
        response = getattr(e, "response", None)
        status = getattr(response, "status_code", None)
        detail = (str(e).strip().splitlines() or [type(e).__name__])[0][:300].replace(token, "***")
        for types, wanted, error, message in _ERROR_TABLE:
            if isinstance(e, types) and wanted in (None, status):
                text = message.format(repo_id=repo_id, revision=revision, status=status, detail=detail,
                                      endpoint=constants.ENDPOINT)
                raise error(text.replace(token, "***")) from None
        raise


@dataclass(frozen=True)
class PushResult:
    """What was (or, for a dry run, would be) pushed. Holds no token.

    Attributes:
        repo_id: target repo.
        revision: branch pushed to.
        private: the ``private`` flag asked for (used only when the repo is created).
        files: ``(path in repo, size in bytes)`` of every uploaded file.
        commit_message: the commit's summary (names the recipe sha256).
        card_metadata: the card's YAML metadata.
        dry_run: ``True`` when nothing was sent.
        scrubbed: ``"file: key"`` of every local path blanked (``""``) in the uploaded copy of a JSON file.
        repo_url, commit_url, commit_oid: the Hub's answers (``None`` for a dry run).
    """

    repo_id: str
    revision: str
    private: bool
    files: list[tuple[str, int]]
    commit_message: str
    card_metadata: dict[str, Any]
    dry_run: bool
    repo_url: str | None = None
    commit_url: str | None = None
    commit_oid: str | None = None
    scrubbed: tuple[str, ...] = ()  # "file: key" of every local path blanked in the uploaded copy

    def describe(self) -> str:
        """A human-readable summary (what the CLI prints)."""
        total = sum(size for _, size in self.files)
        head = "DRY RUN: nothing was sent. Would push" if self.dry_run else "Pushed"
        lines = [f"{head} {len(self.files)} files ({total:,} bytes) to {self.repo_id} "
                 f"(revision {self.revision}, private={self.private})", f"commit: {self.commit_message}"]
        lines += [f"  {size:>14,}  {path}" for path, size in self.files]
        lines.append("card metadata: " + ", ".join(f"{k}={v}" for k, v in self.card_metadata.items()))
        if self.scrubbed:
            lines.append("local paths blanked in the uploaded copy: " + ", ".join(self.scrubbed))
        if self.commit_url:
            lines.append(f"commit url: {self.commit_url}")
        return "\n".join(lines)


def commit_message_for(recipe_sha256: str, commit_message: str | None = None) -> str:
    """The commit summary: the caller's message (or a default) followed by the recipe's sha256.

    Example:
        >>> commit_message_for("ab" * 32)[:45]
        'Upload MathNeuro-edited model (recipe sha256 '
    """
    return f"{commit_message or 'Upload MathNeuro-edited model'} (recipe sha256 {recipe_sha256})"


def _folder_files(out: Path) -> list[tuple[str, Path]]:
    """``(path in repo, local path)`` of every file to publish, sorted; hidden files/folders (temp files,
    ``.cache``) are left out."""
    files = []
    for p in sorted(out.rglob("*")):
        rel = p.relative_to(out)
        if p.is_file() and not any(part.startswith(".") for part in rel.parts):
            files.append((rel.as_posix(), p))
    return files




def _check_no_local_paths(files: list[tuple[str, Path]]) -> dict[str, tuple[bytes, list[str]]]:
    """Refuse an adapter config naming a local base (PEFT needs the base's Hub id: a blank would break loading);
    blank every other local path in any uploaded JSON file, at any depth (the files on disk stay as they are).

    Returns:
        ``path in repo -> (scrubbed content, keys blanked)`` for the JSON files that needed it.
    """
    scrubbed: dict[str, tuple[bytes, list[str]]] = {}
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
                raise InputError(f"{rel}: base_model_name_or_path is a local path ({value}); it would be published: "
                                 "set it to the base model's Hub id (or null) before pushing")
        content, keys = scrub_json_bytes(p)
        if content is not None:
            scrubbed[rel] = (content, keys)
    return scrubbed


def push_to_hub(
    out_dir: str | Path,
    repo_id: str,
    *,
    private: bool = False,
    revision: str | None = None,
    commit_message: str | None = None,
    dry_run: bool = False,
    token: str | None = None,
) -> PushResult:
    """Push an output folder to a Hub model repo in one commit.

    Args:
        out_dir: a folder written by mathneuro-edit (holds ``README.md`` and ``mathneuro_recipe.lock.yaml``).
        repo_id: ``user/name`` (created if missing).
        private: create the repo private (an existing repo keeps its visibility).
        revision: branch to push to (created from main if missing); default ``main``.
        commit_message: commit summary; the recipe sha256 is always appended.
        dry_run: only list what would be pushed: no token needed, no network.
        token: a Hub token; default ``HF_TOKEN`` or the stored login (``hf auth login``).

    Returns:
        :class:`PushResult`.

    Raises:
        InputError: not an output folder, a config naming a local path, bad repo id, no token (all checked
            before any request), or a Hub answer the user can fix (401, 403, not found); see ``_ERROR_TABLE``.
        MathNeuroEditError: other Hub or network failures.

    Example:
        >>> print(push_to_hub("out/", "me/organism-boost", dry_run=True).describe())  # doctest: +SKIP
    """
    out = Path(out_dir)
    if not out.is_dir():
        raise InputError(f"{out}: output folder not found; run the pipeline first")
    if not (out / "README.md").is_file():
        raise InputError(f"{out}: no README.md (model card); run the pipeline, which writes it, before pushing")
    lock = read_lock(out)
    try:
        validate_repo_id(repo_id)
    except HFValidationError as e:
        raise InputError(f"repo_id: {repo_id!r} is not a valid Hub repo id ({e}); use user/name") from None
    branch = revision or constants.DEFAULT_REVISION
    message = commit_message_for(str(lock.get("recipe_sha256", "unknown")), commit_message)
    files = _folder_files(out)
    scrubbed = _check_no_local_paths(files)  # rel -> (uploaded bytes with local paths blanked, keys)
    card = card_for_folder(out, repo_id=repo_id)  # for this repo: no placeholder, the right from_pretrained id
    readme = card.content.encode("utf-8")
    contents: dict[str, Path | bytes] = {
        rel: (readme if rel == "README.md" else scrubbed[rel][0] if rel in scrubbed else p) for rel, p in files}
    result = PushResult(
        repo_id=repo_id, revision=branch, private=private,
        files=[(rel, len(c) if isinstance(c, bytes) else c.stat().st_size) for rel, c in contents.items()],
        commit_message=message, card_metadata=card.data.to_dict(), dry_run=True,
        scrubbed=tuple(f"{rel}: {key}" for rel, (_, keys) in scrubbed.items() for key in keys),
    )
    if dry_run:
        return result
    token = token or get_token()
    if not token:
        raise InputError("no Hugging Face token found; set HF_TOKEN or run `hf auth login` with a token that can "
                         "write, then retry (nothing was uploaded)")
    api = HfApi(token=token, library_name="mathneuro-edit", library_version=__version__)
    with _hub_errors(repo_id, branch, token):
        url = api.create_repo(repo_id, private=private, repo_type="model", exist_ok=True)
        if branch != constants.DEFAULT_REVISION:
            api.create_branch(repo_id, branch=branch, repo_type="model", exist_ok=True)
        operations = [CommitOperationAdd(path_in_repo=rel, path_or_fileobj=c if isinstance(c, bytes) else str(c))
                      for rel, c in contents.items()]
        info = api.create_commit(repo_id, operations, commit_message=message, repo_type="model", revision=branch,
                                 commit_description="Made with mathneuro-edit; see README.md and "
                                                    "mathneuro_recipe.lock.yaml.")
    return replace(result, dry_run=False, repo_url=str(url), commit_url=info.commit_url, commit_oid=info.oid)
