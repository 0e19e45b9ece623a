"""An lm-evaluation-harness task group as data: its spec (:class:`LmEvalTask`) with its fingerprint, the hashes of
its task folder (:func:`include_path_hashes`), its result (:class:`LmEvalResult`) and lm-eval's results document
made public (:func:`harness_report`).

Apart from the harness code (:mod:`mathneuro_edit.evaluation.lm_eval_index`,
:mod:`mathneuro_edit.evaluation.lm_eval_bridge`) because none of it imports lm-eval or a model: a task is checked,
fingerprinted and recorded (in eval.json and the lock) without the eval extra installed.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..util.paths import LOCAL, is_local_path

__all__ = ["LmEvalTask", "LmEvalResult", "include_path_hashes", "harness_report", "REPORT_KEYS"]

_SKIP_DIRS = {"__pycache__", ".ipynb_checkpoints"}  # written by Python / Jupyter, not part of a task folder


def include_path_hashes(folder: str | Path) -> dict[str, str]:
    """The sha256 of every file under a folder of lm-eval task YAMLs and their data, by relative POSIX name,
    sorted (caches skipped): ``{"arithmetic_local.yaml": "<sha256>", "sub/data.jsonl": ...}``."""
    root = Path(folder).expanduser()
    if not root.is_dir():
        raise InputError(
            f"evaluation.lm_eval.include_path: {folder} is not a folder; give a folder of lm-eval "
            "task YAMLs, e.g. recipes/lm_eval_tasks"
        )
    files = [p for p in root.rglob("*") if p.is_file() and not set(p.relative_to(root).parts) & _SKIP_DIRS]
    return dict(sorted((p.relative_to(root).as_posix(), hashlib.sha256(p.read_bytes()).hexdigest()) for p in files))


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
REPORT_KEYS = tuple(
    "results groups group_subtasks configs versions n-shot higher_is_better n-samples config lm_eval_version "
    "transformers_version tokenizer_pad_token tokenizer_eos_token tokenizer_bos_token eot_token_id max_length".split()
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
