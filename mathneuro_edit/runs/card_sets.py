"""``mathneuro-edit card RUN --set KEY=VALUE``: the recipe keys a card may change after the run, applied to its lock.

A card describes outputs that are already written, so ``--set`` applies only what the card and the Hub show and no
output file records: ``hub.*`` (the repo the card's snippets name), ``base.hub_id`` / ``base.hub_revision`` (the Hub
model a local or GGUF base stands for), a source's ``hub_dataset`` (the dataset the card's ``datasets:`` and
model-index name). The lock's recipe and ``recipe_sha256`` are updated with them, so the lock, the card and a push
agree, and ``reproduce`` still gets the same files. A key that decides the weights (data, calibration, targets,
mask, edit, the base, ``outputs.dtype``) is refused in one line: the weights were computed with the recorded value,
and a card that said otherwise would lie; re-running the recipe is how it changes. Any other key is refused too
(``evaluation.samples`` would describe results eval.json does not hold). A base the lock redacted is given back
with ``--base``, not ``--set``.
"""

from __future__ import annotations

import copy
import difflib
import functools
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import InputError
from ..outputs.adapter import adapter_base
from ..recipe.io import recipe_fields, recipe_from_dict
from ..recipe.schema import Recipe, recipe_sha256

__all__ = ["CARD_KEYS", "check_card_sets", "apply_card_sets"]

# what only the card and the Hub show: no weight and no output file depends on it
CARD_KEYS = ("hub.repo_id", "hub.private", "hub.revision", "base.hub_id", "base.hub_revision")
_HUB_DATASET = re.compile(r"^(data|evaluation)\.(math|general(\.\d+)?)\.hub_dataset$")
# the sections and keys whose value the weights were computed with
_WEIGHT_KEYS = re.compile(
    r"^(data|calibration|targets|mask|edit)(\.|$)|^base\.(model|gguf_file|revision|dtype)$|^outputs\.dtype$"
)


def _key(item: str) -> str:
    return item.partition("=")[0].strip()


_SOURCE = re.compile(r"^(data|evaluation)\.(math|general(\.\d+)?)\.")


def _close_card_key(key: str) -> str | None:
    """The card key ``key`` most likely mistypes (``difflib``), among :data:`CARD_KEYS` and the ``hub_dataset``
    of a source (``key``'s own: ``data.general.0.hub_datset`` -> ``data.general.0.hub_dataset``); ``None``."""
    own = _SOURCE.match(key)
    keys = [*CARD_KEYS, "data.math.hub_dataset", "evaluation.math.hub_dataset"]
    keys += [own.group(0) + "hub_dataset"] if own else []
    close = difflib.get_close_matches(key, keys, 1)
    return close[0] if close else None


def _is_recipe_key(key: str) -> bool:
    """Whether ``key`` names a recipe key or section (a source's keys as ``source.*``, as
    :func:`~mathneuro_edit.recipe.io.recipe_fields` lists them), or a value within one (a map's entry)."""
    key = _SOURCE.sub("source.", key)
    return any(k == key or k.startswith(key + ".") or key.startswith(k + ".") for k in _recipe_keys())


@functools.cache
def _recipe_keys() -> tuple[str, ...]:
    return tuple(row[0] for row in recipe_fields())


def check_card_sets(sets: Sequence[str]) -> list[str]:
    """``sets`` when every key is one a card may change (:data:`CARD_KEYS`, a source's ``hub_dataset``); a key that
    would change the weights, or that no card shows, is refused in one line (which, why, what to do)."""
    for item in sets:
        key = _key(item)
        if key in CARD_KEYS or _HUB_DATASET.match(key):
            continue
        close = _close_card_key(key)
        if _WEIGHT_KEYS.search(key) and not (close and not _is_recipe_key(key)):  # a typo is told first
            redacted = "; a base the lock redacted is given back with --base PATH" if key == "base.model" else ""
            raise InputError(
                f"card --set {key}: would change the weights, which the run computed with the recorded value; "
                f"a card only describes them: re-run the recipe with --set {item} (mathneuro-edit run){redacted}"
            )
        raise InputError(
            f"card --set {key}: not a card setting"
            + (f", did you mean {close!r}?" if close else "")
            + f" (a card may change {', '.join(CARD_KEYS)} and a source's hub_dataset)"
            + ("" if close else f"; re-run the recipe with --set {item} to change it")
        )
    return list(sets)


def apply_card_sets(lock: Mapping[str, Any], sets: Sequence[str], where: str) -> dict[str, Any]:
    """The lock with ``sets`` (checked by :func:`check_card_sets`) applied to its recipe (written in its public
    form, every default explicit, as a run writes it), ``recipe_sha256`` re-computed and the data records'
    ``hub_dataset`` kept in step. A value the recipe refuses is refused, and so is a ``base.hub_id`` /
    ``base.hub_revision`` that an output file records (the GGUF file's name and metadata, an adapter's
    ``base_model_name_or_path``: :func:`_check_outputs_unchanged`).
    """
    new = copy.deepcopy(dict(lock))
    before = recipe_from_dict(dict(lock["recipe"]), where=where)
    after = recipe_from_dict(dict(lock["recipe"]), sets, where=where)  # a bad value: the recipe's own error line
    _check_outputs_unchanged(lock, before, after, sets)
    new["recipe"], new["recipe_sha256"] = after.public_dict(), recipe_sha256(after)
    for name, records in (new.get("data") or {}).items():  # the lock's data records repeat each source
        sources = (new["recipe"].get("data") or {}).get(name)
        sources = sources if isinstance(sources, list) else [sources]
        for record, src in zip(records if isinstance(records, list) else [], sources):
            if isinstance(record, dict) and isinstance(record.get("source"), dict) and isinstance(src, Mapping):
                record["source"]["hub_dataset"] = src.get("hub_dataset")
    return new


def _check_outputs_unchanged(lock: Mapping[str, Any], before: Recipe, after: Recipe, sets: Sequence[str]) -> None:
    """Refuse a Hub origin (``base.hub_id`` / ``hub_revision``) that an output file of the run records."""
    keys = {_key(s) for s in sets} & {"base.hub_id", "base.hub_revision"}
    if not keys or (before.base.hub_id, before.base.hub_revision) == (after.base.hub_id, after.base.hub_revision):
        return
    outputs = [str(k) for k in (lock.get("outputs") or {})]
    revision = (lock.get("base") or {}).get("revision")
    recorded = next((k for k in outputs if k.endswith(".gguf")), None)
    if recorded is None and adapter_base(before, revision) != adapter_base(after, revision):
        recorded = next((k for k in outputs if k.endswith("adapter_config.json")), None)
    if recorded is not None:
        key = sorted(keys)[0]
        raise InputError(
            f"card --set {key}: the run's {recorded} records the base's Hub origin (the GGUF's name and "
            f"metadata, or the adapter's base_model_name_or_path); re-run the recipe with --set {key}=... so the "
            "file and the card agree"
        )
