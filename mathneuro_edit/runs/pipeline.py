"""The whole pipeline of a recipe: data -> calibrate -> mask -> evaluate -> export -> lock + card.

Output folder (written into a temporary folder beside it and renamed when complete):

```
OUT/
  checkpoint/                      plain HF model folder (+ README.md card, lock, eval.json)   outputs.checkpoint
  checkpoint/model-TYPE.gguf       the same weights as one GGUF file for llama.cpp             outputs.gguf
  adapter/                         stock PEFT SHiRA adapter (+ README.md card, lock, eval.json) outputs.adapter
  mask.safetensors                 the mask (any top_k can be re-derived from the statistics)
  stats/math.stats.safetensors     calibration statistics, one file per set
  stats/general-<i>.stats.safetensors
  eval.json                        before/after evaluation (when the recipe has an evaluation section)
  mathneuro_recipe.lock.yaml       the recipe with every default explicit, plus every hash
```
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..data.sources import load_math_problems, load_set, load_texts, problem_sha256
from ..engine.apply import ReversibleEdit
from ..engine.distributed import calibrate_distributed as calibrate
from ..engine.distributed import local_device
from ..engine.mask import as_mask, find_math_params
from ..engine.targets import find_targets
from ..errors import InputError
from ..evaluation.lm_eval_bridge import LmEvalTask, check_lm_eval_task
from ..evaluation.runner import GeneralTask, MathTask, evaluate
from ..layout import (
    ADAPTER_DIR,
    CHECKPOINT_DIR,
    EVAL_NAME,
    MASK_NAME,
    MATH_STATS_NAME,
    OUTPUT_DIRS,
    STATS_DIR,
    general_stats_name,
)
from ..publish.base_card import base_card_fields
from ..publish.card import build_card, folder_dtype, lock_file_sha256, summarize_edit, write_card
from ..publish.gguf_naming import gguf_general
from ..publish.lock import (
    base_description,
    build_lock,
    output_hashes,
    weights_sha256,
    write_lock,
)
from ..recipe.schema import Recipe
from ..util.console import Stages, markdown_table_text
from ..util.files import write_json_atomic
from ..util.outdir import atomic_dir
from ..weights.adapter import export_adapter
from ..weights.base import base_reference, resolve_base, resolved_revision
from ..weights.checkpoint import open_checkpoint
from ..weights.checkpoint_writer import export_checkpoint
from ..weights.edit_plan import meta_model
from ..weights.gguf_reader import gguf_lock_entry, gguf_output, gguf_source_dtype
from ..weights.gguf_writer import check_gguf
from ..weights.loading import load_model, model_weights
from ..weights.support import adapter_refusal
from .official import official_recipe_mask

__all__ = [
    "RunResult",
    "run_recipe",
    "load_recipe_model",
    "load_stage",
    "calibrate_recipe",
    "eval_tasks",
    "publish_folder",
    "export_recipe",
    "data_records",
    "describe_tasks",
    "evidence_with_overlap",
]


@dataclass
class RunResult:
    """What :func:`run_recipe` wrote and measured."""

    out_dir: Path
    mask_sha256: str
    selected: int
    total: int
    files: dict[str, str] = field(default_factory=dict)  # relative path -> sha256
    eval_results: dict[str, Any] | None = None
    adapter_size_ratio: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain data (``run --json``): the folder, the mask, every output file's sha256 and the evaluation."""
        return {
            "out_dir": str(self.out_dir),
            "mask_sha256": self.mask_sha256,
            "selected": self.selected,
            "total": self.total,
            "files": dict(self.files),
            "eval": self.eval_results,
            "adapter_size_ratio": self.adapter_size_ratio,
        }


def base_lock_fields(recipe: Recipe, folder: Path) -> tuple[str | None, dict | None, dict | None]:
    """The lock's base fields: ``(revision, gguf entry, weights sha256)``.

    A GGUF base records the GGUF file's own hash and the dequantized folder's, which the outputs were made from;
    other bases record the resolved Hub revision (weights are hashed by :func:`~mathneuro_edit.publish.lock.build_lock`).
    """
    if not recipe.base.is_gguf:
        return resolved_revision(folder), None, None
    gguf, revision = gguf_lock_entry(recipe.base)
    return revision, gguf, weights_sha256(folder)


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

    Not for a GGUF base: its adapter holds deltas to the *dequantized GGUF* weights, and the Hub model's own
    weights are other numbers; naming the Hub id would let ``AutoPeftModelForCausalLM`` load the adapter onto
    the wrong weights without an error. Its card names the dequantized folder instead."""
    b = recipe.base
    if b.hub_id is not None and not b.is_gguf:
        return b.hub_id, b.hub_revision
    return None, revision


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


def calibrate_recipe(recipe: Recipe, model: Any, tokenizer: Any, *, progress: bool = True, stages: Any = None):
    """Calibrate the math set and every general set of a recipe.

    Under ``torchrun`` (``WORLD_SIZE > 1``) the samples are split over the ranks and the sums all-reduced
    (:func:`~mathneuro_edit.engine.distributed.calibrate_distributed`); only rank 0 gets the statistics.

    Args:
        stages: a :class:`~mathneuro_edit.util.console.Stages` that announces each set (one stage per set), or ``None``.

    Returns:
        ``(math_stats, [general_stats...], data_records)`` where ``data_records`` is for the lock; on ranks other
        than 0 of a data-parallel run the statistics are ``None``.
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
    return math_stats, general_stats, {"math": [math.record], "general": records}


