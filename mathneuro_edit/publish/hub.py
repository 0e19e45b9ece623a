"""Publish one artifact of a run (checkpoint, adapter or GGUF, with its card and lock) to its own Hub repo, mirrored.

One repo per artifact (:func:`~mathneuro_edit.outputs.registry.repo_for`), made EQUAL to it: the files the Hub holds
that the artifact does not are deleted in the same commit, and :class:`PushResult` (the dry run too) lists the adds,
deletes and sizes. What a push uploads, checked against the lock: :mod:`.hub_files`. What a push guarantees (one
commit, not ``upload_folder``'s several; the card rendered again for the repo, from memory; the token only in the
``Authorization`` header): docs/publishing.md. The requests that change anything: ``create_repo`` or
``update_repo_settings``, ``create_branch`` for a revision other than ``main``, then the ONE commit (:func:`_commit`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from huggingface_hub import CommitOperationAdd, CommitOperationDelete, HfApi, constants, get_token
from huggingface_hub.errors import HFValidationError, RepositoryNotFoundError, RevisionNotFoundError
from huggingface_hub.utils import validate_repo_id

from .._version import __version__
from ..errors import InputError, MathNeuroEditError
from ..layout import LOCK_NAME
from ..outputs.checkpoint import CHECKPOINT
from ..outputs.registry import OUTPUTS, output, output_of_folder, repo_for
from ..recipe.safe_yaml import dump_yaml
from ..recipe.types import is_branch_name, is_hub_ref, is_well_formed_ref
from ..util.console import terminal_safe
from ..util.scrub import scrub_token
from .card import card_for_folder
from .hub_files import artifact_files, check_artifact_against_lock, uploaded_contents
from .hub_requests import (
    hub_errors,
    hub_timeout,
    interruptible,
    progress_bars_on_a_terminal_only,
    request_timeouts,
    retrying,
)
from .lock import read_lock
from .lock_policy import validate_lock

__all__ = ["PushResult", "push_to_hub", "check_branch", "artifact_folder", "hub_target"]

KEEP = (".gitattributes",)  # the Hub's own files: never deleted by a mirror


@dataclass(frozen=True)
class PushResult:
    """What was (or, for a dry run, would be) pushed: the full plan. Holds no token.

    Attributes:
        repo_id: target repo (``None``: a dry run without one).
        private: the visibility asked for (``None``: unchanged; a new repo is then public).
        files: ``(path in repo, size in bytes)`` of every uploaded file.
        deletes: ``(path in repo, size)`` of every file the repo holds that the artifact does not: deleted in the
            same commit.
        remote: what is known of the repo: ``"new"`` (it does not exist yet), ``"listed"`` (its files were read),
            or why it could not be read (the dry run: deletes unknown).
        scrubbed: ``"file: key"`` of every local path blanked (``""``) in the uploaded copy of a JSON file.
        repo_url, commit_url, commit_oid, pr_url: the Hub's answers (``None`` for a dry run).
    """

    repo_id: str | None
    revision: str
    private: bool | None
    files: list[tuple[str, int]]
    commit_message: str
    card_metadata: dict[str, Any]
    dry_run: bool
    kind: str = CHECKPOINT.name
    deletes: list[tuple[str, int]] = field(default_factory=list)
    remote: str = "listed"
    create_pr: bool = False
    repo_url: str | None = None
    commit_url: str | None = None
    commit_oid: str | None = None
    pr_url: str | None = None
    scrubbed: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The plan as JSON data (``push --dry-run --json``)."""
        as_is = ("repo_id", "kind", "revision", "private", "create_pr", "dry_run", "remote", "commit_message")
        return {
            **{name: getattr(self, name) for name in as_is},
            "adds": [{"path": p, "size": s} for p, s in self.files],
            "deletes": [{"path": p, "size": s} for p, s in self.deletes],
            "total_bytes": sum(s for _, s in self.files),
            "card_metadata": self.card_metadata,
            "scrubbed": list(self.scrubbed),
            **{name: getattr(self, name) for name in ("repo_url", "commit_url", "commit_oid", "pr_url")},
        }

    def describe(self) -> str:
        """A human-readable summary (what the CLI prints)."""
        total = sum(size for _, size in self.files)
        head = "DRY RUN: nothing was sent. Would push" if self.dry_run else "Pushed"
        target = self.repo_id or "(no repo id: pass --repo-id or set hub.repo_id)"
        vis = "unchanged" if self.private is None else "private" if self.private else "public"
        how = " as a pull request" if self.create_pr else ""
        lines = [
            f"{head} the {self.kind} ({len(self.files)} files, {total:,} bytes) to {target}{how} "
            f"(revision {self.revision}, visibility {vis})",
            f"commit: {self.commit_message}",
        ]
        # the repo's file names are the Hub's (anyone with write access chose them): escaped, as every name shown
        lines += [f"  add    {size:>14,}  {terminal_safe(path)}" for path, size in self.files]
        lines += [f"  delete {size:>14,}  {terminal_safe(path)}" for path, size in self.deletes]
        if self.remote == "new":  # after the push, it exists: say what happened, not what was found before
            lines.append(
                "the repo does not exist yet: it is created with these files"
                if self.dry_run
                else "the repo did not exist: it was created with these files"
            )
        elif self.remote == "listed":
            deleted = f"{len(self.deletes)} file(s) it holds now {'are' if self.dry_run else 'were'} deleted"
            deleted = f"{deleted} in the same commit" if self.deletes else "nothing to delete"
            lines.append(f"the repo then holds exactly these files (+ {', '.join(KEEP)}): {deleted}")
        else:
            lines.append(
                f"the repo's files could not be listed ({self.remote}): every file it holds that is not "
                f"listed above (except {', '.join(KEEP)}) will be deleted in the same commit"
            )
        # as the card's own YAML header reads (control and bidi characters escaped), one key per line
        lines.append("card metadata:")
        lines += [f"  {line}" for line in dump_yaml(self.card_metadata).splitlines()]
        lines += [f"local paths blanked in the uploaded copy: {', '.join(self.scrubbed)}"] if self.scrubbed else []
        lines += [f"commit url: {self.commit_url}"] if self.commit_url else []
        lines += [f"pull request: {self.pr_url}"] if self.pr_url else []
        return scrub_token("\n".join(lines))  # a file name may hold the token: never printed


