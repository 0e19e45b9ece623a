"""The stages of a recipe, one function each: what ``run``, ``export``, ``calibrate``, ``mask``, ``eval``,
``consistency`` and ``sweep`` compose (:mod:`.pipeline`, :mod:`.stages`), so no stage is written twice.

load -> calibrate -> mask -> evaluate -> export -> seal (lock + cards). Each step takes the validated recipe and
what the step before it returned, announces itself on a :class:`~mathneuro_edit.util.console.Stages` and writes
nothing of its own unless it is given a folder; the statistics have one layout (:class:`Statistics`:
``math.stats.safetensors``, ``general-<i>.stats.safetensors``) wherever they are saved. How many stage lines a
composition announces comes from the steps it lists (:func:`stage_count`), not from a hand count.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..data.sources import load_math_problems, load_set, load_texts, problem_sha256
from ..engine.apply import ReversibleEdit
from ..engine.distributed import calibrate_distributed as calibrate
from ..engine.distributed import local_device
from ..engine.mask import Mask, find_math_params
from ..engine.stats import ActivationStats
from ..engine.targets import find_targets
from ..errors import InputError
from ..evaluation.lm_eval_bridge import LmEvalTask
from ..evaluation.results import EvalResults
from ..evaluation.runner import GeneralTask, MathTask, evaluate
from ..layout import (
    EVAL_NAME,
    MATH_STATS_NAME,
    OUTPUT_DIRS,
    general_stats_files,
    general_stats_name,
)
from ..publish.base_card import base_card_fields
from ..publish.card import build_card, folder_dtype, lock_file_sha256, summarize_edit, write_card
from ..publish.gguf_naming import gguf_general
from ..publish.lock import base_description, build_lock, output_hashes, weights_sha256, write_lock
from ..publish.outputs import output
from ..recipe.schema import Recipe
from ..util.console import Stages, markdown_table_text
from ..util.files import write_json_atomic
from ..weights.adapter import export_adapter
from ..weights.base import base_reference, resolved_revision
from ..weights.checkpoint_writer import export_checkpoint
from ..weights.gguf_reader import gguf_lock_entry, gguf_source_dtype
from ..weights.gguf_writer import check_gguf, gguf_filename, gguf_public_name, write_gguf
from ..weights.loading import load_model, model_weights, weights_from_checkpoint
from ..weights.support import adapter_refusal
from .official import official_recipe_mask

__all__ = [
    "Statistics",
    "BaseRecord",
    "stage_count",
    "load_recipe_model",
    "load_step",
    "calibrate_step",
    "mask_step",
    "checkpoint_weights",
    "eval_tasks",
    "describe_tasks",
    "evaluate_step",
    "export_step",
    "seal_lock",
    "seal_run",
    "publish_folder",
    "base_record",
    "data_records",
    "evidence_with_overlap",
    "output_dtype",
    "check_adapter_support",
]


def stage_count(recipe: Recipe, steps: Sequence[str], *, tasks: Sequence[Any] = (), kinds: Sequence[str] = ()) -> int:
    """How many ``[i/n]`` lines the listed steps announce: load 1, calibrate one per set, mask 1, evaluate 1 (when
    there are tasks), export one per output kind, seal 1."""
    lines = {
        "load": 1,
        "calibrate": 1 + len(recipe.data.general),
        "mask": 1,
        "evaluate": int(bool(tasks)),
        "export": len(kinds),
        "seal": 1,
    }
    return sum(lines[s] for s in steps)


@dataclass
class Statistics:
    """The calibration statistics of a recipe's sets (math first) and the lock's record of the data they came
    from (``None`` when loaded from files)."""

    math: ActivationStats | None
    general: list[ActivationStats]
    records: dict[str, Any] | None = None

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
    device = b.device
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and device in ("auto", "cuda") and b.device_map is None:
        device = str(local_device())  # data-parallel: one model copy per rank, on that rank's GPU
    return load_model(
        base_reference(recipe),
        dtype=b.dtype,
        device=device,
        device_map=b.device_map,
        max_memory=b.max_memory,
        offload_folder=b.offload_folder,
        trust_remote_code=b.trust_remote_code,
        revision=b.revision,
    )


def load_step(recipe: Recipe, stages: Stages):
    """:func:`load_recipe_model` as a stage: ``[1/n] load organism`` then its parameter count."""
    b = recipe.base
    stages.start(f"load {b.model}" + (f" ({b.gguf_file})" if b.gguf_file else ""))
    model, tok = load_recipe_model(recipe)
    stages.note(f"{sum(p.numel() for p in model.parameters()):,} parameters")
    return model, tok


def calibrate_step(
    recipe: Recipe, model: Any, tokenizer: Any, *, progress: bool = True, stages: Stages | None = None
) -> Statistics:
    """Calibrate the math set and every general set of a recipe (one stage per set).

    Under ``torchrun`` (``WORLD_SIZE > 1``) the samples are split over the ranks and the sums all-reduced
    (:func:`~mathneuro_edit.engine.distributed.calibrate_distributed`); only rank 0 gets the statistics (elsewhere
    ``math`` is ``None``).
    """
    d, c, t = recipe.data, recipe.calibration, recipe.targets
    kwargs = dict(
        max_length=c.max_length,
        batch_size=c.batch_size,
        progress=progress,
        include=t.include or None,
        exclude=t.exclude or None,
    )
    math = load_texts(d.math, d.samples, d.seed)
    if stages is not None:
        stages.start(f"calibrate math ({len(math.texts)} texts)")
    math_stats = calibrate(model, tokenizer, math.texts, **kwargs)
    general_stats, records = [], []
    for i, source in enumerate(d.general):  # each general source is its own non-math set
        loaded = load_texts(source, d.samples, d.seed)
        if stages is not None:
            which = f" {i + 1}/{len(d.general)}" if len(d.general) > 1 else ""
            stages.start(f"calibrate general{which} ({len(loaded.texts)} texts)")
        general_stats.append(calibrate(model, tokenizer, loaded.texts, **kwargs))
        records.append(loaded.record)
    return Statistics(math_stats, general_stats, {"math": [math.record], "general": records})


def mask_step(
    recipe: Recipe,
    stats: Statistics,
    *,
    weights: Mapping[str, Any] | None = None,
    model: Any = None,
    tokenizer: Any = None,
    progress: bool = True,
    stages: Stages | None = None,
) -> Mask:
    """The recipe's mask (method, top_k, granularity, seed) from the statistics and the weights: ``weights`` (e.g.
    :func:`checkpoint_weights`: read from the base's files one at a time, no model in memory) or a loaded
    ``model``'s (offloaded ones read back from accelerate's offload one at a time). ``mask.reference: official``
    makes the released script's own batch-1 pass instead (it needs ``model`` and ``tokenizer``), whose sums in the
    model's dtype are not statistics. Announces the stage and notes the selected count."""
    m = recipe.mask
    if stages is not None:
        stages.start(
            f"mask ({m.method}, top_k={m.top_k:g}"
            + (", the released script's rule: one text per forward" if m.reference == "official" else "")
            + ")"
        )
    if m.reference == "official":
        mask = official_recipe_mask(recipe, model, tokenizer, progress=progress, stages=stages)
    else:
        mask = find_math_params(
            weights if weights is not None else model_weights(model),
            stats.math,
            stats.general,
            top_k=m.top_k,
            method=m.method,
            granularity=m.granularity,
            seed=m.seed,
            progress=progress,
        )
    if stages is not None:
        selected, total = mask.total()
        stages.note(
            f"{selected:,} of {total:,} target weights ({100 * selected / total:.3f}%), sha256 {mask.sha256[:12]}"
        )
    return mask


