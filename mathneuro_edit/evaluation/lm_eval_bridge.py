"""Bridge to EleutherAI's lm-evaluation-harness: run its tasks on the in-memory model, base and edited, offline.

Installed with ``pip install 'lm-eval>=0.4.13,<0.5'`` (the eval extra: ``pip install -e ".[eval]"`` in a checkout);
without it, an :class:`LmEvalTask` raises an :class:`~mathneuro_edit.errors.InputError` that says so before
anything is computed.

Offline use: ``include_path`` is a folder of task YAMLs (``lm_eval.tasks.TaskManager(include_path=...)``), e.g. the
shipped ``recipes/lm_eval_tasks/`` (``dataset_path: json`` over vendored JSONL files). lm-eval hands a relative
``dataset_kwargs.data_files`` to ``datasets.load_dataset``, which resolves it against the *working directory*; here
it is resolved against the folder of the YAML that names it, so a task folder works from any working directory.
Every file of the folder is hashed (:func:`include_path_hashes`): the hash is part of the task's fingerprint and of
the run's lock.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import nn

from ..errors import InputError
from ..util.paths import LOCAL, is_local_path

__all__ = [
    "LmEvalTask",
    "LmEvalResult",
    "require_lm_eval",
    "run_lm_eval",
    "include_path_hashes",
    "check_lm_eval_task",
    "missing_task_message",
    "task_manager",
    "harness_report",
    "REPORT_KEYS",
]

_INSTALL_HINT = "pip install 'lm-eval>=0.4.13,<0.5'"  # the eval extra's package (mathneuro-edit is not on PyPI)
_SKIP_DIRS = {"__pycache__", ".ipynb_checkpoints"}  # written by Python / Jupyter, not part of a task folder


def include_path_hashes(folder: str | Path) -> dict[str, str]:
    """The sha256 of every file under a task folder, by relative POSIX name, sorted (caches skipped).

    Args:
        folder: a folder of lm-eval task YAMLs and their data.

    Returns:
        ``{"arithmetic_local.yaml": "<sha256>", "sub/data.jsonl": ...}`` in sorted order.

    Raises:
        InputError: ``folder`` is not a folder.

    Example:
        >>> sorted(include_path_hashes("recipes/lm_eval_tasks"))[:2]  # doctest: +SKIP
        ['LICENSE.gsm8k', 'README.md']
    """
    root = Path(folder).expanduser()
    if not root.is_dir():
        raise InputError(
            f"evaluation.lm_eval.include_path: {folder} is not a folder; give a folder of lm-eval "
            "task YAMLs, e.g. recipes/lm_eval_tasks"
        )
    out = {}
    for p in root.rglob("*"):
        rel = p.relative_to(root)
        if p.is_file() and not (set(rel.parts) & _SKIP_DIRS):
            out[rel.as_posix()] = hashlib.sha256(p.read_bytes()).hexdigest()
    return dict(sorted(out.items()))


@dataclass(frozen=True)
class LmEvalTask:
    """A group of lm-evaluation-harness tasks, run on the in-memory model (``lm_eval.simple_evaluate``).

    Args:
        name: the name of this entry in the results (unique within one :func:`~mathneuro_edit.evaluation.runner.evaluate`).
        tasks: lm-eval task names, e.g. ``["arithmetic_local"]`` (from ``include_path``) or ``["gsm8k_cot"]``.
        limit: evaluate only the first ``limit`` documents of each task (``None``: all); a float in (0, 1) is a
            fraction, as in lm-eval.
        include_path: a folder of task YAMLs (``None``: lm-eval's own tasks only, which need the dataset hub).
        num_fewshot: few-shot examples per prompt (``None``: each task's own setting).
        apply_chat_template: format prompts with the tokenizer's chat template (lm-eval's ``--apply_chat_template``).
        fewshot_as_multiturn: few-shot examples as earlier chat turns; ``None``: on with the chat template, as in
            lm-eval's CLI.
        batch_size: lm-eval's batch size (``None``: the batch size given to ``evaluate``).

    Example:
        >>> LmEvalTask("harness", tasks=["gsm8k_cot"], limit=100).tasks
        ('gsm8k_cot',)
    """

    name: str
    tasks: Sequence[str] = ("gsm8k_cot",)
    limit: int | float | None = None
    include_path: str | None = None
    num_fewshot: int | None = None
    apply_chat_template: bool = False
    fewshot_as_multiturn: bool | None = None
    batch_size: int | None = None

    def __post_init__(self) -> None:
        where = f"LmEvalTask {self.name!r}"
        if isinstance(self.tasks, str) or not self.tasks or not all(isinstance(t, str) and t for t in self.tasks):
            raise InputError(
                f"{where}: tasks must be a non-empty list of lm-eval task names, got {self.tasks!r}; "
                "e.g. tasks=['arithmetic_local']"
            )
        object.__setattr__(self, "tasks", tuple(self.tasks))
        if self.limit is not None and (isinstance(self.limit, bool) or not self.limit > 0):
            raise InputError(f"{where}: limit must be > 0 or None, got {self.limit!r}")
        for key in ("num_fewshot", "batch_size"):
            v = getattr(self, key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < (key == "batch_size")):
                raise InputError(f"{where}: {key} must be an int >= {int(key == 'batch_size')} or None, got {v!r}")
        if self.fewshot_as_multiturn and not self.apply_chat_template:
            raise InputError(
                f"{where}: fewshot_as_multiturn needs apply_chat_template=True (few-shot turns are "
                "chat messages); set both or neither"
            )
        if self.include_path is not None:
            include_path_hashes(self.include_path)  # fails now on a missing folder, not after other tasks ran

    @property
    def sha256(self) -> str:
        """Fingerprint of the settings and the task folder's contents (a cached base result needs the same one)."""
        spec = {
            "kind": "lm_eval",
            "tasks": list(self.tasks),
            "limit": self.limit,
            "num_fewshot": self.num_fewshot,
            "apply_chat_template": self.apply_chat_template,
            "fewshot_as_multiturn": self.multiturn,
            "include_path": include_path_hashes(self.include_path) if self.include_path else None,
        }
        return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()

    @property
    def multiturn(self) -> bool:
        """The effective ``fewshot_as_multiturn`` (lm-eval's CLI: on exactly when the chat template is)."""
        return self.apply_chat_template if self.fewshot_as_multiturn is None else self.fewshot_as_multiturn


@dataclass(frozen=True)
class LmEvalResult:
    """Numeric metrics of one lm-eval run, flattened as ``"{task}/{metric,filter}"`` -> value, plus ``"{task}/n"``.

    Example:
        >>> LmEvalResult({"gsm8k_cot/exact_match,strict-match": 0.25, "gsm8k_cot/n": 8}).metrics()["gsm8k_cot/n"]
        8
    """

    values: dict[str, float]
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)  # lm-eval's "results" section
    task_sha256: str = ""
    samples: dict[str, list[dict[str, Any]]] = field(default_factory=dict, repr=False, compare=False)
    # lm-eval's own results document (:func:`harness_report`): what `lm_eval --output_path` writes
    report: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def metrics(self) -> dict[str, float]:
        """The metrics as a flat dict (the form of ``eval.json``)."""
        return dict(self.values)


