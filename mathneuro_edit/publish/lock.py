"""The lock file ``mathneuro_recipe.lock.yaml``: the recipe with every default explicit, plus the hashes that pin a run.

It records the resolved recipe (public form), the base model's identity, what data was sampled, the hashes of the
statistics, the mask, the outputs and every other file of the run (:mod:`.run_files`), the library versions and the
device (:func:`build_lock`). ``mathneuro-edit reproduce`` re-runs :func:`recipe_from_lock` and compares the hashes;
what it promises across devices is :mod:`mathneuro_edit.runs.verdict`'s.

Every hash is a content hash and no local path is recorded (a local base is ``<local>`` with its weight files'
sha256, a data file ``<local>/NAME`` with its own; docs/recipes.md, "The lock file and privacy"), so the same model
and data give the same lock wherever they live. A lock is data: what it may choose is :mod:`.lock_policy`'s.
"""

from __future__ import annotations

import importlib.metadata
import json
import platform
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from .._version import __version__
from ..errors import InputError, MathNeuroEditError
from ..evaluation.lm_eval_task import include_path_hashes
from ..layout import LOCK_NAME
from ..organism import organism_path
from ..recipe.io import recipe_from_dict
from ..recipe.safe_yaml import dump_yaml, load_yaml
from ..recipe.schema import Recipe, recipe_sha256
from ..recipe.types import is_repo_id, is_well_formed_ref, show_value
from ..util.files import write_text_atomic
from ..util.hashing import sha256_file
from ..util.paths import LOCAL, ORGANISM, is_local_path
from .lock_policy import recipe_data_paths, refused_lock_settings, settings_refused

__all__ = [
    "LOCK_VERSION",
    "build_lock",
    "write_lock",
    "read_lock",
    "recipe_from_lock",
    "weights_sha256",
    "output_hashes",
    "library_versions",
    "check_base_weights",
    "private_paths",
    "check_private",
    "local_files",
    "check_local_files",
    "base_description",
]

LOCK_VERSION = 1


def weights_sha256(model_dir: str | Path) -> dict[str, str]:
    """``{file name: sha256}`` of every ``*.safetensors`` file of a local model folder and of its
    ``*.safetensors.index.json`` (sorted by name): the base's identity by content, wherever it lives."""
    folder = Path(model_dir)
    files = [*folder.glob("*.safetensors"), *folder.glob("*.safetensors.index.json")]
    return {p.name: sha256_file(p) for p in sorted(files, key=lambda p: p.name)}


def base_description(model_dir: str | Path) -> dict[str, Any]:
    """What a local base is, from its ``config.json``: ``{"model_type", "architecture"}`` (``None`` when unknown).

    Example:
        >>> import tempfile; base_description(tempfile.mkdtemp())
        {'model_type': None, 'architecture': None}
    """
    try:
        cfg = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        cfg = {}
    arch = cfg.get("architectures") or [None]
    return {"model_type": cfg.get("model_type"), "architecture": arch[0]}


def _sources(recipe: Recipe) -> list[tuple[str, str]]:
    """``(recipe key, path)`` of every data source of the recipe (calibration and evaluation)."""
    return list(recipe_data_paths(recipe.model_dump()).items())


def local_files(recipe: Recipe) -> dict[str, dict[str, str]]:
    """``{recipe key: {"name": file name, "sha256": ...}}`` of every local data file (no folder: private).

    Example:
        >>> from mathneuro_edit.recipe.io import quickstart_recipe
        >>> local_files(quickstart_recipe())  # organism data: no local file
        {}
    """
    return {
        key: {"name": Path(path).name, "sha256": sha256_file(Path(path).expanduser())}
        for key, path in _sources(recipe)
        if is_local_path(path) and Path(path).expanduser().is_file()
    }


def check_local_files(lock: Mapping[str, Any], recipe: Recipe) -> None:
    """Check that the data files given to reproduce a lock are the ones it recorded (by sha256): an
    :class:`InputError` names the key, the file and both hashes of one that differs."""
    recorded = lock.get("files") or {}
    for key, path in _sources(recipe):
        want = recorded.get(key)
        if want is None or not is_local_path(path) or not Path(path).expanduser().is_file():
            continue
        got = sha256_file(Path(path).expanduser())
        if got != want["sha256"]:
            raise InputError(
                f"{key}={path}: sha256 {got[:12]}..., the lock expects {want['sha256'][:12]}... "
                f"({want['name']}); this is not the file the run used: pass the right copy"
            )


def output_hashes(out_dir: str | Path, skip: Sequence[str] = ("README.md", LOCK_NAME)) -> dict[str, str]:
    """``{relative posix path: sha256}`` of every file in an output folder, except ``skip`` (by default the card
    and the lock itself: they embed these hashes) and hidden files/folders.

    Example:
        >>> import tempfile; output_hashes(tempfile.mkdtemp())
        {}
    """
    root = Path(out_dir)
    hashes = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root)
        if p.is_file() and rel.as_posix() not in skip and not any(part.startswith(".") for part in rel.parts):
            hashes[rel.as_posix()] = sha256_file(p)
    return hashes


