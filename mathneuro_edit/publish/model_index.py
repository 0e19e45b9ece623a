"""The model card's evaluation as Hub evaluation results (``model-index``), built with huggingface_hub's ``EvalResult``.

What the card's metadata says of the evaluation: per metric, this (the edited) model's value, and each evaluation
source named as the Hub expects (a Hub dataset by its id, a built-in source by its generator, a local file by its
name). A release made from a sweep (``run --from-sweep``) lists the sweep's confirmation instead of its own math
accuracy (:func:`confirmation_results`): the held-out problems the gain was confirmed on, this model's and the
base's accuracy as two results, each format's n and prompt; its own evaluation's math accuracy (problems the setting
may have been chosen on) stays in the card's text only. Why the base's value is a result of its own, under a
dataset config and a metric name that say "base model": the Hub (and ``ModelCard.load``) reads every result of a
card's ``model-index`` as a result of the card's model, and groups results by task, dataset type, config, split and
revision, so a base value that shared the edited one's would be shown as a second value of this model. The run's
own evaluation lists this model's values only (its base values are in the card's table).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from huggingface_hub import EvalResult

from ..recipe.schema import Recipe
from ..util.console import document_safe

__all__ = ["eval_results_metadata", "confirmation_results", "prompt_format", "SOURCE_URL", "BUILT_IN"]

_METRICS = {  # eval.json key -> (Hub metric type, name); the model-index describes this (the edited) model only
    "math_accuracy": ("accuracy", "math accuracy"),
    "general_loss": ("loss", "general next-token loss"),
    "general_perplexity": ("perplexity", "general perplexity"),
    "general_kl": ("kl_divergence", "KL(base || edited) per token"),
}
SOURCE_URL = "https://github.com/mathneuro-edit/mathneuro-edit/blob/main/"
# the built-in sources are not Hub datasets: each is named, and its generator (which documents it) linked
BUILT_IN = {
    "arithmetic": (
        "mathneuro-edit-arithmetic",
        "mathneuro-edit built-in arithmetic (two-digit + and -, one-digit *)",
        "mathneuro_edit/data/arithmetic.py",
    ),
    "organism:math": (
        "mathneuro-edit-organism-math",
        "mathneuro-edit organism: synthetic GSM8K-style problems",
        "mathneuro_edit/organism/data.py",
    ),
    "organism:general": (
        "mathneuro-edit-organism-general",
        "mathneuro-edit organism: synthetic general text",
        "mathneuro_edit/organism/data.py",
    ),
}


def _dataset(src: Mapping[str, Any] | None, task: str, seed: int | None) -> dict[str, Any]:
    """The ``dataset_*`` (and ``source_*``) fields of one model-index entry for an evaluation source (public
    form), named as the module docstring says."""
    if src is None:  # lm-eval tasks: the harness's task name
        return {"dataset_type": task, "dataset_name": task}
    path = str(src.get("path"))
    if path.startswith("hf://datasets/"):
        hub_id = path.removeprefix("hf://datasets/")
        return {
            "dataset_type": hub_id,
            "dataset_name": hub_id,
            "dataset_config": src.get("config"),
            "dataset_split": src.get("split") or "train",
            "dataset_revision": src.get("revision"),
        }
    if path in BUILT_IN:
        kind, name, code = BUILT_IN[path]
        return {
            "dataset_type": kind,
            "dataset_name": name,
            "dataset_split": src.get("split"),
            "dataset_args": {"seed": seed} if seed is not None else None,
            "source_name": "mathneuro-edit",
            "source_url": SOURCE_URL + code,
        }
    name = document_safe(path.rsplit("/", 1)[-1])  # the metadata's value, not only the card's text, shows it escaped
    if src.get("hub_dataset"):  # a local subset of a Hub dataset: named by the dataset's id
        return {
            "dataset_type": src["hub_dataset"],
            "dataset_name": f"{src['hub_dataset']} ({name}: a local subset; its sha256 is in the lock)",
        }
    return {"dataset_type": "local-file", "dataset_name": f"{name} (a local file; its sha256 is in the lock)"}


def prompt_format(prompt: Mapping[str, Any] | None, chat: bool) -> str:
    """A prompt format in words, from its evaluation settings (``n_shot``, ``chat_template``, ``prompt_style``):
    ``chat`` says whether the model's tokenizer has a chat template (what ``chat_template: auto`` resolves to).

    Example:
        >>> prompt_format({"n_shot": 0, "chat_template": "auto"}, chat=True)
        '0-shot, chat template'
        >>> prompt_format({"n_shot": 4, "chat_template": False, "prompt_style": "equations"}, chat=True)
        '4-shot, equation lines'
        >>> prompt_format(None, chat=False)
        "the recipe's prompt"
    """
    if not isinstance(prompt, Mapping):
        return "the recipe's prompt"
    shots = f"{prompt['n_shot']}-shot" if _count(prompt.get("n_shot")) is not None else "?-shot"
    setting = prompt.get("chat_template", "auto")
    if setting is True or (setting == "auto" and chat):
        return f"{shots}, chat template"
    return f"{shots}, {'equation lines' if prompt.get('prompt_style') == 'equations' else 'Question/Answer text'}"


def _count(x: Any) -> int | None:
    return x if isinstance(x, int) and not isinstance(x, bool) and x >= 0 else None


def _arms(sweep: Mapping[str, Any]) -> list[tuple[Mapping[str, Any] | None, int, int, int, str]]:
    """``(prompt, n, base correct, candidate correct, verdict)`` of each prompt format of a lock's ``sweep`` section whose
    arms it records, the recipe's own first; a section without them (written before formats had arms) gives the
    confirmation's own counts under the recipe's prompt (its primary format's settings, when recorded)."""
    found = []
    for f in sweep.get("formats") or []:
        arms = f.get("arms") if isinstance(f, Mapping) and isinstance(f.get("arms"), Mapping) else {}
        base, cand = arms.get("base"), arms.get("candidate")
        if not (isinstance(base, Mapping) and isinstance(cand, Mapping)):
            continue
        n, b, k = _count(base.get("n")), _count(base.get("correct")), _count(cand.get("correct"))
        if n and b is not None and k is not None and b <= n and k <= n and _count(cand.get("n")) == n:
            prompt = f.get("prompt") if isinstance(f.get("prompt"), Mapping) else None
            found.append((prompt, n, b, k, str(f.get("verdict")), not f.get("primary")))
    found.sort(key=lambda x: x[5])  # the recipe's own format first
    if found:
        return [x[:5] for x in found]
    c = sweep.get("confirmation") if isinstance(sweep.get("confirmation"), Mapping) else {}
    n, b, k = _count(c.get("n")), _count(c.get("base_correct")), _count(c.get("edited_correct"))
    ok = n and b is not None and k is not None and b <= n and k <= n
    formats = [f for f in sweep.get("formats") or [] if isinstance(f, Mapping) and f.get("primary")]
    prompt = formats[0].get("prompt") if formats and isinstance(formats[0].get("prompt"), Mapping) else None
    return [(prompt, n, b, k, "math-boost" if c.get("confirmed") is True else "no-gain")] if ok else []  # type: ignore[list-item]


def _verdict(x: str) -> str:
    """A format's verdict from a lock (someone else's file) as metadata: one of the sweep's words, else ``?``."""
    return x if x in ("math-boost", "format-effect", "not-specific", "no-gain") else "?"  # procedure.VERDICTS


def confirmation_results(sweep: Mapping[str, Any], chat: bool = False) -> list[EvalResult]:
    """A sweep's confirmation as Hub evaluation results: per prompt format, this model's accuracy and the base's,
    each its own result (the base's under a dataset config and metric name that say so: :mod:`this module's
    docstring <mathneuro_edit.publish.model_index>`), with the problems' source, their number (``dataset_args.n``)
    and the counts (``metric_args``). ``sweep`` is a lock's ``sweep`` section; ``chat``: the model's tokenizer has a
    chat template (:func:`prompt_format`)."""
    problems = sweep.get("problems") if isinstance(sweep.get("problems"), Mapping) else {}
    source = problems.get("source") if isinstance(problems.get("source"), Mapping) else {"path": "arithmetic"}
    seed = problems.get("seed") if _count(problems.get("seed")) is not None else None
    dataset = _dataset(source, "math", seed)
    found = []
    for prompt, n, base_correct, edited_correct, verdict in _arms(sweep):
        fmt = prompt_format(prompt, chat)
        for who, correct in (("this model", edited_correct), ("base model (unedited)", base_correct)):
            base = who != "this model"
            config = "; ".join(str(x) for x in (dataset.get("dataset_config"), fmt, "base model" if base else "") if x)
            found.append(
                EvalResult(
                    task_type="text-generation",
                    task_name="math (sweep confirmation: problems held out from choosing the setting)",
                    **{
                        **dataset,
                        "dataset_name": f"{dataset['dataset_name']}: sweep confirmation problems",
                        "dataset_config": config,
                        "dataset_args": {**(dataset.get("dataset_args") or {}), "n": n, "prompt": fmt},
                        "source_name": "mathneuro-edit sweep confirmation" + (": base model" if base else ""),
                        "source_url": SOURCE_URL + "docs/evaluation.md#select-then-confirm-sweep",
                    },
                    metric_type="accuracy",
                    metric_value=round(correct / n, 6),
                    metric_name=f"math accuracy, {who}" + (" for comparison" if base else ""),
                    metric_args={"correct": correct, "n": n} | ({} if base else {"verdict": _verdict(verdict)}),
                )
            )
    return found


def eval_results_metadata(
    eval_results: Mapping[str, Any] | None,
    recipe: Recipe,
    sweep: Mapping[str, Any] | None = None,
    chat: bool = False,
) -> list[EvalResult]:
    """The evaluation as Hub evaluation results (``model-index``), as the module docstring says: this (edited)
    model's values (KL(base || edited) included: a property of this model); with a lock's ``sweep`` section, the
    confirmation's results (:func:`confirmation_results`) in place of this run's own math accuracy."""
    confirmed = confirmation_results(sweep, chat) if isinstance(sweep, Mapping) else []
    if not eval_results or recipe.evaluation is None:
        return confirmed
    ev = recipe.public_dict().get("evaluation") or {}  # public form: a local data file is "<local>/NAME"
    general = ev.get("general") or []
    sources = {"math": ev.get("math"), "general": general[0] if general else None}
    found = []
    for task, parts in eval_results.items():
        values = parts.get("edited") if isinstance(parts, Mapping) else None
        if not isinstance(values, Mapping):
            continue
        dataset = _dataset(sources.get(task), task, ev.get("seed"))
        for key, value in values.items():
            if confirmed and key == "math_accuracy":
                continue  # the confirmation's accuracy is the release's number (above)
            if key in _METRICS:
                metric, name = _METRICS[key]
            elif task not in sources and isinstance(value, (int, float)) and "stderr" not in key:
                metric, name = key, f"{task} {key}"  # lm-eval: the harness's own metric names
            else:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                continue  # NaN or an infinity (a hand-edited eval.json: the run writes them as null) is no result
            found.append(
                EvalResult(
                    task_type="text-generation",
                    **dataset,
                    metric_type=metric,
                    metric_value=round(float(value), 6),
                    metric_name=name,
                )
            )
    return confirmed + found