def load_stage(recipe: Recipe, stages: Any):
    """:func:`load_recipe_model` as a stage: ``[1/n] load organism`` then its parameter count."""
    b = recipe.base
    stages.start(f"load {b.model}" + (f" ({b.gguf_file})" if b.gguf_file else ""))
    model, tok = load_recipe_model(recipe)
    stages.note(f"{sum(p.numel() for p in model.parameters()):,} parameters")
    return model, tok


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


def check_adapter_support(recipe: Recipe, model: Any) -> None:
    """Refuse ``outputs.adapter`` when a target is not a plain ``nn.Linear`` (PEFT cannot express it exactly):
    the family gets a checkpoint only, and the message names the recipe line. ``model`` may be on the meta device."""
    t = recipe.targets
    targets = find_targets(model, include=t.include or None, exclude=t.exclude or None)
    refusal = adapter_refusal(model, targets, str(getattr(model.config, "model_type", "?")))
    if refusal is not None:
        raise InputError(refusal)


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


def run_recipe(
    recipe: Recipe,
    out_dir: str | Path,
    *,
    overwrite: bool = False,
    progress: bool = True,
    echo: Callable[[str], None] = lambda s: None,
    workers: int = 1,
    sweep_evidence: Mapping[str, Any] | None = None,
) -> RunResult:
    """Run a recipe end to end and write its output folder (atomically).

    Args:
        recipe: a validated :class:`~mathneuro_edit.recipe.schema.Recipe`.
        out_dir: the folder to create (see the module docstring for its layout).
        overwrite: replace an existing ``out_dir`` once the new one is complete.
        progress: progress bars.
        echo: receives the stage lines (``[2/7] calibrate math (100 texts)`` and notes; the CLI prints them).
        workers: checkpoint shards written at once (see :func:`~mathneuro_edit.weights.checkpoint_writer.export_checkpoint`).
        sweep_evidence: the sweep's confirmation of this setting (``run --from-sweep``:
            :meth:`~mathneuro_edit.runs.sweep.SweepEvidence.lock_entry`); recorded in the lock with how many of
            this run's evaluation problems are among the sweep's selection and confirmation problems, and stated
            by the card.

    Returns:
        A :class:`RunResult`.

    Example:
        >>> from mathneuro_edit.recipe.io import quickstart_recipe
        >>> run_recipe(quickstart_recipe(), "out/quickstart")  # doctest: +SKIP
    """
    out = Path(out_dir)
    if out.exists() and not overwrite:
        raise InputError(f"{out}: already exists; choose another --out or pass --overwrite")
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise InputError(
            "run is single-process; under torchrun use `mathneuro-edit calibrate` (data-parallel), "
            "then `mask` and `export` in one process (docs/scaling.md)"
        )
    scale = recipe.edit.effective_scale
    base = base_reference(recipe)
    folder = resolve_base(base, revision=recipe.base.revision)  # fails early on a missing/pickle base
    gguf_type, gguf_pre = gguf_output(recipe.base, recipe.outputs.gguf)  # "base": the GGUF base's own type
    if gguf_type is not None:  # an unsupported model/tokenizer fails now, not after calibration
        check_gguf(folder, gguf_type)
    tasks = eval_tasks(recipe)  # a bad evaluation source or lm-eval setting fails now, not after calibration
    for t in tasks:
        if isinstance(t, LmEvalTask):
            check_lm_eval_task(t)  # lm-eval installed and every task known: before the model loads
    if recipe.outputs.adapter:  # from config.json alone: before the weights are read or any forward pass
        meta = meta_model(folder, trust_remote_code=recipe.base.trust_remote_code)
        if meta is not None:
            check_adapter_support(recipe, meta)
    o = recipe.outputs
    stages = Stages(3 + len(recipe.data.general) + bool(tasks) + bool(o.checkpoint) + bool(o.adapter) + 1, echo)
    with atomic_dir(
        out,
        overwrite=overwrite,
        protect=[folder],  # renamed to `out` only when complete
        inputs=recipe.local_inputs(),
    ) as tmp:
        (tmp / STATS_DIR).mkdir()
        model, tokenizer = load_stage(recipe, stages)
        if recipe.outputs.adapter:
            check_adapter_support(recipe, model)  # a family transformers could not build on meta: now
        math_stats, general_stats, records = calibrate_recipe(
            recipe, model, tokenizer, progress=progress, stages=stages
        )
        math_stats.save(tmp / STATS_DIR / MATH_STATS_NAME)
        for i, g in enumerate(general_stats):
            g.save(tmp / STATS_DIR / general_stats_name(i))
        m = recipe.mask
        stages.start(
            f"mask ({m.method}, top_k={m.top_k:g}"
            + (", the released script's rule: one text per forward" if m.reference == "official" else "")
            + ")"
        )
        if m.reference == "official":  # its own batch-1 pass: sums in the model's dtype are not statistics
            mask = official_recipe_mask(recipe, model, tokenizer, progress=progress, stages=stages)
        else:
            # model_weights: offloaded (device_map) parameters are read back from accelerate's offload one at a time
            mask = find_math_params(
                model_weights(model),
                math_stats,
                general_stats,
                top_k=m.top_k,
                method=m.method,
                granularity=m.granularity,
                seed=m.seed,
                progress=progress,
            )
        mask.save(tmp / MASK_NAME)
        selected, total = mask.total()
        stages.note(
            f"{selected:,} of {total:,} target weights ({100 * selected / total:.3f}%), sha256 {mask.sha256[:12]}"
        )

        eval_dict, lm_eval_docs = None, {}
        if tasks:
            stages.start(f"evaluate base and edited (x{scale:g}): {describe_tasks(tasks)}")
            results = evaluate(model, tokenizer, tasks, edit=ReversibleEdit(model, mask, scale), progress=progress)
            eval_dict = results.to_dict(predictions=True)  # the per-problem rows, so a reader can audit the scores
            results.save_json(tmp / EVAL_NAME)
            lm_eval_docs = results.lm_eval_reports()  # lm-eval's own results files, beside every eval.json
            for name, doc in lm_eval_docs.items():
                write_json_atomic(tmp / name, doc)
            stages.note(markdown_table_text(results.to_markdown()))
        n_params = sum(p.numel() for p in model.parameters())
        del model  # the exports stream from the base files: free the in-memory model first

        ratio = None
        revision, gguf, weights = base_lock_fields(recipe, folder)  # the adapter pins the resolved revision
        license_ = base_card_fields(base, recipe.base.revision)  # license fields, language, datasets
        if recipe.outputs.checkpoint:
            stages.start("export checkpoint/" + (f" + model-{gguf_type}.gguf" if gguf_type else ""))
            export_checkpoint(
                folder,
                mask,
                scale,
                tmp / CHECKPOINT_DIR,
                max_shard_size=recipe.outputs.max_shard_size,
                progress=progress,
                workers=workers,
                trust_remote_code=recipe.base.trust_remote_code,
                gguf=gguf_type,
                gguf_name=gguf_name(recipe),
                gguf_pre=gguf_pre,
                gguf_meta=gguf_meta(recipe, n_params, license_, gguf),
                dtype=output_dtype(recipe),
            )
        if recipe.outputs.adapter:
            stages.start("export adapter/ (PEFT SHiRA)")
            named, pinned = adapter_base(recipe, revision)
            adapter = export_adapter(
                folder,
                mask,
                scale,
                tmp / ADAPTER_DIR,
                revision=pinned,
                base_model_name_or_path=named,
                trust_remote_code=recipe.base.trust_remote_code,
            )
            ratio = adapter.size_ratio
            stages.note(f"{100 * ratio:.2f}% of the checkpoint's size")

        stages.start("write lock and model cards")
        files: dict[str, str] = {}
        for sub in OUTPUT_DIRS:
            if (tmp / sub).is_dir():
                files.update({f"{sub}/{k}": v for k, v in output_hashes(tmp / sub).items()})
        sweep = None if sweep_evidence is None else evidence_with_overlap(sweep_evidence, tasks, mask.sha256)
        if sweep is not None and sweep["evaluation_overlap"]["selection"]:
            o_ = sweep["evaluation_overlap"]
            stages.note(
                f"{o_['selection']} of this run's {o_['n']} evaluation problems were used to choose the "
                "setting: its gain is not a confirmation (the card says so)"
            )
        stats_sha = {"math": math_stats.sha256, "general": [g.sha256 for g in general_stats]}
        lock = build_lock(
            recipe,
            base_revision=revision,
            data_records=records,
            stats_sha256=stats_sha,
            mask_sha256=mask.sha256,
            output_files=files,
            base_weights=weights,
            base_gguf=gguf,
            edit_summary=summarize_edit(mask.counts(), model_params=n_params),
            sweep=sweep,
        )
        write_lock(tmp, lock)
        for sub, kind in ((CHECKPOINT_DIR, "checkpoint"), (ADAPTER_DIR, "adapter")):
            if (tmp / sub).is_dir():
                publish_folder(tmp / sub, recipe, lock, kind, mask, n_params, eval_dict, license_, lm_eval_docs)
    return RunResult(out, mask.sha256, selected, total, files, eval_dict, ratio)


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


