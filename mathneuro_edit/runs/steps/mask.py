"""From the base to the mask: the ``load``, ``calibrate`` and ``mask`` stages of a recipe, and :class:`Statistics`,
the one layout of the statistics files wherever they are saved."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...data.sources import load_texts
from ...engine.devices import device_record, model_device, selection_device
from ...engine.distributed import calibrate_distributed as calibrate
from ...engine.distributed import local_device
from ...engine.edit_map import Setting, setting_values, show_setting, unmatched_keys, value_for
from ...engine.mask import Mask, find_math_params
from ...engine.stats import ActivationStats
from ...errors import InputError
from ...layout import MATH_STATS_NAME, general_stats_files, general_stats_name
from ...recipe.schema import Recipe
from ...weights.base import base_reference
from ...weights.loading import load_model, model_weights, weights_from_checkpoint
from ..official_mask import official_recipe_mask
from .record import RunRecord

__all__ = [
    "Statistics",
    "load_recipe_model",
    "load_step",
    "calibrate_set",
    "calibrate_step",
    "recipe_masks",
    "compose_masks",
    "data_records",
    "mask_step",
    "checkpoint_weights",
]


@dataclass
class Statistics:
    """The calibration statistics of a recipe's sets (math first) and the lock's record of the data they came
    from (``None`` when loaded from files)."""

    math: ActivationStats | None
    general: list[ActivationStats]
    records: dict[str, Any] | None = None
    # where they were computed (the lock's ``device``): not in the statistics files, whose bytes stay the same
    device: dict[str, str] | None = None

    def save(self, folder: Path) -> list[Path]:
        """``folder/math.stats.safetensors`` and ``folder/general-<i>.stats.safetensors`` (the one layout)."""
        assert self.math is not None, "statistics of a data-parallel rank other than 0 are not saved"
        folder.mkdir(parents=True, exist_ok=True)
        names = [MATH_STATS_NAME, *[general_stats_name(i) for i in range(len(self.general))]]
        for name, stats in zip(names, [self.math, *self.general]):
            stats.save(folder / name)
        return [folder / name for name in names]

    @classmethod
    def load(cls, folder: Path) -> Statistics:
        """What :meth:`save` wrote (the math file must be there)."""
        if not (folder / MATH_STATS_NAME).is_file():
            raise InputError(f"--stats {folder}: no {MATH_STATS_NAME} here; pass the folder written by `calibrate`")
        return cls(
            ActivationStats.load(folder / MATH_STATS_NAME),
            [ActivationStats.load(p) for p in general_stats_files(folder)],
        )

    @property
    def sha256(self) -> dict[str, Any]:
        """The lock's ``stats_sha256``: ``{"math": ..., "general": [...]}``."""
        return {"math": self.math.sha256 if self.math else None, "general": [g.sha256 for g in self.general]}


def load_recipe_model(recipe: Recipe):
    """Load the recipe's base model and tokenizer with its dtype, device and placement settings."""
    b = recipe.base
    device = None  # the recipe's
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and b.device in ("auto", "cuda") and b.device_map is None:
        device = str(local_device())  # data-parallel: one model copy per rank, on that rank's GPU
    return load_model(b, device=device)


def load_step(run: RunRecord) -> None:
    """:func:`load_recipe_model` as a stage (``[1/n] load organism`` then its parameter count): fills the record's
    ``model`` and ``tokenizer``."""
    b = run.recipe.base
    run.start(f"load {b.model}" + (f" ({b.gguf_file})" if b.gguf_file else ""))
    run.model, run.tokenizer = load_recipe_model(run.recipe)
    run.note(f"{sum(p.numel() for p in run.model.parameters()):,} parameters")


def calibrate_set(run: RunRecord, texts: Sequence[str]) -> Any:
    """One set of texts through the model with the recipe's calibration and target settings: what every job's
    statistics are made of (a run's sets, a sweep's cached sets, consistency's random draws).

    Under ``torchrun`` (``WORLD_SIZE > 1``) the samples are split over the ranks and the sums all-reduced
    (:func:`~mathneuro_edit.engine.distributed.calibrate_distributed`); only rank 0 gets the statistics (elsewhere
    ``None``); in a plain process it is :func:`~mathneuro_edit.engine.calibration.calibrate`.
    """
    c, t = run.recipe.calibration, run.recipe.targets
    return calibrate(
        run.model,
        run.tokenizer,
        list(texts),
        max_length=c.max_length,
        batch_size=c.batch_size,
        progress=run.progress,
        include=t.include or None,
        exclude=t.exclude or None,
    )


def calibrate_step(run: RunRecord) -> None:
    """Calibrate the math set and every general set of the recipe (one stage per set, :func:`calibrate_set` each):
    fills the record's ``stats``."""
    d = run.recipe.data
    math = load_texts(d.math, d.samples, d.seed)
    run.start(f"calibrate math ({len(math.texts)} texts)")
    math_stats = calibrate_set(run, math.texts)
    general_stats, records = [], []
    for i, source in enumerate(d.general):  # each general source is its own non-math set
        loaded = load_texts(source, d.samples, d.seed)
        which = f" {i + 1}/{len(d.general)}" if len(d.general) > 1 else ""
        run.start(f"calibrate general{which} ({len(loaded.texts)} texts)")
        general_stats.append(calibrate_set(run, loaded.texts))
        records.append(loaded.record)
    records_ = {"math": [math.record], "general": records}
    run.stats = Statistics(math_stats, general_stats, records_, device_record(model_device(run.model)))


