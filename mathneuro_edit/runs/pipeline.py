"""The whole pipeline of a recipe: data -> calibrate -> mask -> evaluate -> export -> lock + card.

The output folder (its layout: :mod:`mathneuro_edit.layout`; a GGUF output is ``checkpoint/model-TYPE.gguf``) is
written into a temporary folder beside it and renamed when complete.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from ..engine.mask import as_mask
from ..errors import InputError
from ..layout import MASK_NAME, STATS_DIR
from ..outputs.registry import OUTPUTS, output
from ..publish.lock import output_hashes
from ..recipe.io import as_recipe
from ..recipe.schema import Recipe
from ..util.console import Stages
from ..util.outdir import atomic_dir
from ..weights.base import base_reference, resolve_base
from ..weights.checkpoint import open_checkpoint
from ..weights.edit_plan import meta_model
from .steps.count import stage_count
from .steps.evaluate import eval_tasks, evaluate_step, note_evaluation, save_evaluation
from .steps.export import base_record, export_step, output_checks, output_kinds, prepare_outputs
from .steps.mask import calibrate_step, load_step, mask_step
from .steps.record import RunRecord
from .steps.seal import publish_folders, seal_lock, seal_run

__all__ = ["RunResult", "run_recipe", "export_recipe"]


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
        data = {("eval" if k == "eval_results" else k): v for k, v in asdict(self).items()}
        return {**data, "out_dir": str(self.out_dir)}


def _checks_before_loading(recipe: Recipe, folder: Path, kinds: list[str]) -> list[Any]:
    """Everything that can fail from the recipe and config alone, before the model loads: each output's own check
    (the GGUF's model and tokenizer), the evaluation sources and lm-eval tasks, each output's model check (the
    adapter's support). Returns the evaluation tasks."""
    prepare_outputs(recipe, folder, kinds)  # an unsupported model/tokenizer fails now, not after calibration
    tasks = eval_tasks(recipe)  # a bad evaluation source or lm-eval setting fails now, not after calibration
    checks = output_checks(kinds)
    if checks:  # from config.json alone: before the weights are read or any forward pass
        meta = meta_model(folder, trust_remote_code=recipe.base.trust_remote_code)
        for check in checks if meta is not None else ():
            check(recipe, meta)
    return tasks


def _output_bytes(recipe: Recipe) -> int | None:
    """The run folder's size from the plan (:func:`~mathneuro_edit.runs.plan.plan_recipe`, config only): the
    statistics of every set, the mask, the checkpoint at ``outputs.dtype`` and the adapter; a GGUF adds its own
    size when it is the file that fails. ``None`` when the plan cannot tell (then what was written counts).

    Why: a run that filled the disk asked to free what it had written so far, less what its removal freed: "free
    1 MB" when 5.4 MB were missing (issue 41, round 3).
    """
    from .plan import plan_recipe

    try:
        p = plan_recipe(recipe)
    except Exception:  # noqa: BLE001 - only a full disk's message depends on it: never let it stop the run
        return None
    general_sets = int(p.settings.get("general_sets") or 0)
    asked = sum(getattr(p, f"{o.name}_bytes", 0) for o in OUTPUTS.values() if o.is_asked(recipe))
    return (1 + general_sets) * p.stats_bytes + p.mask_bytes + asked


def run_recipe(
    recipe: Recipe | str | Path,
    out_dir: str | Path,
    *,
    overwrite: bool = False,
    progress: bool = True,
    echo: Callable[[str], None] = lambda s: None,
    workers: int = 1,
    sweep_evidence: Mapping[str, Any] | None = None,
    inputs: Sequence[tuple[str, str | Path]] = (),
    check_mask: Callable[[str], str | None] | None = None,
) -> RunResult:
    """Run a recipe end to end and write its output folder (atomically): the composition of the steps
    (:mod:`.steps`).

    Args:
        out_dir: the folder to create (its layout: :mod:`mathneuro_edit.layout`).
        overwrite: replace an existing ``out_dir`` once the new one is complete.
        echo: receives the stage lines (``[2/7] calibrate math (100 texts)`` and notes; the CLI prints them).
        workers: checkpoint shards written at once (see :func:`~mathneuro_edit.weights.checkpoint_writer.export_checkpoint`).
        sweep_evidence: the sweep's confirmation of this setting (``run --from-sweep``:
            :meth:`~mathneuro_edit.runs.sweep.evidence.SweepEvidence.lock_entry`); recorded in the lock with how many of
            this run's evaluation problems are among the sweep's selection and confirmation problems, and stated
            by the card.
        inputs: ``(what, path)`` of the command's inputs besides the recipe's own (``run --from-sweep``: the
            sweep folder): the output may not be, contain or lie inside any of them.
        check_mask: called with the mask's sha256 as soon as it is computed; a line it returns refuses the run
            (:class:`~mathneuro_edit.errors.InputError`) and nothing is written (``run --from-sweep``:
            :func:`~mathneuro_edit.runs.sweep.evidence.mask_refusal`, the mask the confirmation tested).
    """
    inputs = [*inputs, *([("recipe", recipe)] if isinstance(recipe, (str, Path)) else [])]  # never written over
    recipe = as_recipe(recipe)
    out = Path(out_dir)
    if out.exists() and not overwrite:
        raise InputError(f"{out}: already exists; choose another --out or pass --overwrite")
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise InputError(
            "run is single-process; under torchrun use `mathneuro-edit calibrate` (data-parallel), "
            "then `mask` and `export` in one process (docs/scaling.md)"
        )
    folder = resolve_base(base_reference(recipe.base), revision=recipe.base.revision)  # fails early: missing/pickle
    kinds = output_kinds(recipe)
    tasks = _checks_before_loading(recipe, folder, kinds)
    steps = ("load", "calibrate", "mask", "evaluate", "export", "seal")
    stages = Stages(stage_count(recipe, steps, tasks=tasks, kinds=kinds), echo)
    # what a full disk's message asks to free: the whole output, not what was written (the plan, only then)
    needed = partial(_output_bytes, recipe)
    run = RunRecord(recipe, stages, progress, workers, kinds=kinds, tasks=tasks, sweep_evidence=sweep_evidence)
    with atomic_dir(
        out, overwrite=overwrite, protect=[folder], inputs=[*recipe.local_inputs(), *inputs], needed=needed
    ) as tmp:
        load_step(run)
        for check in output_checks(kinds):
            check(recipe, run.model)  # a family transformers could not build on meta: now
        calibrate_step(run)
        run.stats.save(tmp / STATS_DIR)
        mask_step(run)
        if check_mask is not None and (refused := check_mask(run.mask.sha256)):
            raise InputError(refused)  # atomic_dir discards the temporary folder: no output is written
        run.mask.save(tmp / MASK_NAME)
        if tasks:
            evaluate_step(run)
            save_evaluation(run, tmp)
            note_evaluation(run)
        run.n_params = sum(p.numel() for p in run.model.parameters())
        run.model = None  # the exports stream from the base files: free the in-memory model first
        run.base = base_record(recipe, folder)
        for kind in kinds:
            export_step(run, tmp / output(kind).folder, kind)
        files = seal_run(run, tmp)
    selected, total = run.mask.total()
    return RunResult(out, run.mask.sha256, selected, total, files, run.evaluation[0], run.size_ratio)


def export_recipe(
    recipe: Recipe,
    mask_path: str | Path,
    out_dir: str | Path,
    *,
    kind: str | None = None,
    overwrite: bool = False,
    progress: bool = False,
    workers: int = 1,
    echo: Callable[[str], None] = lambda s: None,
) -> Path:
    """The standalone ``export``: the recipe's edit from a saved mask, with the same lock and card as ``run``.

    The folder is what ``run`` writes as ``checkpoint/`` (or ``adapter/``): the model files, the lock (its
    ``outputs`` hold this folder's files under ``checkpoint/`` or ``adapter/``, as in a run's lock) and the card;
    no evaluation (``eval`` writes it). Written atomically. ``echo`` receives the stage lines, as ``run``'s
    (``[1/2] export checkpoint/ + model-Q8_0.gguf``, ``[2/2] write lock and model card``).
    """
    import math

    mask = as_mask(mask_path)
    folder = resolve_base(base_reference(recipe.base), revision=recipe.base.revision)
    out = output(kind) if kind is not None else next(iter(OUTPUTS.values()))  # default: the checkpoint
    kind, sub = out.name, out.folder
    prepare_outputs(recipe, folder, [kind])  # the GGUF files are written with the output they are made from
    stages = Stages(stage_count(recipe, ("export", "seal"), kinds=[kind]), echo)
    with atomic_dir(
        out_dir,
        overwrite=overwrite,
        protect=[folder],
        inputs=[*recipe.local_inputs(), ("mask", mask_path if isinstance(mask_path, (str, Path)) else None)],
    ) as tmp:
        inner = tmp / sub
        run = RunRecord(recipe, stages, progress, workers, kinds=[kind], mask=mask)
        run.base = base_record(recipe, folder)
        run.n_params = sum(math.prod(e.shape) for e in open_checkpoint(folder).tensors.values())
        export_step(run, inner, kind)
        for p in sorted(inner.iterdir()):  # the export's files, one level up: this folder IS the model folder
            p.rename(tmp / p.name)
        inner.rmdir()
        run.start("write lock and model card")
        files = {f"{sub}/{k}": v for k, v in output_hashes(tmp).items()}
        publish_folders(run, seal_lock(run, files), [(kind, tmp)], None)
    return Path(out_dir)
