"""The sweep's calibration: each distinct calibration set once, kept in the sweep folder under its content key, and
each variant's :class:`~mathneuro_edit.runs.steps.mask.Statistics` made of those sets.

Why a key per set and not the run's layout (``math.stats.safetensors``, ``general-<i>.stats.safetensors``): the
variants of one sweep share sets (the general texts), and a resumed sweep must know that a file holds the set it
needs (model, texts, calibration settings, targets) before it reuses it. The statistics themselves are made by the
run's own step (:func:`~mathneuro_edit.runs.steps.mask.calibrate_set`), in the same file format.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from ...data.sources import load_texts
from ...engine.stats import ActivationStats
from ...errors import InputError
from ...recipe.schema import Recipe
from ...util.console import Stages
from ...util.files import write_json_atomic
from ...util.reading import read_json, read_regular
from ..steps.mask import Statistics, calibrate_set
from .cache import key_sha256
from .evaluator import _Context
from .grid import _Variant

# a statistics cache key file is a few hundred bytes; a statistics file holds per-column sums (a 70B model's: ~40 MB)
_MAX_KEY_BYTES = 1024 * 1024
_MAX_STATS_BYTES = 1024**3


def _set_label(recipe: Recipe, source: Any) -> str:
    """What makes two calibration sets the same set: the source and how it is sampled."""
    return json.dumps([source.model_dump(mode="json"), recipe.data.samples, recipe.data.seed], sort_keys=True)


def _sets(variant: _Variant) -> list[tuple[str, Any]]:
    """``[(what, source)]`` of a variant's calibration sets, math first (the order of its statistics)."""
    d = variant.recipe.data
    return [("math", d.math), *[("general", g) for g in d.general]]


def _set_count(variants: list[_Variant]) -> int:
    """How many distinct calibration sets the variants need: one stage line each."""
    return len({_set_label(v.recipe, src) for v in variants for _, src in _sets(v)})


def _stored(folder: Path, key: dict[str, Any]) -> Path | None:
    """The statistics file kept under ``key`` in ``folder``, checked against its key file; ``None`` when absent."""
    sha = key_sha256(key)
    path, key_file = folder / f"{sha[:16]}.stats.safetensors", folder / f"{sha[:16]}.key.json"
    if not key_file.is_file():
        return None
    fix = "delete both and run the same command again"
    try:  # through the one regular-file reader: a FIFO or a link to /dev/zero here is one line, never a hang
        saved = read_json(key_file, _MAX_KEY_BYTES, "a sweep cache key file", fix)
        stored = read_regular(path, _MAX_STATS_BYTES, "a statistics file", fix)
        ok = saved.get("key") == key and hashlib.sha256(stored).hexdigest() == saved["sha256"]
    except InputError:
        raise
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        ok = False
    if not ok:
        raise InputError(f"sweep cache: {path} does not match {key_file.name} (edited or corrupted); {fix}")
    return path


def _store(folder: Path, key: dict[str, Any], stats: ActivationStats) -> None:
    """Keep ``stats`` in ``folder`` under ``key``: the statistics file, then the key file with its sha256."""
    sha = key_sha256(key)
    path, key_file = folder / f"{sha[:16]}.stats.safetensors", folder / f"{sha[:16]}.key.json"
    folder.mkdir(parents=True, exist_ok=True)
    stats.save(path)
    write_json_atomic(key_file, {"key": key, "sha256": hashlib.sha256(path.read_bytes()).hexdigest()})


def _calibrated_set(ctx: _Context, recipe: Recipe, source: Any, what: str, folder: Path, stages: Stages) -> Any:
    """One calibration set's statistics, computed once and kept in ``folder`` under its content key (model,
    texts, calibration settings, targets): variants that share a set (the general texts) share its statistics."""
    d = recipe.data
    loaded = load_texts(source, d.samples, d.seed)
    settings = {k: v for k, v in recipe.resolved_dict().items() if k in ("calibration", "targets")}
    key = {"model": ctx.fingerprint, "texts": loaded.record["sha256"], **settings, "format": "stats/1"}
    path = _stored(folder, key)
    if path is not None:
        stages.start(f"calibrate {what}: reused ({len(loaded.texts)} texts)")
        return ActivationStats.load(path)
    stages.start(f"calibrate {what} ({len(loaded.texts)} texts)")
    stats = calibrate_set(replace(ctx.run, recipe=recipe), loaded.texts)  # the variant's recipe, the sweep's model
    _store(folder, key, stats)
    return stats


def _group_statistics(ctx: _Context, variants: list[_Variant], folder: Path, stages: Stages) -> dict[int, Statistics]:
    """Each statistics group's :class:`Statistics` (math, then general), every distinct set calibrated once."""
    stats: dict[int, Statistics] = {}
    done: dict[str, Any] = {}  # one computation per distinct set
    for v in variants:
        if v.group in stats:
            continue
        sets = []
        for what, src in _sets(v):
            label = _set_label(v.recipe, src)
            if label not in done:
                name = f"{what} ({v.name})" if v.name and what == "math" else what
                done[label] = _calibrated_set(ctx, v.recipe, src, name, folder, stages)
            sets.append(done[label])
        stats[v.group] = Statistics(sets[0], sets[1:])
    return stats