def check_branch(branch: str, where: str = "--branch") -> str:
    """``branch`` when it is a plain branch name (``main``, ``v1``, ``exp/boost-1.1``: one the Hub takes as written,
    :func:`~mathneuro_edit.recipe.types.is_well_formed_ref`), and not a pull request's ref (``refs/pr/3``, which a
    push would commit into), else :class:`InputError`.

    Example:
        >>> check_branch("exp/boost-1.1")
        'exp/boost-1.1'
    """
    shown = repr(branch)[:80].encode("ascii", "backslashreplace").decode()
    if is_well_formed_ref(branch) and is_hub_ref(branch):
        raise InputError(
            f"{where}: {shown} is a Hub ref (a pull request's), not a branch: a push never commits into an "
            "existing pull request, which may be someone else's; pass --create-pr to open one, or a branch "
            "name such as exp/boost-1.1"
        )
    if not is_branch_name(branch):
        raise InputError(
            f"{where}: {shown} is not a branch name the Hub takes as written (letters, digits, "
            "'.', '_', '-' and '/' between parts that do not start with '.' or '-'; no '..'); "
            "use e.g. main or exp/boost-1.1"
        )
    return branch


def _remote_deletes(api: HfApi, repo_id: str, branch: str, contents: dict[str, Any]) -> tuple[list, str]:
    """``(path, size)`` of every file the repo holds at ``branch`` (a missing branch: main, which it is created from)
    that ``contents`` does not, but :data:`KEEP`; and the repo's state: ``"new"`` (it does not exist) or ``"listed"``."""
    try:
        try:
            info = retrying(api.model_info, repo_id, revision=branch, files_metadata=True)
        except RevisionNotFoundError:
            info = retrying(api.model_info, repo_id, revision=constants.DEFAULT_REVISION, files_metadata=True)
    except RepositoryNotFoundError:
        return [], "new"
    remote = sorted((s.rfilename, int(s.size or 0)) for s in info.siblings or [])
    return [(p, size) for p, size in remote if p not in contents and p not in KEEP], "listed"