def library_versions() -> dict[str, str]:
    """Versions of the tool and the libraries that shape the result (``"not installed"`` when missing).

    Example:
        >>> sorted(library_versions())
        ['huggingface_hub', 'peft', 'python', 'safetensors', 'tool', 'torch', 'transformers']
    """
    versions = {"tool": __version__}
    for name in ("torch", "transformers", "peft", "safetensors", "huggingface_hub"):
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return {**versions, "python": platform.python_version()}


def private_paths(recipe: Recipe) -> list[str]:
    """Strings that would reveal a local path of this recipe (raw paths with a folder part, absolute folders): what
    nothing published (lock, card) may contain."""
    found: list[str] = []
    paths = [recipe.base.model, recipe.base.offload_folder or "", *(path for _, path in _sources(recipe))]
    if recipe.evaluation is not None and recipe.evaluation.lm_eval is not None:
        paths.append(recipe.evaluation.lm_eval.include_path or "")
    for p in paths:
        if p and is_local_path(p):
            if "/" in p or "\\" in p:
                found.append(p)
            folder = str(Path(p).expanduser().resolve().parent)
            if folder not in ("/", ""):
                found.append(folder)
    return found


def check_private(text: str, recipe: Recipe, what: str) -> None:
    """Raise :class:`MathNeuroEditError` if ``text`` contains a local path of the recipe (a bug: never publish)."""
    leaked = [p for p in private_paths(recipe) if p in text]
    if leaked:
        raise MathNeuroEditError(f"{what} would reveal the local path {leaked[0]!r}; not written (please report)")


