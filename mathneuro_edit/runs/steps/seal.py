"""The ``seal`` stage of a recipe: the lock and, in each output's folder, the lock, the evaluation and the card.

The lock records every file written beside the outputs too (``run_files``: the mask, the statistics, the
evaluation, the cards; :mod:`mathneuro_edit.publish.run_files`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...data.sources import problem_sha256
from ...evaluation.tasks import MathTask
from ...layout import EVAL_NAME
from ...outputs.common import folder_dtype
from ...outputs.gguf import read_gguf_eval, read_survival
from ...outputs.registry import output, output_dirs
from ...publish.card import CardSource, build_card, has_chat_template, lock_file_sha256, summarize_edit
from ...publish.lock import build_lock, output_hashes
from ...publish.run_files import RUN_FILES, present_run_files, seal_cards
from ...util.files import write_json_atomic
from .mask import data_records
from .record import RunRecord

__all__ = ["seal_run", "seal_lock", "publish_folders", "evidence_with_overlap", "without_problem_lists"]


def seal_run(run: RunRecord, folder: Path) -> dict[str, str]:
    """The run folder's lock (every output file hashed, under its subfolder) and, in each output's folder
    (the record's ``kinds``), the lock, the evaluation and the model card. Returns the hashed files (relative
    path -> sha256)."""
    run.start("write lock and model cards")
    files: dict[str, str] = {}
    for sub in output_dirs():
        if (folder / sub).is_dir():
            files.update({f"{sub}/{k}": v for k, v in output_hashes(folder / sub).items()})
    evidence = run.sweep_evidence
    sweep = None if evidence is None else evidence_with_overlap(evidence, list(run.tasks), run.mask.sha256)
    if sweep is not None and sweep["evaluation_overlap"]["selection"]:
        o = sweep["evaluation_overlap"]
        run.note(
            f"{o['selection']} of this run's {o['n']} evaluation problems were used to choose the "
            "setting: its gain is not a confirmation (the card says so)"
        )
    lock = seal_lock(run, files, sweep=sweep)
    publish_folders(run, lock, [(kind, folder / output(kind).folder) for kind in run.kinds], folder)
    return files


def seal_lock(run: RunRecord, files: dict[str, str], *, sweep: dict[str, Any] | None = None) -> dict[str, Any]:
    """The lock of a run or an export: the recipe, every input's and output's hash, the edit's summary and, for a
    run, the device its statistics were computed on. A run's data records and statistics hashes come with its
    statistics; an export (no statistics in the record) samples the data again (cheap: no forward pass) and takes
    the statistics hashes its mask names."""
    base, mask, stats = run.base, run.mask, run.stats
    if stats is not None:
        assert stats.records is not None, "a run's statistics carry their data records"
        records, stats_sha256, device = stats.records, stats.sha256, stats.device
    else:
        meta = mask.meta
        records = data_records(run.recipe)
        stats_sha256 = {"math": meta.get("math_stats_sha256"), "general": meta.get("general_stats_sha256")}
        device = None
    return build_lock(
        run.recipe,
        base_revision=base.revision,
        data_records=records,
        stats_sha256=stats_sha256,
        mask_sha256=mask.sha256,
        output_files=files,
        base_weights=base.weights,
        base_gguf=base.gguf,
        edit_summary=summarize_edit(mask.counts(), model_params=run.n_params),
        sweep=sweep,
        device=device,
    )


def publish_folders(run: RunRecord, lock: dict, folders: list[tuple[str, Path]], root: Path | None) -> dict[str, Any]:
    """Write eval.json and lm-eval's own results files (the record's ``evaluation``) into each output's folder
    (``folders``: ``(kind, folder)``), then the lock (into ``root``, a run folder, and each output folder) and each
    model card, the lock's ``run_files`` holding the sha256 of every file beside the outputs (the mask, the
    statistics and the evaluation of ``root``; each folder's evaluation and card). Returns the lock written."""
    eval_dict, lm_eval_docs = run.evaluation
    for _, folder in folders:
        if eval_dict is not None:
            write_json_atomic(folder / EVAL_NAME, eval_dict)
        for name, doc in (lm_eval_docs or {}).items():
            write_json_atomic(folder / name, doc)
    prefixes = [(f"{output(kind).folder}/", folder) for kind, folder in folders]
    kinds = {folder: kind for kind, folder in folders}
    base = root if root is not None else folders[0][1]
    lock = {**lock, RUN_FILES: present_run_files(base, prefixes, run_folder=root is not None)}
    return seal_cards(lock, prefixes, root, lambda folder, sealed: _card(run, folder, sealed, kinds[folder]))


def _card(run: RunRecord, folder: Path, lock: Mapping[str, Any], kind: str) -> str:
    """The model card of output ``kind`` in ``folder`` under ``lock`` (the file written there, whose sha256 it
    names); its license fields are the base card's."""
    recipe, (eval_dict, _) = run.recipe, run.evaluation
    hub_id = recipe.base.hub_id or (None if recipe.base.local_dir() is not None else recipe.base.model)
    summary = summarize_edit(run.mask.counts(), model_params=run.n_params)
    source = CardSource(
        recipe,
        lock,
        summary,
        eval_dict,
        run.base.card_fields,
        lock_sha256=lock_file_sha256(folder),
        weights_dtype=folder_dtype(folder),
        chat=has_chat_template(folder),
        gguf_survival=read_survival(folder),
        gguf_eval=read_gguf_eval(folder),
    )
    return build_card(source, kind, base_model_id=hub_id).content


def evidence_with_overlap(evidence: Mapping[str, Any], tasks: list[Any], mask_sha256: str) -> dict[str, Any]:
    """A sweep's lock entry plus ``evaluation_overlap``: how many of the run's own math evaluation problems (by
    prompt sha256) are among the sweep's selection and confirmation problems, and whether the run's mask is the one
    the confirmation tested; recorded without the per-problem lists (:func:`without_problem_lists`).

    A lock's own section (``reproduce``) has no lists: its recorded overlap is kept (the same recipe evaluates the
    same problems)."""
    out = dict(evidence)
    sel = evidence["selection"].get("problems_sha256")
    if sel is not None or "evaluation_overlap" not in evidence:
        mine = [problem_sha256(p) for t in tasks if isinstance(t, MathTask) for p in t.problems]
        chosen, conf = set(sel or ()), set(evidence["confirmation"].get("problems_sha256") or ())
        out["evaluation_overlap"] = {
            "n": len(mine),
            "selection": sum(h in chosen for h in mine),
            "confirmation": sum(h in conf for h in mine),
        }
    out["mask_matches_confirmation"] = evidence["confirmation"].get("mask_sha256") == mask_sha256
    return without_problem_lists(out)


def without_problem_lists(entry: Mapping[str, Any]) -> dict[str, Any]:
    """A sweep section as the lock records it: the selection's and the confirmation's per-problem sha256 lists
    left out (their counts stay). Why: they are ~95% of a release's lock (208 of 220 KB for SmolLM2's 2,200
    problems), copied into every repo, and belong to the sweep folder: its sweep.json holds them, and the
    section's ``sweep_sha256`` pins that file."""
    out = dict(entry)
    for part in ("selection", "confirmation"):
        if isinstance(out.get(part), Mapping):
            out[part] = {k: v for k, v in out[part].items() if k != "problems_sha256"}
    return out