def push_to_hub(
    out_dir: str | Path,
    repo_id: str | None = None,
    *,
    kind: str | None = None,
    private: bool | None = None,
    revision: str | None = None,
    commit_message: str | None = None,
    create_pr: bool = False,
    dry_run: bool = False,
    token: str | None = None,
    base_repo: str | None = None,
) -> PushResult:
    """Make a Hub model repo equal to one artifact of a run, in one commit (adds and deletes): ``push``.

    Why 10 parameters: the folder and repo, then one keyword-only option per choice of ``mathneuro-edit push``;
    what they leave out comes from the recipe's ``hub`` section in the folder's lock.

    Args:
        out_dir: a run folder (its output ``kind``), or a folder with ``README.md`` and the lock: a run's
            ``checkpoint/`` or ``adapter/``, or an ``export`` folder.
        repo_id: ``user/name`` (created if missing); default: the output's repo from ``hub.repo_id``; ``None`` with
            none in the recipe only for a dry run.
        kind: a registered output (``checkpoint``, ``adapter``, ``gguf``); default: what the folder holds.
        private: ``True``/``False`` sets the repo's visibility (a new repo, or an existing one that differs);
            ``None``: ``hub.private: true`` if set, else an existing repo is left as it is (a new one is public).
        revision: branch to push to (created from main if missing); default ``hub.revision``, else ``main``.
        commit_message: commit summary; the recipe sha256 is always appended.
        dry_run: only compute the plan: nothing is changed (with a repo id, its file list is read to name the
            deletes; no token needed for a public repo).
        base_repo: for an output made from another (the GGUF), that output's repo (:func:`_derived_base`).

    Raises:
        InputError: not an output folder, a config naming a local path, a symbolic link out of the folder, bad
            repo id, no token (all checked before any request), or a Hub answer the user can fix (401, 403, not
            found); see ``_ERROR_TABLE``.
        MathNeuroEditError: other Hub or network failures.
    """
    out, lock, kind, repo_id, private, branch = _run_artifact(out_dir, kind, repo_id, private, revision, dry_run)
    message = f"{commit_message or 'Upload MathNeuro-edited model'} (recipe sha256 {lock['recipe_sha256']})"
    files = artifact_files(out, kind, lock)
    check_artifact_against_lock(out, kind, lock, files)  # what leaves is what the run wrote, before any request
    uploaded, scrubbed = uploaded_contents(files)  # rel -> local file, or its bytes with local paths blanked
    timeout = hub_timeout()  # MATHNEURO_EDIT_HUB_TIMEOUT checked before any request, the dry run's too
    token = token or get_token()
    if not dry_run and not token:
        raise InputError(
            "no Hugging Face token found; set HF_TOKEN or run `hf auth login` with a token that can "
            "write, then retry (nothing was uploaded)"
        )
    api = HfApi(token=token or False, library_name="mathneuro-edit", library_version=__version__)
    base_repo = _derived_base(api, lock, kind, base_repo, timeout)
    # for this repo: no placeholder, the right from_pretrained id
    card = card_for_folder(out, repo_id=repo_id, kind=kind, base_repo=base_repo)
    contents = dict(sorted({**uploaded, "README.md": card.content.encode("utf-8")}.items()))  # the card for the repo
    result = PushResult(
        repo_id=repo_id,
        kind=kind,
        revision=branch,
        private=private,
        create_pr=create_pr,
        files=[(rel, len(c) if isinstance(c, bytes) else c.stat().st_size) for rel, c in contents.items()],
        commit_message=message,
        card_metadata=card.data.to_dict(),
        dry_run=True,
        remote="no repo id",
        scrubbed=scrubbed,
    )
    if dry_run:
        return _planned(api, result, contents, token, timeout)
    with progress_bars_on_a_terminal_only():  # a Ctrl-C or SIGTERM ends the push at once, whatever it waits for
        pushed = interruptible(_commit, api, result, contents, token or "", timeout)
    return pushed