def build_lock(
    recipe: Recipe,
    *,
    base_revision: str | None,
    data_records: Mapping[str, Any],
    stats_sha256: str | Mapping[str, str],
    mask_sha256: str,
    output_files: Mapping[str, str],
    versions: Mapping[str, str] | None = None,
    base_weights: Mapping[str, str] | None = None,
    edit_summary: Mapping[str, Any] | None = None,
    base_gguf: Mapping[str, Any] | None = None,
    sweep: Mapping[str, Any] | None = None,
    device: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The lock of a run as plain data (YAML/JSON types only; public: no local paths).

    Why 12 parameters: the recipe and one keyword-only argument per entry of the lock the run computed (each
    recorded as it is); the callers are the run's seal step and tests that write a lock of their own.

    Args:
        base_revision: the resolved commit of a Hub base (``None`` for a local or organism base).
        data_records: ``{"math": [record], "general": [records], ...}``
            (:attr:`mathneuro_edit.data.sources.LoadedTexts.record`).
        stats_sha256: the statistics' hash, or ``{"math": ..., "general": ...}``.
        output_files: ``{relative path: sha256}`` of the written files (see :func:`output_hashes`).
        versions: library versions (default: :func:`library_versions`).
        base_weights: ``{file: sha256}`` of the base's safetensors; computed from the local folder when ``None``
            and the base is local (or the organism). For a GGUF base: the dequantized folder's.
        edit_summary: :func:`mathneuro_edit.publish.card.summarize_edit` of the mask (what the card shows: counts per
            module type, % of the model); lets ``push`` and ``card`` render the card from the folder alone.
        base_gguf: ``{"file": NAME, "sha256": ...}`` of a GGUF base (recorded as ``base.gguf``).
        sweep: the evidence of a release made with ``run --from-sweep``
            (:meth:`mathneuro_edit.runs.sweep.evidence.SweepEvidence.lock_entry`).
        device: where the statistics were computed (``{"type": "cuda", "name": "NVIDIA H200"}``:
            :func:`~mathneuro_edit.engine.devices.device_record`; an ``export`` from a saved mask records none).

    Example:
        >>> from mathneuro_edit.recipe.io import quickstart_recipe
        >>> lock = build_lock(quickstart_recipe(), base_revision=None, data_records={}, stats_sha256="s",
        ...                   mask_sha256="m", output_files={})
        >>> lock["recipe"]["base"]["model"], lock["mask_sha256"]
        ('organism', 'm')
    """
    public = recipe.public_dict()
    lock: dict[str, Any] = {
        "lock_version": LOCK_VERSION,
        "recipe_sha256": recipe_sha256(recipe),
        "recipe": public,
        "base": _base_entry(recipe, public["base"]["model"], base_revision, base_weights, base_gguf),
        "data": {k: [dict(r) for r in v] if isinstance(v, Sequence) else dict(v) for k, v in data_records.items()},
        "files": local_files(recipe),
        "stats_sha256": stats_sha256 if isinstance(stats_sha256, str) else dict(stats_sha256),
        "mask_sha256": mask_sha256,
        "outputs": dict(sorted(output_files.items())),
        "versions": dict(versions if versions is not None else library_versions()),
    }
    if device is not None:
        lock["device"] = dict(device)
    if sweep is not None:
        lock["sweep"] = json.loads(json.dumps(sweep))  # plain JSON/YAML types
    if edit_summary is not None:
        lock["edit_summary"] = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in edit_summary.items()}
    lm = recipe.evaluation.lm_eval if recipe.evaluation is not None else None
    if lm is not None and lm.include_path is not None:  # the task folder's contents, not its (local) path
        lock["lm_eval"] = {"include_path_sha256": include_path_hashes(lm.include_path)}
    check_private(yaml.safe_dump(lock), recipe, "the lock file")
    return lock


def _base_entry(
    recipe: Recipe,
    model: str,
    base_revision: str | None,
    base_weights: Mapping[str, str] | None,
    base_gguf: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The lock's ``base``: the model (as public), its revision, its weights' hashes (read from a local base when
    not given), its description (a local base) and its GGUF file (a GGUF base)."""
    local_dir = recipe.base.local_dir()
    local_dir = local_dir if local_dir is not None and local_dir.is_dir() else None
    if base_weights is None and local_dir is not None:
        base_weights = weights_sha256(local_dir)
    return {
        "model": model,
        "revision": base_revision,
        "weights_sha256": dict(base_weights) if base_weights is not None else None,
        **({"description": base_description(local_dir)} if local_dir is not None else {}),
        **({"gguf": dict(base_gguf)} if base_gguf is not None else {}),
    }


def write_lock(out_dir: str | Path, lock: Mapping[str, Any]) -> Path:
    """Write ``out_dir/mathneuro_recipe.lock.yaml`` atomically; returns its path."""
    text = "# Written by mathneuro-edit: the resolved recipe and the hashes that pin this run. Do not edit.\n"
    text += dump_yaml(dict(lock))  # control and bidi characters (a data file's name) as escapes, never raw
    return write_text_atomic(Path(out_dir) / LOCK_NAME, text)


def read_lock(path_or_dir: str | Path) -> dict[str, Any]:
    """Read a lock file (or the one inside an output folder): a missing file, invalid YAML or a file that is not a
    mathneuro-edit lock is an :class:`InputError`."""
    p = Path(path_or_dir)
    if p.is_dir():
        p = p / LOCK_NAME
    try:
        if p.exists() and not p.is_file():  # a FIFO would block, a device never end
            raise InputError(f"{p}: not a regular file; pass an output folder written by mathneuro-edit")
        if p.stat().st_size > MAX_LOCK_BYTES:
            raise InputError(
                f"{p}: {p.stat().st_size} bytes, more than a lock file may hold ({MAX_LOCK_BYTES}); "
                "this is not a lock written by mathneuro-edit"
            )
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{p}: lock file not found; pass an output folder written by mathneuro-edit") from None
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{p}: cannot read the lock file ({e})") from None
    data = load_yaml(text, str(p), what="lock file")  # limits (depth, aliases, integer size) before expanding
    if not isinstance(data, dict) or "lock_version" not in data or "recipe" not in data:
        raise InputError(f"{p}: not a mathneuro-edit lock file (no lock_version/recipe)")
    if data["lock_version"] != LOCK_VERSION:
        raise InputError(
            f"{p}: lock_version {repr(data['lock_version'])[:40]} is not supported (this version "
            f"reads {LOCK_VERSION}); use the mathneuro-edit version in its versions.tool"
        )
    if not isinstance(data["recipe"], dict):
        raise InputError(
            f"{p}: recipe: must be a mapping of sections (base, data, edit, ...), got "
            f"{type(data['recipe']).__name__}; this lock file is corrupt: use the one the run wrote"
        )
    for key, kind in _LOCK_FIELDS.items():
        if data.get(key) is not None and not isinstance(data[key], kind):
            raise InputError(
                f"{p}: {key}: must be a {'string' if kind is str else 'mapping'}, got {type(data[key]).__name__}; this lock "
                "file is corrupt: use the one the run wrote"
            )
    _check_base_names(p, data.get("base") or {})
    return data


# what Markdown, HTML or a terminal would act on: no path a run records holds one
_MARKUP = re.compile(r"[<>`\[\]()|*\x00-\x1f\x7f\u202a-\u202e\u2066-\u2069]")


def _check_base_names(p: Path, base: Mapping[str, Any]) -> None:
    """Refuse a lock whose ``base.model`` / ``base.revision`` is not what a run records (a Hub repo id,
    ``organism`` or ``<local>``; a Hub ref or commit): the card and its snippets show both as written, so an edited
    lock could otherwise put a heading, HTML or code there (issue 48)."""
    model, revision = base.get("model"), base.get("revision")
    # a plain local path is refused later, with its fix (pass --base PATH: lock_policy), by the commands that read it
    plain_path = isinstance(model, str) and is_local_path(model) and not _MARKUP.search(model)
    known = isinstance(model, str) and (model == ORGANISM or model.startswith(LOCAL) or is_repo_id(model))
    if model is not None and not plain_path and not known:
        raise InputError(
            f"{p}: base.model: {show_value(model)} is not a Hub repo id, organism or {LOCAL}; this lock file is "
            "corrupt: use the one the run wrote"
        )
    if revision is not None and not (isinstance(revision, str) and is_well_formed_ref(revision)):
        raise InputError(
            f"{p}: base.revision: {show_value(revision)} is not a Hub branch, tag or commit; this lock file is "
            "corrupt: use the one the run wrote"
        )


def recipe_from_lock(
    lock: Mapping[str, Any], overrides: Sequence[str] = (), *, trust_remote_code: bool = False
) -> Recipe:
    """The recipe of a lock, with overrides (e.g. ``base.model=PATH`` for a redacted local base).

    A lock is data (see the module docstring): what it may not choose is taken only from ``overrides`` /
    ``trust_remote_code`` (:func:`~.lock_policy.refused_lock_settings`).

    Raises:
        InputError: the recipe is invalid, a redacted local path (``<local>``) was not given back, or the lock
            asks for a setting it may not choose; the message lists the keys to pass.

    Example:
        >>> from mathneuro_edit.recipe.io import quickstart_recipe
        >>> lock = build_lock(quickstart_recipe(), base_revision=None, data_records={}, stats_sha256="s",
        ...                   mask_sha256="m", output_files={})
        >>> recipe_from_lock(lock) == quickstart_recipe()
        True
    """
    refused = refused_lock_settings(lock, overrides, trust_remote_code=trust_remote_code)
    if refused:
        raise settings_refused(refused)
    extra = ("base.trust_remote_code=true",) if trust_remote_code else ()
    recipe = recipe_from_dict(dict(lock["recipe"]), (*overrides, *extra), where="lock recipe")
    missing = ["base.model (--base PATH)"] if recipe.base.model == LOCAL else []
    missing += ["base.offload_folder"] if recipe.base.offload_folder == LOCAL else []
    missing += [key for key, path in _sources(recipe) if path.startswith(LOCAL)]
    lm = recipe.evaluation.lm_eval if recipe.evaluation is not None else None
    if lm is not None and (lm.include_path or "").startswith(LOCAL):
        missing.append("evaluation.lm_eval.include_path")
    if missing:
        raise InputError(
            f"the lock's local paths were redacted for privacy; give them again: {', '.join(missing)} "
            "(e.g. data.math.path=PATH; contents are checked against the lock's sha256)"
        )
    return recipe


def check_base_weights(lock: Mapping[str, Any], model_dir: str | Path) -> None:
    """Check that a local model folder (or ``organism``, the shipped model) holds the base weights the lock recorded:
    an :class:`InputError` names a file missing or different."""
    if str(model_dir) == ORGANISM:  # the shipped model, as everywhere a base is accepted
        model_dir = organism_path()
    gguf = (lock.get("base") or {}).get("gguf")
    if gguf or str(model_dir).lower().endswith(".gguf"):  # a GGUF base: the file itself is what was pinned
        path = Path(model_dir) / gguf["file"] if gguf and Path(model_dir).is_dir() else Path(model_dir)  # gguf_file
        sha = sha256_file(path) if path.is_file() else None
        if not gguf or sha != gguf.get("sha256"):
            raise InputError(
                f"{path}: {'not a file' if sha is None else 'sha256 ' + sha[:12] + '...'}, expected "
                f"the GGUF file {(gguf or {}).get('file', '(none recorded)')} the lock was made from"
            )
        return
    expected = (lock.get("base") or {}).get("weights_sha256") or {}
    actual = weights_sha256(model_dir)
    for name, sha in expected.items():
        if actual.get(name) != sha:
            state = "missing" if name not in actual else f"sha256 {actual[name][:12]}..., expected {sha[:12]}..."
            raise InputError(f"{Path(model_dir) / name}: {state}; this is not the base model the lock was made from")


# what read_lock accepts before any field is trusted (the fields themselves: lock_policy.validate_lock)
MAX_LOCK_BYTES = 16 * 1024 * 1024  # a lock lists every output file's hash: far less than this
_LOCK_FIELDS: dict[str, type] = {  # a hash is a string, every other field a mapping
    key: str if key.endswith("_sha256") else dict
    for key in ("recipe_sha256", "base", "data", "files", "mask_sha256", "outputs", "run_files", "versions")
    + ("edit_summary", "lm_eval", "device")
}