def checkpoint_weights(recipe: Recipe, stats: Statistics) -> Any:
    """The scored weights of the recipe's base read from its files, one tensor per access, in the dtype the
    statistics were computed in (so the scores are those of the loaded model): what the mask needs, without
    loading the model (an 8B model's ``mask`` holds one matrix at a time, not 16 GB)."""
    assert stats.math is not None
    return weights_from_checkpoint(
        base_reference(recipe),
        names=stats.math.targets,
        dtype=stats.math.meta.get("dtype"),
        revision=recipe.base.revision,
        trust_remote_code=recipe.base.trust_remote_code,
    )


def eval_tasks(recipe: Recipe) -> list[Any]:
    """The evaluation tasks of a recipe (math exact match + general loss/KL), or ``[]`` without evaluation."""
    ev = recipe.evaluation
    if ev is None:
        return []
    problems = load_math_problems(ev.math, ev.samples + ev.n_shot, ev.seed)
    # the first n_shot sampled problems are the worked examples; the rest are evaluated
    shots, problems = problems[: ev.n_shot], problems[ev.n_shot :]
    texts, _ = load_set(ev.general, ev.samples, ev.seed)
    lm = ev.lm_eval
    harness = (
        []
        if lm is None
        else [
            LmEvalTask(
                "lm_eval",
                tasks=tuple(lm.tasks),
                limit=lm.limit,
                include_path=lm.include_path,
                num_fewshot=lm.num_fewshot,
                apply_chat_template=lm.apply_chat_template,
                fewshot_as_multiturn=lm.fewshot_as_multiturn,
                batch_size=lm.batch_size,
            )
        ]
    )
    keys = ("question", "answer", "prefill")
    return harness + [
        MathTask(
            "math",
            [{k: p[k] for k in keys if k in p} for p in problems],
            n_shot=ev.n_shot,
            shots=[{k: p[k] for k in keys if k in p} for p in shots],
            max_new_tokens=ev.max_new_tokens,
            chat_template=ev.chat_template,
            prompt_style=ev.prompt_style,
        ),
        GeneralTask("general", texts, max_length=recipe.calibration.max_length),
    ]