# the keys of lm-eval's results file (`lm_eval --output_path`, EvaluationTracker.save_results_aggregated) that
# describe the evaluation itself; left out: date, timings, git hashes and pretty_env_info (the machine, the time)
REPORT_KEYS = (
    "results",
    "groups",
    "group_subtasks",
    "configs",
    "versions",
    "n-shot",
    "higher_is_better",
    "n-samples",
    "config",
    "lm_eval_version",
    "transformers_version",
    "tokenizer_pad_token",
    "tokenizer_eos_token",
    "tokenizer_bos_token",
    "eot_token_id",
    "max_length",
)


def _redact(value: Any, root: str | None, public_root: str) -> Any:
    """JSON data: the task folder's path public, NaN/inf as null, anything else JSON lacks as its text."""
    if isinstance(value, str):
        return value.replace(root, public_root) if root and root in value else value
    if isinstance(value, dict):
        return {str(k): _redact(v, root, public_root) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_redact(v, root, public_root) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return _redact(str(value), root, public_root)


def harness_report(result: dict[str, Any], task: LmEvalTask) -> dict[str, Any]:
    """lm-eval's own results document for one run (the format ``lm_eval --output_path`` writes: ``results`` with
    every metric and its ``_stderr``, ``configs``, ``versions``, ``n-shot``, ``n-samples``, ``higher_is_better``,
    ``config``, ...), without the keys that describe the machine or the time, and without local paths: the task
    folder is ``<local>/<its name>`` (as in the lock), a local model path ``<local>``.

    Example:
        >>> r = {"results": {"t": {"acc,none": 0.5, "acc_stderr,none": 0.1}}, "date": 1.0, "config": {"model": "/m"}}
        >>> harness_report(r, LmEvalTask("h", ["t"]))
        {'results': {'t': {'acc,none': 0.5, 'acc_stderr,none': 0.1}}, 'config': {'model': '<local>'}}
    """
    out = {k: copy.deepcopy(result[k]) for k in REPORT_KEYS if k in result}
    config = out.get("config")
    if isinstance(config, dict) and isinstance(config.get("model"), str) and is_local_path(config["model"]):
        config["model"] = LOCAL  # the in-memory model: lm-eval names its local folder
    root = str(Path(task.include_path).expanduser().resolve()) if task.include_path else None
    name = Path(task.include_path).expanduser().name if task.include_path else ""
    return _redact(out, root, f"{LOCAL}/{name}")


def require_lm_eval(task_name: str) -> tuple[Any, Any]:
    """Import lm-evaluation-harness, or raise a one-line :class:`InputError` saying how to install it.

    Args:
        task_name: the :class:`LmEvalTask` that needs it (named in the message).

    Returns:
        ``(lm_eval module, HFLM class)``.

    Example:
        >>> require_lm_eval("harness")  # doctest: +SKIP
    """
    try:
        import lm_eval
        from lm_eval.models.huggingface import HFLM
        from lm_eval.tasks import TaskManager  # noqa: F401  (0.4.x: the include_path API used here)
    except ImportError:
        raise InputError(
            f"LmEvalTask {task_name!r}: lm-evaluation-harness is not installed; install it with "
            f"`{_INSTALL_HINT}` (the eval extra) or remove this task"
        ) from None
    return lm_eval, HFLM


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


def _resolve(value: Any, folder: Path) -> Any:
    """``data_files`` (a str, list or {split: str | list}) with relative local paths made absolute against ``folder``."""
    if isinstance(value, str):
        p = Path(value).expanduser()
        return value if p.is_absolute() or "://" in value else str(folder / p)
    if isinstance(value, list):
        return [_resolve(v, folder) for v in value]
    if isinstance(value, dict):
        return {k: _resolve(v, folder) for k, v in value.items()}
    return value


def _task_specs(task: LmEvalTask, manager: Any) -> list[Any]:
    """Task names, or for a YAML task under ``include_path`` its full config with ``data_files`` resolved.

    Raises:
        InputError: an unknown task name, or a data file that does not exist (naming the YAML and the file).
    """
    from lm_eval.tasks._yaml_loader import (
        load_yaml,  # the loader TaskManager itself uses (with `include:`)
    )

    root = Path(task.include_path).expanduser().resolve() if task.include_path else None
    specs: list[Any] = []
    for name in task.tasks:
        entry = manager.task_index.get(name)
        if entry is None:
            local = sorted(
                n
                for n, e in manager.task_index.items()
                if root and e.yaml_path and Path(e.yaml_path).resolve().is_relative_to(root)
            )
            raise InputError(missing_task_message(task, name, local))
        yaml_path = Path(entry.yaml_path).resolve() if entry.yaml_path else None
        if (
            root is None
            or yaml_path is None
            or not yaml_path.is_relative_to(root)
            or getattr(entry.kind, "name", "") != "TASK"
        ):
            specs.append(name)  # lm-eval's own tasks, groups and tags: as lm-eval resolves them
            continue
        cfg = load_yaml(yaml_path, resolve_func=True, recursive=True)
        kwargs = dict(cfg.get("dataset_kwargs") or {})
        if "data_files" not in kwargs:
            specs.append(name)
            continue
        kwargs["data_files"] = _resolve(kwargs["data_files"], yaml_path.parent)
        files = kwargs["data_files"]
        for f in files if isinstance(files, list) else list(files.values()) if isinstance(files, dict) else [files]:
            for one in f if isinstance(f, list) else [f]:
                if (
                    isinstance(one, str)
                    and "://" not in one
                    and not any(c in one for c in "*?[")
                    and not Path(one).is_file()
                ):
                    raise InputError(
                        f"{yaml_path.name}: data file {one} does not exist; data_files are relative "
                        "to the YAML's folder"
                    )
        specs.append({**cfg, "dataset_kwargs": kwargs})
    return specs


def _libraries_quiet() -> bool:
    """Whether the command keeps the libraries quiet (the CLI's default; ``--verbose`` turns it off): the same
    switch as theirs, huggingface_hub's progress bars."""
    from huggingface_hub.utils import are_progress_bars_disabled

    return bool(are_progress_bars_disabled())


_TQDM_MODULES = ("lm_eval.api.task", "lm_eval.api.model", "lm_eval.models.huggingface")  # their `tqdm` names


@contextlib.contextmanager
def _quiet_harness(quiet: bool) -> Iterator[None]:
    """lm-eval, datasets and their bars silenced inside the block when ``quiet`` (restored after): lm-eval's
    loggers at ERROR, the tqdm bars of lm-eval's task, model and harness modules off, datasets' bars off."""
    if not quiet:
        yield
        return
    import importlib
    import logging

    patched = []
    for name in _TQDM_MODULES:
        module = importlib.import_module(name)
        original = getattr(module, "tqdm", None)
        if original is not None:

            def silent(*args: Any, _tqdm: Any = original, **kwargs: Any) -> Any:
                kwargs["disable"] = True
                return _tqdm(*args, **kwargs)

            module.tqdm = silent  # type: ignore[attr-defined]
            patched.append((module, original))

    loggers = [logging.getLogger(n) for n in ("lm_eval", "lm-eval", "datasets", "evaluate")]
    levels = [lg.level for lg in loggers]
    ds_bars = None
    try:
        from datasets.utils import logging as ds_logging

        ds_bars = ds_logging.is_progress_bar_enabled()
        ds_logging.disable_progress_bar()
    except ImportError:
        ds_logging = None  # type: ignore[assignment]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)
        for module, original in patched:
            module.tqdm = original  # type: ignore[attr-defined]
        if ds_logging is not None and ds_bars:
            ds_logging.enable_progress_bar()


def missing_task_message(task: LmEvalTask, name: str, local: list[str]) -> str:
    """The one line for a task lm-eval does not know: the cause (``include_path`` not set, or the task not in
    it) and the command that lists the tasks of the installed lm-eval (0.4.13+: ``lm-eval ls tasks``)."""
    if task.include_path is None:
        cause = (
            "evaluation.lm_eval.include_path is not set, so only lm-eval's own tasks are known; set it to "
            "the folder of your task YAMLs, or check the name"
        )
        listing = "lm-eval ls tasks"
    else:
        folder = Path(task.include_path).expanduser()
        there = f" (tasks there: {', '.join(local)})" if local else " (no task YAML found there)"
        cause = f"it is not in include_path {folder}{there} nor among lm-eval's own tasks"
        listing = f"lm-eval ls tasks --include_path {folder}"
    return (
        f"LmEvalTask {task.name!r}: no lm-eval task or group named {name!r}: {cause}; list the tasks with `{listing}`"
    )


_MANAGERS: dict[
    tuple[str | None, str, bool], Any
] = {}  # (include_path, its files' hashes, with lm-eval's own) -> index


def task_manager(task: LmEvalTask) -> Any:
    """lm-eval's task index for ``task``: the ``include_path`` folder alone when it holds every task, else with
    lm-eval's own ~15k task YAMLs too (~30 s to index; once per process)."""
    require_lm_eval(task.name)
    from lm_eval.tasks import TaskManager

    include = str(Path(task.include_path).expanduser()) if task.include_path else None
    content = json.dumps(include_path_hashes(include), sort_keys=True) if include else ""  # an edited YAML: reindex
    if include is not None:
        key = (include, content, False)
        if key not in _MANAGERS:
            _MANAGERS[key] = TaskManager(include_path=include, include_defaults=False)
        if all(t in _MANAGERS[key].task_index for t in task.tasks):
            return _MANAGERS[key]
    key = (include, content, True)
    if key not in _MANAGERS:
        _MANAGERS[key] = TaskManager(include_path=include)
    return _MANAGERS[key]


def check_lm_eval_task(task: LmEvalTask) -> None:
    """Check, before any model is loaded, that lm-eval knows every task of ``task`` (and that the data files of
    the include_path tasks exist).

    Raises:
        InputError: lm-eval is not installed, or a task is unknown (:func:`missing_task_message`).
    """
    _task_specs(task, task_manager(task))


def run_lm_eval(
    model: nn.Module,
    tokenizer: Any,
    task: LmEvalTask,
    *,
    edit: Any = None,
    base: LmEvalResult | None = None,
    batch_size: int = 16,
) -> tuple[LmEvalResult, LmEvalResult | None]:
    """Run one :class:`LmEvalTask` on the in-memory model: base (unless given), then edited (with ``edit``).

    Args:
        model: a ``transformers.PreTrainedModel`` with its base weights (not reloaded from disk).
        tokenizer: its tokenizer; lm-eval gets a deep copy (it may set a pad token), the caller's is untouched.
        task: the task group.
        edit: a :class:`~mathneuro_edit.engine.apply.ReversibleEdit` on ``model`` or ``None``; restored on return.
        base: a cached base result for this task (skips the base run).
        batch_size: lm-eval's batch size when ``task.batch_size`` is ``None``.

    Returns:
        ``(base, edited)``; ``edited`` is ``None`` without an edit.

    Example:
        Skipped as a doctest: it needs a loaded model, and a checkout of this repository as the current folder.

        >>> task = LmEvalTask("h", ["arithmetic_local"], limit=20,
        ...                   include_path="recipes/lm_eval_tasks")  # doctest: +SKIP
        >>> base, edited = run_lm_eval(model, tok, task, edit=edit)  # doctest: +SKIP
    """
    lm_eval, hflm_class = require_lm_eval(task.name)

    if base is not None and edit is None:
        return base, None  # nothing to run: no task index, no model wrapper

    if task.apply_chat_template and not getattr(tokenizer, "chat_template", None):
        raise InputError(
            f"LmEvalTask {task.name!r}: apply_chat_template is set but the tokenizer has no chat "
            "template; set apply_chat_template: false for a base (non-chat) model"
        )
    manager = task_manager(task)  # lm-eval's own tasks are indexed (~30 s) only when one is not in include_path
    specs = _task_specs(task, manager)
    device = getattr(model, "device", None) or next(model.parameters()).device

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

    quiet = _libraries_quiet()
    with _quiet_harness(quiet):
        lm = NewTokensHFLM(
            pretrained=model,
            tokenizer=copy.deepcopy(tokenizer),
            device=str(device),
            batch_size=task.batch_size or batch_size,
        )

    def run() -> LmEvalResult:
        with _quiet_harness(quiet):
            return _run()

    def _run() -> LmEvalResult:
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

    if base is None:
        base = run()
    if edit is None:
        return base, None
    edit.apply()
    try:
        return base, run()
    finally:
        edit.restore()
