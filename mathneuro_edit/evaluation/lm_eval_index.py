"""lm-evaluation-harness itself and its task index: whether it is installed (:func:`require_lm_eval`), which tasks
it knows (:func:`task_manager`: the ``include_path`` folder, and lm-eval's own tasks when needed), each task's YAML
with its ``data_files`` resolved, and the one line for an unknown task (:func:`missing_task_message`).

lm-eval hands a relative ``dataset_kwargs.data_files`` to ``datasets.load_dataset``, which resolves it against the
*working directory*; here it is resolved against the folder of the YAML that names it, so a task folder works from
any working directory. Apart from :mod:`mathneuro_edit.evaluation.lm_eval_bridge` because a run checks its tasks
here (:func:`check_lm_eval_task`) before any model is loaded; the bridge runs them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import InputError
from .lm_eval_task import LmEvalTask, include_path_hashes

__all__ = ["require_lm_eval", "task_manager", "check_lm_eval_task", "missing_task_message"]

_INSTALL_HINT = "pip install 'lm-eval>=0.4.13,<0.5'"  # the eval extra's package (mathneuro-edit is not on PyPI)


def require_lm_eval(task_name: str) -> tuple[Any, Any]:
    """``(lm_eval module, HFLM class)``, or a one-line :class:`InputError` naming the :class:`LmEvalTask` that
    needs lm-evaluation-harness and how to install it."""
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


def _resolve(value: Any, yaml_path: Path) -> Any:
    """``data_files`` (a str, list or {split: str | list}) with relative local paths made absolute against the YAML's
    folder; one line for a local file that does not exist."""
    if isinstance(value, str):
        p = Path(value).expanduser()
        value = value if p.is_absolute() or "://" in value else str(yaml_path.parent / p)
        if "://" not in value and not any(c in value for c in "*?[") and not Path(value).is_file():
            raise InputError(
                f"{yaml_path.name}: data file {value} does not exist; data_files are relative to the YAML's folder"
            )
        return value
    if isinstance(value, list):
        return [_resolve(v, yaml_path) for v in value]
    if isinstance(value, dict):
        return {k: _resolve(v, yaml_path) for k, v in value.items()}
    return value


def task_specs(task: LmEvalTask, manager: Any) -> list[Any]:
    """Task names, or for a YAML task under ``include_path`` its full config with ``data_files`` resolved; one line
    for an unknown task name, or a data file that does not exist (naming the YAML and the file)."""
    from lm_eval.tasks._yaml_loader import load_yaml  # the loader TaskManager itself uses (with `include:`)

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
        own = root and yaml_path and yaml_path.is_relative_to(root) and getattr(entry.kind, "name", "") == "TASK"
        cfg = load_yaml(yaml_path, resolve_func=True, recursive=True) if own else {}
        kwargs = dict(cfg.get("dataset_kwargs") or {})
        if "data_files" not in kwargs:  # lm-eval's own tasks, groups and tags too: as lm-eval resolves them
            specs.append(name)
            continue
        kwargs["data_files"] = _resolve(kwargs["data_files"], yaml_path)
        specs.append({**cfg, "dataset_kwargs": kwargs})
    return specs


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


# (include_path, its files' hashes, with lm-eval's own) -> index
_MANAGERS: dict[tuple[str | None, str, bool], Any] = {}


def task_manager(task: LmEvalTask) -> Any:
    """lm-eval's task index for ``task``: the ``include_path`` folder alone when it holds every task, else with
    lm-eval's own ~15k task YAMLs too (~30 s to index; once per process)."""
    require_lm_eval(task.name)
    from lm_eval.tasks import TaskManager

    include = str(Path(task.include_path).expanduser()) if task.include_path else None
    content = json.dumps(include_path_hashes(include), sort_keys=True) if include else ""  # an edited YAML: reindex
    for defaults in (False, True) if include is not None else (True,):
        key = (include, content, defaults)
        if key not in _MANAGERS:
            _MANAGERS[key] = TaskManager(include_path=include, include_defaults=defaults)
        if defaults or all(t in _MANAGERS[key].task_index for t in task.tasks):
            return _MANAGERS[key]


def check_lm_eval_task(task: LmEvalTask) -> None:
    """Check, before any model is loaded, that lm-eval is installed and knows every task of ``task``
    (:func:`missing_task_message`), and that the data files of the include_path tasks exist."""
    task_specs(task, task_manager(task))