def describe_tasks(tasks: list[Any]) -> str:
    """``100 math problems, 100 general texts`` (what an evaluation stage runs)."""
    parts = []
    for t in tasks:
        if isinstance(t, MathTask):
            parts.append(f"{len(t.problems)} {t.name} problems")
        elif isinstance(t, GeneralTask):
            parts.append(f"{len(t.texts)} {t.name} texts")
        else:
            parts.append(f"{t.name} (lm-eval)")
    return ", ".join(parts)


def evaluate_step(
    recipe: Recipe,
    model: Any,
    tokenizer: Any,
    tasks: list[Any],
    mask: Mask | None,
    *,
    progress: bool = True,
    stages: Stages | None = None,
) -> EvalResults:
    """Evaluate ``tasks`` on the base and, with ``mask``, on the edit at the recipe's scale (paired, with KL)."""
    edit: Any = ReversibleEdit(model, mask, recipe.edit.effective_scale) if mask is not None else None
    if stages is not None:
        what = f"base and edited (x{recipe.edit.effective_scale:g})" if edit else "the base"
        stages.start(f"evaluate {what}: {describe_tasks(tasks)}")
    return evaluate(model, tokenizer, tasks, edit=edit, progress=progress)


def save_evaluation(results: EvalResults, folder: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """``folder/eval.json`` (with the per-problem rows, so a reader can audit the scores) and lm-eval's own results
    files beside it; returns ``(eval dict, {lm-eval file name: document})`` for the output folders."""
    eval_dict = results.to_dict(predictions=True)
    results.save_json(folder / EVAL_NAME)
    lm_eval_docs = results.lm_eval_reports()
    for name, doc in lm_eval_docs.items():
        write_json_atomic(folder / name, doc)
    return eval_dict, lm_eval_docs


def check_adapter_support(recipe: Recipe, model: Any) -> None:
    """Refuse ``outputs.adapter`` when a target is not a plain ``nn.Linear`` (PEFT cannot express it exactly):
    the family gets a checkpoint only, and the message names the recipe line. ``model`` may be on the meta device."""
    t = recipe.targets
    targets = find_targets(model, include=t.include or None, exclude=t.exclude or None)
    refusal = adapter_refusal(model, targets, str(getattr(model.config, "model_type", "?")))
    if refusal is not None:
        raise InputError(refusal)


@dataclass(frozen=True)
class BaseRecord:
    """What the exports, the lock and the cards record about the base: its resolved folder, revision (the adapter
    pins it), a GGUF base's entry and weights hash, and its card's license fields."""

    folder: Path
    revision: str | None
    gguf: dict | None
    weights: dict | None
    card_fields: Any


def base_record(recipe: Recipe, folder: Path) -> BaseRecord:
    """A GGUF base records the GGUF file's own hash and the dequantized folder's, which the outputs were made from;
    other bases record the resolved Hub revision (weights are hashed by :func:`~mathneuro_edit.publish.lock.build_lock`)."""
    if recipe.base.is_gguf:
        gguf, revision = gguf_lock_entry(recipe.base)
        weights = weights_sha256(folder)
    else:
        revision, gguf, weights = resolved_revision(folder), None, None
    return BaseRecord(folder, revision, gguf, weights, base_card_fields(base_reference(recipe), recipe.base.revision))


def gguf_meta(recipe: Recipe, n_params: int, fields: dict | None, gguf: dict | None = None) -> dict[str, Any]:
    """The ``general.*`` metadata of the run's GGUF, from the same public names the lock and the GGUF repo use
    (:func:`~mathneuro_edit.publish.card.gguf_general`); ``gguf`` is a GGUF base's lock entry (its own names)."""
    public = recipe.public_dict()
    local = recipe.base.local_dir()
    base: dict[str, Any] = {"model": public["base"]["model"], **({"gguf": gguf} if gguf else {})}
    if local is not None and local.is_dir():
        base["description"] = base_description(local)
    return gguf_general(
        {
            "base": base,
            "recipe": {"edit": public["edit"], "base": public["base"]},
            "edit_summary": {"model_params": n_params},
        },
        fields,
    )


def output_dtype(recipe: Recipe) -> str | None:
    """The checkpoint's dtype (``outputs.dtype``): as set; ``auto`` is the base's own (``None``: every tensor
    keeps its type), or for a GGUF base its source's (:func:`~mathneuro_edit.weights.gguf_reader.gguf_source_dtype`:
    bfloat16 unless the GGUF holds F32/F16/BF16 weights), never the float32 of its dequantized folder."""
    if recipe.outputs.dtype != "auto":
        return recipe.outputs.dtype
    return gguf_source_dtype(recipe.base) if recipe.base.is_gguf else None


def gguf_name(recipe: Recipe) -> str:
    """What a GGUF output's ``general.name`` starts with: ``base.hub_id`` when set, else ``base.model`` (a local
    path becomes "local model" in :func:`~mathneuro_edit.weights.checkpoint_writer.export_checkpoint`)."""
    return recipe.base.hub_id or recipe.base.model


def adapter_base(recipe: Recipe, revision: str | None) -> tuple[str | None, str | None]:
    """``(base_model_name_or_path, revision)`` an adapter records: ``base.hub_id`` (and ``hub_revision``) for a
    local folder that names its Hub origin; ``(None, revision)`` for the default (the Hub id of a Hub base).

    A GGUF base's adapter names no Hub id: it was computed against the dequantized GGUF, whose
    weights are other numbers; naming the Hub id would let ``AutoPeftModelForCausalLM`` load the adapter onto
    the wrong weights without an error. Its card names the dequantized folder instead."""
    b = recipe.base
    if b.hub_id is not None and not b.is_gguf:
        return b.hub_id, b.hub_revision
    return None, revision


def export_step(
    recipe: Recipe,
    base: BaseRecord,
    mask: Mask,
    dest: Path,
    kind: str,
    *,
    n_params: int,
    gguf: tuple[str | None, str | None] = (None, None),
    progress: bool = True,
    workers: int = 1,
    stages: Stages | None = None,
) -> float | None:
    """Write one output of the recipe's edit into ``dest``: ``"checkpoint"`` (streamed, + ``model-TYPE.gguf`` when
    ``gguf`` = ``(type, tokenizer.ggml.pre)`` names a type) or ``"adapter"`` (PEFT SHiRA). Returns the adapter's
    size as a fraction of the checkpoint's (``None`` for a checkpoint)."""
    scale = recipe.edit.effective_scale
    gguf_type, gguf_pre = gguf
    if kind == "checkpoint":
        if stages is not None:
            stages.start("export checkpoint/" + (f" + model-{gguf_type}.gguf" if gguf_type else ""))
        name = gguf_public_name(gguf_name(recipe))
        if gguf_type is not None:  # fail before the long steps: type, package, architecture, tokenizer
            check_gguf(base.folder, gguf_type, name=name)
        export_checkpoint(
            base.folder,
            mask,
            scale,
            dest,
            max_shard_size=recipe.outputs.max_shard_size,
            progress=progress,
            workers=workers,
            trust_remote_code=recipe.base.trust_remote_code,
            dtype=output_dtype(recipe),
        )
        if gguf_type is not None:  # the sibling writer, from the finished checkpoint folder (checked above)
            meta = gguf_meta(recipe, n_params, base.card_fields, base.gguf)
            write_gguf(dest, dest / gguf_filename(gguf_type), gguf_type, name=name, pre=gguf_pre, meta=meta)
        return None
    if stages is not None:
        stages.start("export adapter/ (PEFT SHiRA)")
    named, pinned = adapter_base(recipe, base.revision)
    adapter = export_adapter(
        base.folder,
        mask,
        scale,
        dest,
        revision=pinned,
        base_model_name_or_path=named,
        trust_remote_code=recipe.base.trust_remote_code,
    )
    if stages is not None:
        stages.note(f"{100 * adapter.size_ratio:.2f}% of the checkpoint's size")
    return adapter.size_ratio


def seal_run(
    folder: Path,
    recipe: Recipe,
    base: BaseRecord,
    mask: Mask,
    stats: Statistics,
    kinds: Sequence[str],
    *,
    n_params: int,
    evaluation: tuple[dict | None, Mapping[str, Any]] = (None, {}),
    tasks: Sequence[Any] = (),
    sweep_evidence: Mapping[str, Any] | None = None,
    stages: Stages | None = None,
) -> dict[str, str]:
    """The run folder's lock (every output file hashed, under its subfolder) and, in each output's folder, the lock,
    the evaluation and the model card. Returns the hashed files (relative path -> sha256)."""
    if stages is not None:
        stages.start("write lock and model cards")
    files: dict[str, str] = {}
    for sub in OUTPUT_DIRS:
        if (folder / sub).is_dir():
            files.update({f"{sub}/{k}": v for k, v in output_hashes(folder / sub).items()})
    sweep = None if sweep_evidence is None else evidence_with_overlap(sweep_evidence, list(tasks), mask.sha256)
    if sweep is not None and sweep["evaluation_overlap"]["selection"] and stages is not None:
        o = sweep["evaluation_overlap"]
        stages.note(
            f"{o['selection']} of this run's {o['n']} evaluation problems were used to choose the "
            "setting: its gain is not a confirmation (the card says so)"
        )
    assert stats.records is not None, "a run's statistics carry their data records"
    lock = seal_lock(
        recipe, base, mask, records=stats.records, stats_sha256=stats.sha256, files=files, n_params=n_params,
        sweep=sweep,
    )  # fmt: skip
    write_lock(folder, lock)
    eval_dict, lm_eval_docs = evaluation
    for kind in kinds:
        sub = folder / output(kind).folder
        publish_folder(sub, recipe, lock, kind, mask, n_params, eval_dict, base.card_fields, lm_eval_docs)
    return files


def seal_lock(
    recipe: Recipe,
    base: BaseRecord,
    mask: Mask,
    *,
    records: dict[str, Any],
    stats_sha256: dict[str, Any],
    files: dict[str, str],
    n_params: int,
    sweep: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The lock of a run or an export: the recipe, every input's and output's hash and the edit's summary."""
    return build_lock(
        recipe,
        base_revision=base.revision,
        data_records=records,
        stats_sha256=stats_sha256,
        mask_sha256=mask.sha256,
        output_files=files,
        base_weights=base.weights,
        base_gguf=base.gguf,
        edit_summary=summarize_edit(mask.counts(), model_params=n_params),
        sweep=sweep,
    )


def publish_folder(
    folder: Path,
    recipe: Recipe,
    lock: dict,
    kind: str,
    mask: Any,
    n_params: int,
    eval_dict: dict | None,
    license_: str | dict | None,
    lm_eval_docs: Mapping[str, Any] | None = None,
) -> None:
    """Write the lock, eval.json (and lm-eval's own results files) and the model card into one output folder."""
    write_lock(folder, lock)
    if eval_dict is not None:
        write_json_atomic(folder / EVAL_NAME, eval_dict)
    for name, doc in (lm_eval_docs or {}).items():
        write_json_atomic(folder / name, doc)
    hub_id = recipe.base.hub_id or (None if recipe.base.local_dir() is not None else recipe.base.model)
    card = build_card(
        recipe=recipe,
        lock=lock,
        base_model_id=hub_id,
        kind=kind,
        edit_summary=summarize_edit(mask.counts(), model_params=n_params),
        eval_results=eval_dict,
        license=license_,
        lock_sha256=lock_file_sha256(folder),
        weights_dtype=folder_dtype(folder),
    )
    write_card(folder, card)


def evidence_with_overlap(evidence: Mapping[str, Any], tasks: list[Any], mask_sha256: str) -> dict[str, Any]:
    """A sweep's lock entry plus ``evaluation_overlap``: how many of the run's own math evaluation problems (by
    prompt sha256) are among the sweep's selection and confirmation problems, and whether the run's mask is the one
    the confirmation tested."""
    mine = [problem_sha256(p) for t in tasks if isinstance(t, MathTask) for p in t.problems]
    sel = set(evidence["selection"]["problems_sha256"])
    conf = set(evidence["confirmation"].get("problems_sha256") or ())
    out = dict(evidence)
    out["evaluation_overlap"] = {
        "n": len(mine),
        "selection": sum(h in sel for h in mine),
        "confirmation": sum(h in conf for h in mine),
    }
    out["mask_matches_confirmation"] = evidence["confirmation"].get("mask_sha256") == mask_sha256
    return out


def data_records(recipe: Recipe) -> dict[str, Any]:
    """The lock's ``data`` section without calibrating: each set is sampled again (cheap: no forward pass)."""
    d = recipe.data
    return {
        "math": [load_texts(d.math, d.samples, d.seed).record],
        "general": [load_texts(g, d.samples, d.seed).record for g in d.general],
    }


def note_evaluation(results: EvalResults, stages: Stages) -> None:
    """The evaluation's table under its stage line."""
    stages.note(markdown_table_text(results.to_markdown()))
