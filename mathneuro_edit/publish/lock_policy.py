"""A lock is data: what a lock may choose, and whether its fields are the ones the run wrote.

A lock (or a card, or a downloaded repo) comes from someone else. :func:`refused_lock_settings` lists what a lock
may never choose: running the base's code (``base.trust_remote_code``) or the Hub's compiled kernels
(``base.use_kernels``), a local file or folder to read or write, an lm-eval task folder (whose task YAMLs can run
Python); each is taken only from the user's command line (``--trust-remote-code``, ``--base PATH``,
``--set KEY=VALUE``). :func:`validate_lock` checks every field against the recipe hash before anything runs: an
edited field is :class:`~mathneuro_edit.errors.LockMismatchError` (exit 1) naming it. :func:`lock_base` is the base
a command may read for a lock. The lock's format, reading and writing: :mod:`.lock`.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import InputError, LockMismatchError
from ..recipe.input_sections import Source
from ..recipe.io import recipe_from_dict
from ..recipe.schema import recipe_sha256
from ..util.paths import LOCAL, is_local_path

__all__ = ["refused_lock_settings", "settings_refused", "validate_lock", "lock_base", "recipe_data_paths"]

_SHA = re.compile(r"^[0-9a-f]{64}$")


def _given(key: str, overrides: Sequence[str]) -> bool:
    """Whether ``key`` (or a section above it) is set by one of the command line's ``key=value`` overrides."""
    given = (item.partition("=")[0].strip() for item in overrides)
    return any(k == key or key.startswith(k + ".") for k in given)


def refused_lock_settings(
    lock: Mapping[str, Any], overrides: Sequence[str] = (), *, trust_remote_code: bool = False
) -> list[str]:
    """The settings of a lock's recipe that a lock may not choose (see the module docstring; a lock written by
    mathneuro-edit redacts every local path to ``<local>``), each with how to opt in on the command line.

    Example:
        >>> [s.split(" (")[0] for s in refused_lock_settings({"recipe": {"base": {"trust_remote_code": True}}})]
        ['base.trust_remote_code: true']
    """
    recipe = lock.get("recipe")
    if not isinstance(recipe, Mapping):
        return []
    refused: list[str] = []
    base = recipe.get("base") if isinstance(recipe.get("base"), Mapping) else {}
    if (
        base.get("trust_remote_code") not in (None, False)
        and not trust_remote_code
        and not _given("base.trust_remote_code", overrides)
    ):
        refused.append(
            "base.trust_remote_code: true (runs the base repository's Python; pass --trust-remote-code if you trust it)"
        )
    if base.get("use_kernels") not in (None, False) and not _given("base.use_kernels", overrides):
        refused.append(
            "base.use_kernels: true (runs compiled kernels downloaded from the Hub; pass --set "
            "base.use_kernels=true if you trust them)"
        )
    model = base.get("model")
    if isinstance(model, str) and model != LOCAL and is_local_path(model) and not _given("base.model", overrides):
        refused.append(f"base.model: {model[:80]!r} (a local folder; pass --base PATH)")
    if base.get("offload_folder") not in (None, LOCAL) and not _given("base.offload_folder", overrides):
        refused.append(
            f"base.offload_folder: {str(base['offload_folder'])[:80]!r} (a local folder written to; "
            "pass --set base.offload_folder=PATH)"
        )
    for key, path in recipe_data_paths(recipe).items():
        if path.startswith(LOCAL) or _given(key, overrides):
            continue
        try:
            kind = Source(path=path).kind
        except ValueError:  # an invalid source: the recipe's validation names it
            continue
        if kind == "local":
            refused.append(f"{key}: {path[:80]!r} (a local file; pass --set {key}=FILE)")
    evaluation = recipe.get("evaluation")
    lm = evaluation.get("lm_eval") if isinstance(evaluation, Mapping) else None
    include = lm.get("include_path") if isinstance(lm, Mapping) else None
    if (
        include is not None
        and not str(include).startswith(LOCAL)
        and not _given("evaluation.lm_eval.include_path", overrides)
    ):
        refused.append(
            f"evaluation.lm_eval.include_path: {str(include)[:80]!r} (an lm-eval task folder, whose "
            "tasks can run Python; pass --set evaluation.lm_eval.include_path=FOLDER)"
        )
    return refused


def settings_refused(refused: Sequence[str]) -> InputError:
    """The one-line :class:`InputError` (exit 2) naming every setting :func:`refused_lock_settings` found, each
    with how to opt in."""
    return InputError(
        f"the lock asks for {len(refused)} setting(s) a lock may not choose (a lock is data: it "
        f"never runs code or names a file to read); refused: {'; '.join(refused)}"
    )


