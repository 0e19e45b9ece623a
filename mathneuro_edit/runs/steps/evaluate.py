"""The ``evaluate`` stage of a recipe: its tasks, their run on the base and the edit, and where the results go."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...data.sources import load_math_problems, load_set
from ...engine.apply import ReversibleEdit, round_weights_
from ...engine.edit_map import show_setting
from ...evaluation.lm_eval_index import check_lm_eval_task
from ...evaluation.lm_eval_task import LmEvalTask
from ...evaluation.results import EvalResults
from ...evaluation.runner import evaluate
from ...evaluation.tasks import GeneralTask, MathTask
from ...layout import EVAL_NAME
from ...recipe.schema import Recipe
from ...util.console import markdown_table_text
from ...util.files import write_json_atomic
from .export import release_dtype
from .record import RunRecord

__all__ = ["eval_tasks", "describe_tasks", "evaluate_step", "save_evaluation", "note_evaluation"]


def eval_tasks(recipe: Recipe) -> list[Any]:
    """The evaluation tasks of a recipe (math exact match + general loss/KL), or ``[]`` without evaluation; an
    lm-eval task is checked here (lm-eval installed, every task known), so a job names it before the model loads."""
    ev = recipe.evaluation
    if ev is None:
        return []
    problems = load_math_problems(ev.math, ev.samples + ev.n_shot, ev.seed)
    # the first n_shot sampled problems are the worked examples; the rest are evaluated
    shots, problems = problems[: ev.n_shot], problems[ev.n_shot :]
    texts, _ = load_set(ev.general, ev.samples, ev.seed)
    # the recipe's lm_eval keys are the task's arguments
    harness = [] if ev.lm_eval is None else [LmEvalTask("lm_eval", **ev.lm_eval.model_dump())]
    for task in harness:
        check_lm_eval_task(task)
    keys = ("question", "answer", "prefill")
    problems, shots = ([{k: p[k] for k in keys if k in p} for p in ps] for ps in (problems, shots))
    return harness + [
        MathTask(
            "math",
            problems,
            n_shot=ev.n_shot,
            shots=shots,
            max_new_tokens=ev.max_new_tokens,
            chat_template=ev.chat_template,
            prompt_style=ev.prompt_style,
        ),
        GeneralTask("general", texts, max_length=recipe.calibration.max_length),
    ]


def describe_tasks(tasks: list[Any]) -> str:
    """``100 math problems, 100 general texts`` (what an evaluation stage runs)."""
    return ", ".join(
        f"{len(t.problems)} {t.name} problems"
        if isinstance(t, MathTask)
        else f"{len(t.texts)} {t.name} texts"
        if isinstance(t, GeneralTask)
        else f"{t.name} (lm-eval)"
        for t in tasks
    )


def evaluate_step(run: RunRecord) -> EvalResults:
    """Evaluate the record's ``tasks`` on the base and, with a ``mask``, on the edit at the recipe's scale (paired,
    with KL): fills the record's ``results`` and returns them.

    Both are measured on the weights the release stores: when ``outputs.dtype`` (a GGUF base: bfloat16) differs
    from the model's, the model is rounded to it in place (:func:`~mathneuro_edit.engine.apply.round_weights_`;
    the caller must not need the unrounded model afterwards) and the edit writes the stored edited values, so the
    card's numbers are those of the files that ship, computed in the model's dtype.
    """
    recipe, model, mask = run.recipe, run.model, run.mask
    store = release_dtype(recipe)
    scale = recipe.edit.effective_scale
    edit: Any = ReversibleEdit(model, mask, scale, store_dtype=store) if mask is not None else None
    rounded = round_weights_(model, store)  # after the edit captured its unrounded originals
    what = f"base and edited (x{show_setting(scale)})" if edit else "the base"
    on = f", weights as stored ({str(store).removeprefix('torch.')})" if rounded else ""
    run.start(f"evaluate {what}{on}: {describe_tasks(run.tasks)}")
    run.results = evaluate(model, run.tokenizer, run.tasks, edit=edit, progress=run.progress)
    return run.results


def save_evaluation(run: RunRecord, folder: Path) -> None:
    """``folder/eval.json`` of the record's ``results`` (with the per-problem rows, so a reader can audit the
    scores) and lm-eval's own results files beside it; fills the record's ``evaluation`` (``(eval dict, {lm-eval
    file name: document})``) for the output folders."""
    results = run.results
    eval_dict = results.to_dict(predictions=True)
    results.save_json(folder / EVAL_NAME)
    lm_eval_docs = results.lm_eval_reports()
    for name, doc in lm_eval_docs.items():
        write_json_atomic(folder / name, doc)
    run.evaluation = (eval_dict, lm_eval_docs)


def note_evaluation(run: RunRecord) -> None:
    """The evaluation's table under its stage line."""
    run.note(markdown_table_text(run.results.to_markdown()))
