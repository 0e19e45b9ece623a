"""The per-file check that ``verify`` and ``reproduce`` share: the files you have against the sha256 in the lock.

A local folder (a run folder, or one output's folder) is checked on its outputs (the lock's ``outputs``) and on the
rest of the run (``run_files``: :mod:`.run_files`); a Hub repo (one output, as ``push`` mirrors it) on its outputs
only, each by the LFS sha256 the Hub reports, else downloaded and hashed (a small git file), under its name in the
repo. Each recorded file is ``match``, ``changed`` or ``missing``; a file present but not recorded is ``extra``; a
run file the lock records no sha256 of (a lock written before ``run_files``) is ``unchecked``: not a difference,
and never called ``match``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..layout import EVAL_NAME, LM_EVAL_RESULTS, LOCK_NAME, STATS_DIR
from ..outputs.registry import OUTPUTS, Output, output_dirs, output_of_folder, own_files
from ..util.console import terminal_safe
from ..util.hashing import sha256_file
from ..util.scrub import scrub_token
from .lock import output_hashes
from .run_files import RUN_FILES, present_run_files

__all__ = [
    "FileCheck",
    "compare_files",
    "check_local_files_against_lock",
    "check_hub_files_against_lock",
    "NOT_OUTPUTS",
]

# written after the lock (the card, the evaluation: eval.json and lm-eval's own results files), or the Hub's own
NOT_OUTPUTS = ("README.md", LOCK_NAME, EVAL_NAME, *LM_EVAL_RESULTS, ".gitattributes")


@dataclass
class FileCheck:
    """The files present against the lock: ``{path: "match" | "changed" | "missing" | "extra" | "unchecked"}``, in
    the order checked (the run's files, then the outputs): the first difference is the first named."""

    where: str  # the folder or repo checked
    states: dict[str, str] = field(default_factory=dict)
    recorded: dict[str, str | None] = field(default_factory=dict)  # what the lock records of the files checked
    found: dict[str, str] = field(default_factory=dict)  # the files present: {path: sha256}

    @classmethod
    def compared(cls, where: str, found: Mapping[str, str], recorded: Mapping[str, str | None]) -> FileCheck:
        """The check of ``found`` against ``recorded`` (:func:`compare_files`), both kept."""
        return cls(where, compare_files(found, recorded), dict(recorded), dict(found))

    @property
    def ok(self) -> bool:
        return all(v in ("match", "unchecked") for v in self.states.values())

    def differences(self) -> dict[str, str]:
        return {p: s for p, s in self.states.items() if s not in ("match", "unchecked")}

    def unchecked(self) -> list[str]:
        """The files present whose sha256 the lock does not record."""
        return [p for p, s in self.states.items() if s == "unchecked"]

    def to_text(self) -> str:
        bad, unchecked = self.differences(), self.unchecked()
        checked = len(self.states) - len(unchecked)
        head = f"files in {terminal_safe(self.where)}: {checked} checked against the lock's sha256, " + (
            "all match" if not bad else f"{len(bad)} differ"
        )
        if unchecked:
            head += f"; {len(unchecked)} not checked (the lock records no sha256 of them)"
        # names from a Hub repo or a folder someone else made: escaped, so none can colour the terminal or forge
        # a line of its own ("\nerror: ...")
        return "\n".join([head] + [f"  {state:8s} {terminal_safe(p)}" for p, state in sorted(self.states.items())])

    def to_dict(self) -> dict[str, Any]:
        return {"where": self.where, "ok": self.ok, "files": dict(sorted(self.states.items()))}


def compare_files(present: Mapping[str, str], recorded: Mapping[str, str | None]) -> dict[str, str]:
    """``{path: state}`` of the recorded files against the present ones (both ``{path: sha256}``), in the recorded
    order; a recorded ``None`` is a file the lock should hold but does not: ``unchecked`` when present.

    Example:
        >>> compare_files({"a": "1", "b": "x", "c": "3", "e": "5"}, {"a": "1", "b": "2", "d": "4", "e": None})
        {'a': 'match', 'b': 'changed', 'd': 'missing', 'e': 'unchecked', 'c': 'extra'}
    """
    states = {
        p: ("missing" if p not in present else "match" if present[p] == sha else "changed")
        for p, sha in recorded.items()
        if sha is not None
    }
    states.update({p: "unchecked" for p, sha in recorded.items() if sha is None and p in present})
    states.update({p: "extra" for p in present if p not in recorded})
    return states


def _folder_prefixes(folder: Path) -> list[tuple[str, Path]]:
    """``(lock prefix, local folder)`` pairs: a run folder's sub-folders, or an artifact folder itself."""
    subs = [(f"{s}/", folder / s) for s in output_dirs() if (folder / s).is_dir()]
    # else the registry's markers: an adapter in mathneuro-edit's own format has no adapter_config.json
    return subs or [(f"{output_of_folder(folder).folder}/", folder)]


def check_local_files_against_lock(folder: str | Path, lock: Mapping[str, Any]) -> FileCheck:
    """Hash every file of a local folder (run folder or artifact folder) that the lock records against it: the run's
    files (``run_files``: the mask, statistics, evaluation and cards; a run folder's output folders' locks against
    its own), then the outputs (``outputs``)."""
    root = Path(folder)
    recorded: dict[str, str] = dict(lock.get("outputs") or {})
    prefixes = _folder_prefixes(root)
    run_folder = prefixes[0][1] != root
    present = present_run_files(root, prefixes, run_folder)
    wanted = _run_file_records(lock, present, [p for p, _ in prefixes], run_folder)
    if run_folder and (root / LOCK_NAME).is_file():  # each output folder's copy of the lock is the run folder's
        for prefix, sub in prefixes:
            wanted[prefix + LOCK_NAME] = sha256_file(root / LOCK_NAME)
            if (sub / LOCK_NAME).is_file():
                present[prefix + LOCK_NAME] = sha256_file(sub / LOCK_NAME)
    for prefix, sub in prefixes:
        wanted.update({k: v for k, v in recorded.items() if k.startswith(prefix)})
        present.update({prefix + rel: sha for rel, sha in output_hashes(sub, skip=NOT_OUTPUTS).items()})
    return FileCheck.compared(str(root), present, wanted)


def _run_file_records(
    lock: Mapping[str, Any], present: Mapping[str, str], prefixes: list[str], run_folder: bool
) -> dict[str, str | None]:
    """What the check wants of the run's files: the lock's ``run_files`` of the folder checked (a run folder's own
    files and its output folders'; an artifact folder's), and ``None`` (unchecked) for each present file it does not
    record (every one, in a lock written before ``run_files``)."""

    def in_scope(path: str) -> bool:
        return any(path.startswith(p) for p in prefixes) or (
            run_folder and ("/" not in path or path.startswith(f"{STATS_DIR}/"))
        )

    recorded = lock.get(RUN_FILES) or {}
    wanted: dict[str, str | None] = {p: sha for p, sha in recorded.items() if in_scope(p)}
    wanted.update({p: None for p in present if p not in wanted})
    return wanted


def check_hub_files_against_lock(
    repo_id: str, lock: Mapping[str, Any], *, revision: str | None = None, token: str | None = None
) -> FileCheck:
    """Check a Hub repo's files (one artifact, as ``push`` publishes it) against the lock's ``outputs``; a repo
    that cannot be read is one line naming it (:func:`_hub_read`)."""
    from huggingface_hub import HfApi, hf_hub_download

    with _hub_read(repo_id, token, "read", "the repo's file list"):
        info = HfApi(token=token).model_info(repo_id, revision=revision, files_metadata=True)
    siblings = {s.rfilename: s for s in info.siblings or [] if s.rfilename not in NOT_OUTPUTS}
    wanted = _wanted(_repo_output(siblings, lock), lock)
    present: dict[str, str] = {}
    for name, s in siblings.items():
        if s.lfs is not None:
            present[name] = s.lfs.sha256
        else:  # a regular (git) file: the Hub gives only its git blob id; hash the downloaded file
            with _hub_read(repo_id, token, "download", name):
                present[name] = sha256_file(hf_hub_download(repo_id, name, revision=info.sha or revision, token=token))
    return FileCheck.compared(repo_id + (f"@{revision}" if revision else ""), present, wanted)


@contextmanager
def _hub_read(repo_id: str, token: str | None, verb: str, what: str) -> Iterator[None]:
    """A read (``verb``: read, download) of ``what`` from the Hub; its failure is one line: exit 3 when it is the
    Hub's fault (:func:`~.hub_requests.hub_fault`), else exit 2 (not found, no access, offline)."""
    from .hub_requests import first_line, hub_fault

    try:
        yield
    except Exception as e:  # noqa: BLE001 - every failure is worded, none a traceback
        fault = hub_fault(repo_id, e, f"{verb}ing {what}", token)
        if fault is not None:
            raise fault from None
        raise InputError(
            f"{repo_id}: cannot {verb} {what} from the Hub ({first_line(scrub_token(str(e), token), type(e).__name__)});"
            " check the repo id, the token and the network, or pass a local folder"
        ) from None


def _wanted(out: Output, lock: Mapping[str, Any]) -> dict[str, str]:
    """The files of ``out`` the lock records, by their names in its Hub repo."""
    return {out.name_in_repo(lock, name): sha for name, sha in own_files(out, lock).items()}


def _repo_output(names: Collection[str], lock: Mapping[str, Any]) -> Output:
    """The output a Hub repo's files are (``push`` publishes one per repo): the first registered one whose markers
    it holds (the adapter), else the one most of whose recorded names it holds, then the one whose kind of file
    (``.gguf`` or not) most of them are; the first registered on a tie."""
    marked = [o for o in OUTPUTS.values() if any(m in names for m in o.markers)]
    if marked:
        return marked[0]

    def score(o: Output) -> tuple[int, int]:
        kind = sum(o.gguf_files is not None and n.endswith(".gguf") == o.gguf_files for n in names)
        return len(set(_wanted(o, lock)) & set(names)), kind

    return max(OUTPUTS.values(), key=score)
