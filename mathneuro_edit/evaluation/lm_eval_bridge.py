"""Bridge to EleutherAI's lm-evaluation-harness: run its tasks on the in-memory model, base and edited, offline.

Installed with ``pip install 'lm-eval>=0.4.13,<0.5'`` (the eval extra: ``pip install -e ".[eval]"`` in a checkout);
without it, an :class:`LmEvalTask` raises an :class:`~mathneuro_edit.errors.InputError` that says so before
anything is computed.

Offline use: ``include_path`` is a folder of task YAMLs (``lm_eval.tasks.TaskManager(include_path=...)``), e.g. the
shipped ``recipes/lm_eval_tasks/`` (``dataset_path: json`` over vendored JSONL files), its ``data_files`` relative to
each YAML (:mod:`~mathneuro_edit.evaluation.lm_eval_index`). Every file of the folder is hashed
(:func:`~mathneuro_edit.evaluation.lm_eval_task.include_path_hashes`) for the task's fingerprint and the run's lock.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import importlib
import logging
from collections.abc import Iterator
from typing import Any

from torch import nn

from ..errors import InputError
from .lm_eval_index import require_lm_eval, task_manager, task_specs
from .lm_eval_task import LmEvalResult, LmEvalTask, harness_report

__all__ = ["run_lm_eval"]


def _flatten(results: dict[str, dict[str, Any]], n_samples: dict[str, Any]) -> dict[str, float]:
    # keep numbers only: lm-eval mixes in "alias" strings and "N/A" placeholders for missing stderr
    out = {
        f"{task}/{metric}": float(value)
        for task, metrics in results.items()
        for metric, value in metrics.items()
        if isinstance(value, (int, float)) and not isinstance(value, bool) and metric != "sample_len"
    }  # sample_len (lm-eval's own count, a float) is replaced by the int "{task}/n" below
    for task, counts in n_samples.items():  # documents actually scored (after limit): the n of every rate
        if task in results and isinstance(counts, dict) and isinstance(counts.get("effective"), int):
            out[f"{task}/n"] = counts["effective"]
    return dict(sorted(out.items()))


_TQDM_MODULES = ("lm_eval.api.task", "lm_eval.api.model", "lm_eval.models.huggingface")  # their `tqdm` names


def _silent(tqdm: Any, *args: Any, **kwargs: Any) -> Any:
    return tqdm(*args, **{**kwargs, "disable": True})


@contextlib.contextmanager
def _quiet_harness(quiet: bool) -> Iterator[None]:
    """lm-eval, datasets and their bars silenced inside the block when ``quiet`` (restored after): lm-eval's
    loggers at ERROR, the tqdm bars of lm-eval's task, model and harness modules off, datasets' bars off, and no
    ``git describe`` of the working folder."""
    with contextlib.ExitStack() as undo:
        if quiet:
            evaluator = importlib.import_module("lm_eval.evaluator")
            # its results' git_hash (dropped: harness_report) runs `git describe` on the working folder, whose
            # "fatal: not a git repository" went to the terminal once per run outside a git checkout
            undo.callback(setattr, evaluator, "get_git_commit_hash", evaluator.get_git_commit_hash)
            evaluator.get_git_commit_hash = lambda: None
            for name in _TQDM_MODULES:
                module = importlib.import_module(name)
                original = getattr(module, "tqdm", None)
                if original is not None:
                    module.tqdm = functools.partial(_silent, original)  # type: ignore[attr-defined]
                    undo.callback(setattr, module, "tqdm", original)
            for logger in (logging.getLogger(n) for n in ("lm_eval", "lm-eval", "datasets", "evaluate")):
                undo.callback(logger.setLevel, logger.level)
                logger.setLevel(logging.ERROR)
            from datasets.utils import logging as ds_logging  # lm_eval.api.task, imported above, needs it

            if ds_logging.is_progress_bar_enabled():
                ds_logging.disable_progress_bar()
                undo.callback(ds_logging.enable_progress_bar)
        yield


def run_lm_eval(
    model: nn.Module,
    tokenizer: Any,
    task: LmEvalTask,
    *,
    edit: Any = None,
    base: LmEvalResult | None = None,
    batch_size: int = 16,
) -> tuple[LmEvalResult, LmEvalResult | None]:
    """Run one :class:`LmEvalTask` on the in-memory model (its base weights, not reloaded from disk): base (unless
    a cached ``base`` is given), then edited with ``edit`` (a :class:`~mathneuro_edit.engine.apply.ReversibleEdit`,
    restored on return): ``(base, edited)``, ``edited`` ``None`` without an edit. lm-eval gets a deep copy of the
    tokenizer (it may set a pad token); ``batch_size`` applies when ``task.batch_size`` is ``None``."""
    lm_eval, hflm_class = require_lm_eval(task.name)

    if base is not None and edit is None:
        return base, None  # nothing to run: no task index, no model wrapper

    if task.apply_chat_template and not getattr(tokenizer, "chat_template", None):
        raise InputError(
            f"LmEvalTask {task.name!r}: apply_chat_template is set but the tokenizer has no chat "
            "template; set apply_chat_template: false for a base (non-chat) model"
        )
    manager = task_manager(task)  # lm-eval's own tasks are indexed (~30 s) only when one is not in include_path
    specs = task_specs(task, manager)
    device = getattr(model, "device", None) or next(model.parameters()).device
    from huggingface_hub.utils import are_progress_bars_disabled

    # the CLI keeps the libraries quiet unless --verbose, by the same switch as theirs: huggingface_hub's bars
    quiet = bool(are_progress_bars_disabled())
    with _quiet_harness(quiet):
        lm = _new_tokens_hflm(hflm_class)(
            pretrained=model,
            tokenizer=copy.deepcopy(tokenizer),
            device=str(device),
            batch_size=task.batch_size or batch_size,
        )

    def run() -> LmEvalResult:
        with _quiet_harness(quiet):
            return _evaluate(lm_eval, lm, task, specs, manager)

    if base is None:
        base = run()
    if edit is None:
        return base, None
    edit.apply()
    try:
        return base, run()
    finally:
        edit.restore()


def _new_tokens_hflm(hflm_class: type) -> type:
    """lm-eval's HFLM (imported only with lm-eval) asking ``generate`` for ``max_new_tokens``."""

    class NewTokensHFLM(hflm_class):  # type: ignore[misc, valid-type]
        """lm-eval's HFLM asking ``generate`` for ``max_new_tokens`` (its budget after the context) rather than
        ``max_length``: a model whose generation_config sets ``max_new_tokens`` would otherwise override lm-eval's
        ``max_gen_toks`` (and transformers warns that both are set)."""

        def _model_generate(self, context: Any, max_length: int, stop: list[str], **kwargs: Any) -> Any:
            generate = self.model.generate

            def with_new_tokens(*args: Any, max_length: int | None = None, **kw: Any) -> Any:
                if max_length is not None:
                    kw["max_new_tokens"] = max(int(max_length) - int(context.shape[1]), 1)
                return generate(*args, **kw)

            self.model.generate = with_new_tokens  # an instance attribute over the method, removed below
            try:
                return super()._model_generate(context, max_length, stop, **kwargs)
            finally:
                del self.model.generate

    return NewTokensHFLM


def _evaluate(lm_eval: Any, lm: Any, task: LmEvalTask, specs: list[Any], manager: Any) -> LmEvalResult:
    """One run of lm-eval's ``simple_evaluate`` on the wrapped model, as an :class:`LmEvalResult`."""
    result = lm_eval.simple_evaluate(
        model=lm,
        tasks=copy.deepcopy(specs),
        task_manager=manager,
        limit=task.limit,
        num_fewshot=task.num_fewshot,
        apply_chat_template=task.apply_chat_template,
        fewshot_as_multiturn=task.multiturn,
        log_samples=True,
    )  # simple_evaluate seeds python/numpy/torch itself (0/1234/1234; few-shot sampler 1234): repeatable
    if result is None:  # non-zero rank of a distributed run: lm-eval returns nothing there
        raise InputError(f"LmEvalTask {task.name!r}: lm-eval returned no results; run it in a single process")
    raw = dict(result.get("results", {}))
    return LmEvalResult(
        _flatten(raw, result.get("n-samples", {})),
        raw,
        task.sha256,
        dict(result.get("samples", {})),
        harness_report(result, task),
    )
