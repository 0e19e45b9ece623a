"""The recipe: one validated description of a MathNeuro run (model, data, mask, edit, outputs, evaluation, Hub).

It is the single source of truth for the YAML files and the CLI options: ``docs/recipes.md`` documents every key
listed by :func:`~mathneuro_edit.recipe.io.recipe_fields`. :class:`Recipe` assembles the sections, defined by what
they describe: what a run reads in :mod:`.input_sections`, making and writing the edit in :mod:`.edit_sections`, the
jobs that judge or publish it in :mod:`.job_sections`. Every section rejects unknown keys; a bad recipe raises ONE
:class:`~mathneuro_edit.errors.InputError` (:mod:`.io`) listing every problem with its dotted path, e.g.
``recipe.yaml: 2 problems: edit.scale: must be a finite number >= 0 (got nan); mask.top_k: must be in (0, 1] (got
1.5), did you mean 0.015?`` (one line).

Privacy: local paths (a base model folder, a data file, an offload folder) are personal. :meth:`Recipe.public_dict`
replaces them by ``"<local>"`` (data files keep their file name: ``"<local>/train.jsonl"``); the recipe hash,
the lock file and the model card only ever see that public form.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, model_validator

from ..util.paths import LOCAL, is_local_path
from .edit_sections import CalibrationConfig, EditConfig, MaskConfig, OutputsConfig, TargetsConfig
from .input_sections import BaseConfig, DataConfig
from .job_sections import ConsistencyConfig, EvaluationConfig, HubConfig, SweepConfig
from .overrides import public_override
from .types import StrictModel

__all__ = ["Recipe", "recipe_sha256", "RELEASE_KEYS", "release_rule"]


# How each recipe key stands to a release of a sweep's setting (``run --from-sweep``): ``same``: it decides the
# statistics, the mask or the stored weights, so the release must have the sweep's value; ``base``: it names the
# base model, which is compared by content (the sweep's ``base_identity``), never by its (redacted) name; ``sweep``:
# the setting the sweep chose, taken from its confirmation; ``free``: where the run computes, what else it writes,
# how it is judged or published, what a card names. A key takes its own entry (list indices dropped:
# ``data.general.0.path`` is ``data.general.path``), else its nearest section's: a new key of ``data``,
# ``calibration``, ``targets``, ``mask`` or ``base`` decides the weights unless listed here as something else.
RELEASE_KEYS: dict[str, str] = {
    "base": "same",  # base.dtype: the dtype the statistics are computed in
    "base.model": "base",
    "base.gguf_file": "base",
    "base.revision": "base",
    "base.device": "free",  # the same mask on a CPU and a GPU (README; reproduce says when rounding differs)
    "base.device_map": "free",
    "base.max_memory": "free",
    "base.offload_folder": "free",
    "base.use_kernels": "free",
    "base.trust_remote_code": "free",
    "base.hub_id": "free",  # what the card names the local base's origin
    "base.hub_revision": "free",
    "data": "same",
    "data.math.hub_dataset": "free",  # the card names a local file's origin; the weights never see it
    "data.general.hub_dataset": "free",
    "calibration": "same",
    "targets": "same",
    "mask": "same",
    "mask.top_k": "sweep",  # a number, or a map per layer band and component (the search's choice)
    "edit": "sweep",  # edit.scale: a number or a map, as the sweep confirmed it
    "outputs": "free",
    "outputs.dtype": "same",  # the values stored: the confirmation tested the weights at this dtype
    "evaluation": "free",
    "hub": "free",
    "sweep": "free",  # the confirmed variant is matched against sweep.variants on its own
    "sweep.search": "free",  # how the setting was found; the setting itself is taken from the confirmation
    "sweep.trials": "free",
    "sweep.bands": "free",
    "sweep.search_seed": "free",
    "consistency": "free",
}


def release_rule(key: str, default: str | None = "same") -> str | None:
    """How the recipe key ``key`` stands to a release from a sweep (:data:`RELEASE_KEYS`): its own entry, else its
    nearest section's, else ``default`` (``same``: a key nobody classified is compared, the safe side).

    Example:
        >>> release_rule("data.general.0.template"), release_rule("data.general.0.hub_dataset")
        ('same', 'free')
    """
    parts = [p for p in key.split(".") if not p.isdigit()]
    while parts:
        found = RELEASE_KEYS.get(".".join(parts))
        if found is not None:
            return found
        parts.pop()
    return default


class Recipe(StrictModel):
    """A full, validated run description. Build it with :func:`load_recipe` or :func:`recipe_from_dict`."""

    base: BaseConfig
    data: DataConfig
    calibration: CalibrationConfig = Field(default_factory=CalibrationConfig)
    targets: TargetsConfig = Field(default_factory=TargetsConfig)
    mask: MaskConfig = Field(default_factory=MaskConfig)
    edit: EditConfig
    outputs: OutputsConfig = Field(default_factory=OutputsConfig)
    evaluation: EvaluationConfig | None = None
    hub: HubConfig | None = None
    sweep: SweepConfig = Field(default_factory=SweepConfig)
    consistency: ConsistencyConfig = Field(default_factory=ConsistencyConfig)

    @model_validator(mode="after")
    def _gguf_base_type(self) -> Recipe:
        if "base" in self.outputs.gguf_types and not self.base.is_gguf:
            raise ValueError(
                "outputs.gguf: base means the GGUF base's own type, but base.model is not a GGUF; "
                "choose a type (F32, F16, BF16, Q8_0, Q6_K, Q5_K_M, Q4_K_M, Q4_0, ...)"
            )
        if self.evaluation is not None and self.evaluation.llama_cpp and not self.outputs.gguf_types:
            raise ValueError("evaluation.llama_cpp evaluates the GGUF files, but outputs.gguf names none; set both")
        return self

    def resolved_dict(self) -> dict[str, Any]:
        """The recipe as plain data with every default explicit (JSON/YAML types only)."""
        return self.model_dump(mode="json")

    def public_dict(self) -> dict[str, Any]:
        """:meth:`resolved_dict` with local paths redacted (``"<local>"``; data files keep their name)."""
        d = self.resolved_dict()
        if is_local_path(d["base"]["model"]):
            d["base"]["model"] = LOCAL
        if d["base"]["offload_folder"] is not None:
            d["base"]["offload_folder"] = LOCAL
        for name in ("data", "evaluation"):
            section = getattr(self, name)
            if section is not None:
                d[name]["math"]["path"] = section.math.public_path()
                for src, out in zip(section.general, d[name]["general"]):
                    out["path"] = src.public_path()
        for variant in (d.get("sweep") or {}).get("variants") or []:  # an override may name a local data file
            variant["set"] = [public_override(o) for o in variant.get("set") or []]
        lm = self.evaluation.lm_eval if self.evaluation is not None else None
        if lm is not None and lm.include_path is not None and is_local_path(lm.include_path):
            d["evaluation"]["lm_eval"]["include_path"] = f"{LOCAL}/{Path(lm.include_path).name}"  # the lock hashes it
        return d

    def local_inputs(self) -> list[tuple[str, Path]]:
        """``(what, path)`` of every local file or folder the recipe reads: the base (folder or ``.gguf`` file),
        each local data file (calibration and evaluation) and the lm-eval task folder. No output may be written
        onto one of them (:func:`mathneuro_edit.util.outdir.check_output`).

        Example:
            >>> from mathneuro_edit.recipe.io import quickstart_recipe
            >>> [what for what, _ in quickstart_recipe().local_inputs()]
            ['base folder']
        """
        found: list[tuple[str, Path]] = []
        if (local := self.base.local_dir()) is not None:  # the organism's folder, or a local path
            found.append(("base file" if self.base.model.lower().endswith(".gguf") else "base folder", local))
        for name in ("data", "evaluation"):
            section = getattr(self, name)
            if section is not None:
                for key, src in [
                    (f"{name}.math", section.math),
                    *[(f"{name}.general.{i}", g) for i, g in enumerate(section.general)],
                ]:
                    if src.kind == "local":
                        found.append((f"data file ({key})", Path(src.path).expanduser()))
        lm = self.evaluation.lm_eval if self.evaluation is not None else None
        if lm is not None and lm.include_path is not None:
            found.append(("lm-eval task folder", Path(lm.include_path).expanduser()))
        return found

    def to_yaml(self) -> str:
        """The resolved recipe as YAML (every default explicit, keys in documentation order)."""
        return yaml.safe_dump(self.resolved_dict(), sort_keys=False, allow_unicode=True)


def recipe_sha256(recipe: Recipe) -> str:
    """SHA-256 of the recipe's canonical JSON (public form: local paths redacted).

    Why the public form: the hash names the recipe in commits and cards without leaking paths, and is the same on
    every machine; the base weights and data contents are pinned separately by the lock's own hashes.

    Example:
        >>> from mathneuro_edit.recipe.io import quickstart_recipe
        >>> len(recipe_sha256(quickstart_recipe()))
        64
    """
    canonical = json.dumps(recipe.public_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()