def _canonical_sha(data: Any) -> str:
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def validate_lock(lock: Mapping[str, Any], where: str = "the lock") -> None:
    """Check every field of a lock against its recipe hash before anything runs.

    The recipe must hash to ``recipe_sha256`` (as written, or validated with today's defaults); ``base.model``,
    ``files`` and ``lm_eval`` must agree with that recipe; hashes must look like sha256.

    Raises:
        InputError: a field of the wrong type (exit 2).
        LockMismatchError: a field that disagrees with the recipe hash (exit 1), naming it.
    """

    def mismatch(field: str, why: str) -> LockMismatchError:
        return LockMismatchError(
            f"{where}: field {field}: {why}; the lock was edited after the run: use the lock "
            "the run wrote (or re-run the recipe to get a new one)"
        )

    recorded = lock.get("recipe_sha256")
    if not isinstance(recorded, str) or not _SHA.match(recorded):
        raise InputError(
            f"{where}: recipe_sha256: must be a sha256 (64 hex digits), got "
            f"{str(recorded)[:40]!r}; this lock file is corrupt: use the one the run wrote"
        )
    public = lock["recipe"]
    if _canonical_sha(public) != recorded:
        try:
            again = recipe_sha256(recipe_from_dict(dict(public), where=f"{where}: recipe"))
        except InputError:
            again = None
        if again != recorded:
            raise mismatch(
                "recipe",
                f"it hashes to {(again or _canonical_sha(public))[:12]}..., not the recorded "
                f"recipe_sha256 {recorded[:12]}...",
            )
    mask = lock.get("mask_sha256")
    if "mask_sha256" in lock and not (isinstance(mask, str) and _SHA.match(mask)):
        raise InputError(f"{where}: mask_sha256: must be a sha256 (64 hex digits), got {str(mask)[:40]!r}")
    for key in ("outputs", "run_files"):
        for rel, sha in (lock.get(key) or {}).items():
            if (
                not isinstance(rel, str)
                or not isinstance(sha, str)
                or not _SHA.match(sha)
                or rel.startswith(("/", "\\"))
                or ".." in Path(rel).parts
            ):
                raise InputError(
                    f"{where}: {key}: {str(rel)[:80]!r}: must be a relative file path inside the run and its sha256"
                )
    base = lock.get("base") or {}
    base_model = (public.get("base") or {}).get("model") if isinstance(public.get("base"), dict) else None
    if "model" in base and base["model"] != base_model:
        raise mismatch(
            "base.model", f"{str(base['model'])[:80]!r} is not the recipe's base.model {str(base_model)[:80]!r}"
        )
    keys = recipe_data_paths(public)
    for key, rec in (lock.get("files") or {}).items():
        if not isinstance(rec, dict) or not isinstance(rec.get("sha256"), str) or not _SHA.match(rec["sha256"]):
            raise InputError(f"{where}: files.{key}: must hold a file name and its sha256")
        if key not in keys or keys[key] != f"{LOCAL}/{rec.get('name')}":
            raise mismatch(
                f"files.{key}",
                f"names {str(rec.get('name'))[:80]!r}, but the recipe's {key} is {str(keys.get(key))[:80]!r}",
            )
    lm = ((public.get("evaluation") or {}).get("lm_eval") or {}) if isinstance(public.get("evaluation"), dict) else {}
    has_include = isinstance(lm, dict) and lm.get("include_path") is not None
    if has_include != bool((lock.get("lm_eval") or {}).get("include_path_sha256")):
        raise mismatch(
            "lm_eval.include_path_sha256",
            "it must be recorded exactly when the recipe has evaluation.lm_eval.include_path",
        )


def recipe_data_paths(public: Mapping[str, Any]) -> dict[str, str]:
    """The data files a recipe names (``data.math.path``, ``evaluation.general.0.path``, ...): key -> path."""
    keys: dict[str, str] = {}
    for name in ("data", "evaluation"):
        section = public.get(name)
        if isinstance(section, Mapping):
            general = section.get("general")
            general = general if isinstance(general, list) else [general]
            for key, src in [
                (f"{name}.math.path", section.get("math")),
                *[(f"{name}.general.{i}.path", g) for i, g in enumerate(general)],
            ]:
                path = src.get("path") if isinstance(src, Mapping) else src
                if isinstance(path, str):
                    keys[key] = path
    return keys


def lock_base(lock: Mapping[str, Any], base: str | None) -> str | None:
    """The base a command may read for a lock: ``--base`` when given, else the lock's Hub id or ``organism``; a
    local folder named by the lock is refused (:func:`refused_lock_settings`: pass ``--base PATH``)."""
    if base is not None:
        return base
    recipe = lock.get("recipe") if isinstance(lock.get("recipe"), Mapping) else {}
    model = (recipe.get("base") or {}).get("model") if isinstance(recipe.get("base"), Mapping) else None
    if model == LOCAL:
        return LOCAL
    refused = refused_lock_settings({"recipe": {"base": {"model": model}}})
    if refused:
        raise settings_refused(refused)
    return model