def _planned(api: HfApi, result: PushResult, contents: dict[str, Any], token: str | None, timeout: float) -> PushResult:
    """A dry run's plan, with the remote's state and deletes read without writing when there is a repo (a Hub
    failure leaves the plan standing, its deletes unknown and the reason, token scrubbed, as its ``remote``)."""
    if result.repo_id is None:
        return result
    try:
        with hub_errors(result.repo_id, result.revision, token or ""), request_timeouts(timeout):
            deletes, state = _remote_deletes(api, result.repo_id, result.revision, contents)
    except MathNeuroEditError as e:
        return replace(result, remote=scrub_token(str(e), token or None))
    return replace(result, remote=state, deletes=deletes)


def _derived_base(api: HfApi, lock: dict[str, Any], kind: str, base_repo: str | None, timeout: float) -> str | None:
    """The repo an output made from another (the GGUF) names as its base: ``base_repo`` as given, else that output's
    default repo (from the recipe's ``hub.repo_id``) when it exists on the Hub, else ``None`` (the original base)."""
    derived_from = output(kind).derived_from
    if derived_from is not None and base_repo is None:
        hub = lock["recipe"].get("hub") or {}
        if not hub.get("repo_id"):
            return None
        repo = repo_for(str(hub["repo_id"]), derived_from)
        try:
            with request_timeouts(timeout):
                api.model_info(repo)
        except Exception:  # noqa: BLE001 - not there, not readable or offline: the GGUF then names the original base
            return None
        return repo
    return base_repo


def _run_artifact(
    out_dir: str | Path,
    kind: str | None,
    repo_id: str | None,
    private: bool | None,
    revision: str | None,
    dry_run: bool,
) -> tuple[Path, dict[str, Any], str, str | None, bool | None, str]:
    """The folder of output ``kind`` in a run folder (or the output folder given), its lock (read once), that
    output's name, and the repo, visibility and branch: as given, else from the recipe's ``hub`` section in the lock
    (:func:`artifact_folder`, :func:`hub_target`). Each checked: the one-line InputError of a folder not to push (no
    card, a lock whose fields are not the run's), of a repo id or a branch name the Hub would refuse."""
    if repo_id is not None and not repo_id.strip():  # `--repo-id ''` (an unset variable) fell back to the recipe's
        raise InputError("--repo-id: empty; pass you/name, or leave --repo-id out to push to the recipe's hub.repo_id")
    out = Path(out_dir)
    if not out.is_dir():
        raise InputError(f"{out}: output folder not found; run the pipeline first")
    asked = output(kind) if kind is not None else None  # the flag names the output; none: the folder says
    folder = artifact_folder(out, asked)
    if not (folder / LOCK_NAME).is_file():
        raise InputError(
            f"{out}: no {LOCK_NAME} here; pass the run folder written by `mathneuro-edit run` "
            "(or a folder written by `export`)"
        )
    chosen = asked or output_of_folder(folder)  # an `export --adapter` folder holds the adapter
    lock = read_lock(folder)
    hub = lock["recipe"].get("hub") or {}  # the recipe's hub section fills what the flags leave out
    hub = hub if isinstance(hub, dict) else {}  # a malformed section: validate_lock in push_to_hub names it
    where = f"{folder / LOCK_NAME}: recipe hub.revision"
    repo_id, private, revision = hub_target(
        hub, chosen.name, chosen.repo_suffix, repo_id, private, revision, dry_run, where
    )
    if not (folder / "README.md").is_file():
        raise InputError(f"{folder}: no README.md (model card); run the pipeline, which writes it, before pushing")
    validate_lock(lock, f"{folder / LOCK_NAME}")  # every field against the recipe hash, as verify and reproduce do
    if repo_id is not None:  # None only for a dry run (hub_target)
        try:
            validate_repo_id(repo_id)
        except HFValidationError as e:
            raise InputError(f"repo_id: {repo_id!r} is not a valid Hub repo id ({e}); use user/name") from None
    branch = check_branch(revision) if revision is not None else constants.DEFAULT_REVISION
    return folder, lock, chosen.name, repo_id, private, branch


