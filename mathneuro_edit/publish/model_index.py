"""The model card's evaluation as Hub evaluation results (``model-index``), built with huggingface_hub's ``EvalResult``.

What the card's metadata says of the evaluation: per metric, this (the edited) model's value only, and each
evaluation source named as the Hub expects (a Hub dataset by its id, a built-in source by its generator, a local
file by its name). Why not the base's values beside them: the Hub (and ``ModelCard.load``) reads every result of a
card's ``model-index`` as a result of the card's model, whatever its name says; the base's values are in the card's
evaluation table, beside this model's. Kept apart from :mod:`mathneuro_edit.publish.card` (the card's assembly and prose) because
it is metadata only: it reads ``eval.json`` and the public recipe, and writes no text of the card's body.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from huggingface_hub import EvalResult

from ..recipe.schema import Recipe
from ..util.console import document_safe

__all__ = ["eval_results_metadata", "SOURCE_URL", "BUILT_IN"]

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
    form): a Hub dataset by its id (``openai/gsm8k``, config, split, revision); a built-in source by a name and
    the generator that documents it, with its seed; a local file by its name (its sha256 is in the lock)."""
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


def eval_results_metadata(eval_results: Mapping[str, Any] | None, recipe: Recipe) -> list[EvalResult]:
    """The evaluation as Hub evaluation results (``model-index``): per metric, this (edited) model's value under
    the metric's plain name (KL(base || edited) included: a property of this model), never the base's; each dataset
    named by :func:`_dataset` (a Hub dataset by its id)."""
    if not eval_results or recipe.evaluation is None:
        return []
    ev = recipe.public_dict().get("evaluation") or {}  # public form: a local data file is "<local>/NAME"
    general = ev.get("general") or []
    sources = {"math": ev.get("math"), "general": general[0] if general else None}
    found = []
    for task, parts in eval_results.items():
        if not isinstance(parts, Mapping):
            continue
        dataset = _dataset(sources.get(task), task, ev.get("seed"))
        values = parts.get("edited")
        if not isinstance(values, Mapping):
            continue
        for key, value in values.items():
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
    return found