def data_records(recipe: Recipe) -> dict[str, Any]:
    """The lock's ``data`` section without calibrating: each set is sampled again (cheap: no forward pass)."""
    d = recipe.data
    return {
        "math": [load_texts(d.math, d.samples, d.seed).record],
        "general": [load_texts(g, d.samples, d.seed).record for g in d.general],
    }


def export_recipe(
    recipe: Recipe,
    mask_path: str | Path,
    out_dir: str | Path,
    *,
    adapter: bool = False,
    overwrite: bool = False,
    progress: bool = False,
    workers: int = 1,
) -> Path:
    """The standalone ``export``: the recipe's edit from a saved mask, with the same lock and card as ``run``.

    The folder is what ``run`` writes as ``checkpoint/`` (or ``adapter/``): the model files, the lock (its
    ``outputs`` hold this folder's files under ``checkpoint/`` or ``adapter/``, as in a run's lock) and the card;
    no evaluation (``eval`` writes it). Written atomically.

    Returns:
        The written folder.

    Example:
        >>> export_recipe(quickstart_recipe(), "mask.safetensors", "out/checkpoint")  # doctest: +SKIP
    """
    import math

    mask = as_mask(mask_path)
    scale, base = recipe.edit.effective_scale, base_reference(recipe)
    folder = resolve_base(base, revision=recipe.base.revision)
    sub = ADAPTER_DIR if adapter else CHECKPOINT_DIR
    gguf_type, gguf_pre = gguf_output(recipe.base, None if adapter else recipe.outputs.gguf)
    with atomic_dir(
        out_dir,
        overwrite=overwrite,
        protect=[folder],
        inputs=[*recipe.local_inputs(), ("mask", mask_path if isinstance(mask_path, (str, Path)) else None)],
    ) as tmp:
        inner = tmp / sub
        revision, gguf, weights = base_lock_fields(recipe, folder)  # the adapter pins the resolved revision
        n_params = sum(math.prod(e.shape) for e in open_checkpoint(folder).tensors.values())
        fields = base_card_fields(base, recipe.base.revision)
        if adapter:
            named, pinned = adapter_base(recipe, revision)
            export_adapter(
                folder,
                mask,
                scale,
                inner,
                revision=pinned,
                base_model_name_or_path=named,
                trust_remote_code=recipe.base.trust_remote_code,
            )
        else:
            export_checkpoint(
                folder,
                mask,
                scale,
                inner,
                max_shard_size=recipe.outputs.max_shard_size,
                progress=progress,
                workers=workers,
                trust_remote_code=recipe.base.trust_remote_code,
                gguf=gguf_type,
                gguf_name=gguf_name(recipe),
                gguf_pre=gguf_pre,
                gguf_meta=gguf_meta(recipe, n_params, fields, gguf),
                dtype=output_dtype(recipe),
            )
        for p in sorted(inner.iterdir()):  # the export's files, one level up: this folder IS the model folder
            p.rename(tmp / p.name)
        inner.rmdir()
        files = {f"{sub}/{k}": v for k, v in output_hashes(tmp).items()}
        meta = mask.meta
        stats = {"math": meta.get("math_stats_sha256"), "general": meta.get("general_stats_sha256")}
        lock = build_lock(
            recipe,
            base_revision=revision,
            data_records=data_records(recipe),
            stats_sha256=stats,
            mask_sha256=mask.sha256,
            output_files=files,
            base_weights=weights,
            base_gguf=gguf,
            edit_summary=summarize_edit(mask.counts(), model_params=n_params),
        )
        publish_folder(tmp, recipe, lock, sub, mask, n_params, None, fields)
    return Path(out_dir)