def data_records(recipe: Recipe) -> dict[str, Any]:
    """The lock's ``data`` section without calibrating: each set is sampled again (cheap: no forward pass)."""
    d = recipe.data
    return {
        "math": [load_texts(d.math, d.samples, d.seed).record],
        "general": [load_texts(g, d.samples, d.seed).record for g in d.general],
    }


def mask_step(run: RunRecord, *, weights: Mapping[str, Any] | None = None) -> None:
    """The recipe's mask (method, top_k, granularity, seed) from the record's ``stats`` and the weights:
    ``weights`` (e.g. :func:`checkpoint_weights`: read from the base's files one at a time, no model in memory) or
    the loaded ``model``'s (offloaded ones read back from accelerate's offload one at a time). ``mask.reference:
    official`` makes the released script's own batch-1 pass instead (it needs the model and tokenizer), whose sums
    in the model's dtype are not statistics. Fills the record's ``mask``."""
    m = run.recipe.mask
    run.start(
        f"mask ({m.method}, top_k={show_setting(m.top_k)}"
        + (", the released script's rule: one text per forward" if m.reference == "official" else "")
        + ")"
    )
    if m.reference == "official":
        mask = official_recipe_mask(run.recipe, run.model, run.tokenizer, progress=run.progress, stages=run.stages)
    else:
        weights = weights if weights is not None else model_weights(run.model)
        (mask,) = recipe_masks(run.recipe, run.stats, [m.top_k], weights, progress=run.progress)
    unused = unmatched_keys(run.recipe.edit.effective_scale, list(mask))
    if unused:  # a typo in a scale map would otherwise leave those matrices at the default without a word
        raise InputError(
            f"edit.scale: {', '.join(repr(k) for k in unused)} matches none of the edited matrices "
            f"(named like {next(iter(mask))!r}); check the key"
        )
    run.mask = mask
    selected, total = mask.total()
    run.note(f"{selected:,} of {total:,} target weights ({100 * selected / total:.3f}%), sha256 {mask.sha256[:12]}")


def recipe_masks(
    recipe: Recipe,
    stats: Statistics,
    top_ks: Sequence[Setting],
    weights: Mapping[str, Any],
    *,
    method: str | None = None,
    seed: int | None = None,
    progress: bool = False,
) -> list[Mask]:
    """The recipe's masks (``mask.method``, granularity and seed) at each of ``top_ks`` from one scoring pass over
    the weights: :func:`mask_step`'s selection, a sweep's grid (``method``/``seed``: its control edits) and
    consistency's draws, so the mask rule is written once.

    ``top_ks`` must lie in (0, 1]: the rule's one home is the selection itself
    (:func:`~mathneuro_edit.engine.mask.find_math_params`); a command checks its own option earlier only to
    word the error for that option.

    A top_k map (per layer band and component: :mod:`~mathneuro_edit.engine.edit_map`) takes each matrix's entry
    from the mask at its own value (:func:`compose_masks`); every distinct value comes from the same one pass.
    """
    m = recipe.mask
    values = sorted({v for k in top_ks for v in setting_values(k)})
    masks = find_math_params(
        weights,
        stats.math,
        stats.general,
        top_k=values,
        method=method or m.method,
        granularity=m.granularity,
        seed=m.seed if seed is None else seed,
        progress=progress,
        # the GPU when the recipe's device allows one: the same bits, milliseconds per matrix instead of seconds
        device=selection_device(recipe.base.device),
    )
    by_value = dict(zip(values, masks))
    return [by_value[float(k)] if not isinstance(k, Mapping) else compose_masks(k, by_value) for k in top_ks]


def compose_masks(top_k: Mapping[str, float], by_value: Mapping[float, Mask]) -> Mask:
    """The mask of a top_k map: each matrix's entry from ``by_value``'s mask at the matrix's own top_k
    (:func:`~mathneuro_edit.engine.edit_map.value_for`); the provenance of those masks, with the map as ``top_k``.
    A key of the map that matches no scored matrix (a typo such as ``q_porj``) is refused.
    """
    first = next(iter(by_value.values()))
    unused = unmatched_keys(top_k, list(first))
    if unused:
        raise InputError(
            f"mask.top_k: {', '.join(repr(k) for k in unused)} matches none of the scored matrices "
            f"(named like {next(iter(first))!r}); check the key"
        )
    meta = {**first.meta, "top_k": dict(top_k)}
    return Mask({name: by_value[value_for(top_k, name)][name] for name in first}, meta)


def checkpoint_weights(recipe: Recipe, stats: Statistics) -> Any:
    """The scored weights of the recipe's base read from its files, one tensor per access, in the dtype the
    statistics were computed in (so the scores are those of the loaded model): what the mask needs, without
    loading the model (an 8B model's ``mask`` holds one matrix at a time, not 16 GB)."""
    assert stats.math is not None
    return weights_from_checkpoint(
        base_reference(recipe.base),
        names=stats.math.targets,
        dtype=stats.math.meta.get("dtype"),
        revision=recipe.base.revision,
        trust_remote_code=recipe.base.trust_remote_code,
    )