def artifact_folder(out: Path, asked: Any) -> Path:
    """The folder that holds output ``asked`` (an :class:`~mathneuro_edit.outputs.registry.Output`; ``None``: the
    folder says) given a run folder or an output's own folder: its sub-folder of a run folder when there is one
    (``run/adapter``), else ``out`` itself: a run folder's checkpoint, an ``export`` folder, or the output's own
    folder given directly (``push run/adapter --adapter``: the folder holds that output's files). An ``asked`` other
    than the checkpoint with no sub-folder, whose files ``out`` does not hold, is an :class:`InputError`."""
    first = next(iter(OUTPUTS.values()))  # the checkpoint: a run folder's default, an `export` folder's own
    target = asked or first
    sub = out / target.folder
    if sub.is_dir():
        return sub
    if target.folder != first.folder and not target.detect(out):
        raise InputError(
            f"{out}: no {target.folder}/ folder; run with outputs.{target.name}: true or push the folder itself"
        )
    return out


def hub_target(
    hub: Mapping[str, Any],
    kind: str,
    suffix: str,
    repo_id: str | None,
    private: bool | None,
    revision: str | None,
    dry_run: bool,
    where: str = "recipe hub.revision",
) -> tuple[str | None, bool | None, str | None]:
    """``(repo_id, private, revision)`` of a push: each flag as given, else the recipe's ``hub`` section (the
    lock's): ``hub.repo_id`` plus the output's suffix (one repo per artifact), ``hub.private`` when true, and
    ``hub.revision`` (checked as ``--branch`` is: a lock is data).

    Raises:
        InputError: no repo from either (unless ``dry_run``), or a recipe branch the Hub would not take as written.

    Example:
        >>> hub_target({"repo_id": "me/x", "revision": "v1"}, "adapter", "-adapter", None, None, "v2", False)
        ('me/x-adapter', None, 'v2')
    """
    if not repo_id and hub.get("repo_id"):
        repo_id = repo_for(str(hub["repo_id"]), kind)
    if not repo_id and not dry_run:
        raise InputError(
            f"no target repo: pass --repo-id you/name or set hub.repo_id in the recipe (the {kind} "
            f"goes to <id>{suffix})"
        )
    if private is None and hub.get("private"):
        private = True
    if revision is None and hub.get("revision") is not None:  # a lock's branch is data: checked as --branch is
        revision = check_branch(str(hub["revision"]), where)
    return repo_id, private, revision


def _commit(api: HfApi, plan: PushResult, contents: dict[str, Path | bytes], token: str, timeout: float) -> PushResult:
    """The push's requests: the repo (created, its visibility, the branch), its files, then one commit of ``plan``;
    ``plan`` as done: the repo's state before, the deletes and the Hub's URLs."""
    repo_id, branch, private = plan.repo_id or "", plan.revision, plan.private
    with hub_errors(repo_id, branch, token), request_timeouts(timeout):
        try:
            existing = retrying(api.model_info, repo_id)
        except RepositoryNotFoundError:
            existing = None
        if existing is None:
            url = retrying(api.create_repo, repo_id, private=bool(private), repo_type="model", exist_ok=True)
        else:
            url = f"{constants.ENDPOINT}/{repo_id}"
            if private is not None and bool(existing.private) != private:
                retrying(api.update_repo_settings, repo_id, private=private, repo_type="model")
        if branch != constants.DEFAULT_REVISION:
            retrying(api.create_branch, repo_id, branch=branch, repo_type="model", exist_ok=True)
        deletes, state = _remote_deletes(api, repo_id, branch, contents)
        operations: list[Any] = [
            CommitOperationAdd(path_in_repo=rel, path_or_fileobj=c if isinstance(c, bytes) else str(c))
            for rel, c in contents.items()
        ]
        operations += [CommitOperationDelete(path_in_repo=rel) for rel, _ in deletes]
        info = retrying(
            api.create_commit,
            repo_id,
            operations,
            commit_message=plan.commit_message,
            repo_type="model",
            revision=branch,
            create_pr=plan.create_pr,
            commit_description="Made with mathneuro-edit; see README.md and mathneuro_recipe.lock.yaml.",
        )
    return replace(
        plan,
        dry_run=False,
        remote="new" if existing is None else state,
        deletes=deletes,
        repo_url=str(url),
        commit_url=info.commit_url,
        commit_oid=info.oid,
        pr_url=info.pr_url,
    )
