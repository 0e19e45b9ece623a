"""The ``evaluation.lm_eval`` section of the recipe (lm-evaluation-harness tasks) and the migration of its old keys.

:class:`~mathneuro_edit.recipe.job_sections.EvaluationConfig` holds an :class:`LmEvalConfig` and runs
:func:`migrate_lm_eval_keys` on its input, so recipes and locks written with ``evaluation.lm_eval_tasks`` /
``lm_eval_limit`` still load.
"""

from __future__ import annotations

import warnings
from typing import Annotated, Any

from pydantic import Field, model_validator

from .types import BatchSize, NonNegative, StrictModel, value_rule

__all__ = ["LmEvalConfig", "migrate_lm_eval_keys"]

# an int counts documents, a float in (0, 1) is a fraction of them (lm-eval's own rule for --limit)
LmEvalLimit = Annotated[
    int | float,
    value_rule(
        lambda v: v >= 1 if isinstance(v, int) else 0 < v < 1, "must be an integer >= 1 or a fraction in (0, 1)"
    ),
]


class LmEvalConfig(StrictModel):
    """lm-evaluation-harness tasks (``lm_eval.simple_evaluate`` on the in-memory model, base and edited)."""

    tasks: list[Annotated[str, Field(min_length=1)]] = Field(
        min_length=1, description="lm-eval task names, e.g. [arithmetic_local] (from include_path) or [gsm8k_cot]"
    )
    include_path: str | None = Field(
        None, description="a folder of task YAMLs, e.g. recipes/lm_eval_tasks (its files' sha256 go into the lock)"
    )
    limit: LmEvalLimit | None = Field(
        None, description="documents per task: an int, or a fraction in (0, 1) (default: all)"
    )
    num_fewshot: NonNegative | None = Field(None, description="few-shot examples per prompt (default: each task's)")
    apply_chat_template: bool = Field(False, description="format prompts with the tokenizer's chat template")
    fewshot_as_multiturn: bool | None = Field(
        None, description="few-shot examples as chat turns (default: on exactly when apply_chat_template is)"
    )
    batch_size: BatchSize | None = Field(
        None, description="lm-eval batch size (default: 16, as the built-in evaluation)"
    )

    @model_validator(mode="after")
    def _multiturn_needs_chat(self) -> LmEvalConfig:
        if self.fewshot_as_multiturn and not self.apply_chat_template:
            raise ValueError("fewshot_as_multiturn: true needs apply_chat_template: true")
        return self


def migrate_lm_eval_keys(data: Any) -> Any:
    """The keys before ``evaluation.lm_eval`` (``lm_eval_tasks``, ``lm_eval_limit``) still work: moved there.

    Why keep them: every lock written before holds them (at their defaults ``[]`` / ``null``, dropped silently), and
    recipes that set them keep running, with a FutureWarning naming the new keys.
    """
    if not isinstance(data, dict) or not ({"lm_eval_tasks", "lm_eval_limit"} & data.keys()):
        return data
    data = dict(data)
    tasks, limit = data.pop("lm_eval_tasks", None), data.pop("lm_eval_limit", None)
    if tasks:
        if data.get("lm_eval") is not None:
            raise ValueError("lm_eval_tasks: replaced by lm_eval.tasks; set only evaluation.lm_eval")
        warnings.warn(
            "evaluation.lm_eval_tasks / lm_eval_limit are deprecated: write evaluation.lm_eval.tasks / "
            "evaluation.lm_eval.limit (docs/recipes.md)",
            FutureWarning,
            stacklevel=2,
        )
        data["lm_eval"] = {"tasks": tasks, **({"limit": limit} if limit is not None else {})}
    return data
