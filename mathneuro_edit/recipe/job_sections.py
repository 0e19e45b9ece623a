"""The recipe sections of the jobs that judge or publish an edit: ``evaluation`` (the before/after evaluation of
``run`` and ``eval``, and the problems of ``sweep``), ``hub`` (``push``), ``sweep`` and ``consistency``.

Apart from the sections that make the edit (:mod:`mathneuro_edit.recipe.edit_sections`) because none of them
changes the edited weights: a recipe's mask and edit are the same whatever these say. The ``evaluation.lm_eval``
section and its old-key migration live in :mod:`mathneuro_edit.recipe.lm_eval_keys`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, StrictBool, StrictInt, model_validator

from .input_sections import Source, Sources
from .lm_eval_keys import LmEvalConfig, migrate_lm_eval_keys
from .types import (
    BatchSize,
    Branch,
    FiniteNonNegative,
    Level,
    NonNegative,
    Positive,
    RepoId,
    Scale,
    StrictModel,
    Tokens,
    TopK,
)

__all__ = ["EvaluationConfig", "HubConfig", "SweepVariant", "PromptFormat", "SweepConfig", "ConsistencyConfig"]


class EvaluationConfig(StrictModel):
    """Before/after evaluation (optional)."""

    math: Source = Field(
        description="math problems with question/answer (GSM8K format, gold after '#### '; "
        "optional prefill), or arithmetic"
    )
    general: Sources = Field(description="general texts for loss and KL: one source or a list")
    samples: Positive = Field(100, description="problems and texts evaluated")
    seed: StrictInt = Field(0, description="seed of the sampling")
    n_shot: NonNegative = Field(0, description="worked examples put before each problem")
    max_new_tokens: Tokens = Field(256, description="generation budget per problem")
    chat_template: bool | Literal["auto"] = Field(
        "auto",
        description="render prompts with the tokenizer's chat template: auto (when it has one), true "
        "(required), false (plain Question:/Answer:)",
    )
    prompt_style: Literal["question-answer", "equations"] = Field(
        "question-answer",
        description="plain prompts: question-answer (Question:/Answer:) or equations (worked "
        "examples as '12 + 34 = 46' lines, the problem as its prefill; for bases)",
    )
    lm_eval: LmEvalConfig | None = Field(
        None, description="lm-evaluation-harness tasks run too (needs the eval extra; docs/lm-eval-offline.md)"
    )
    llama_cpp: StrictBool = Field(
        False,
        description="also evaluate each GGUF file of outputs.gguf in llama.cpp against the base written the same "
        "way, paired, on the same math problems (needs llama-cpp-python; the GGUF card shows these figures)",
    )

    @model_validator(mode="before")
    @classmethod
    def _old_lm_eval_keys(cls, data: Any) -> Any:
        return migrate_lm_eval_keys(data)


class HubConfig(StrictModel):
    """Where ``mathneuro-edit push`` publishes (optional)."""

    repo_id: RepoId = Field(description="target model repo, e.g. user/name")
    private: StrictBool = Field(False, description="create the repo private")
    revision: Branch | None = Field(None, description="branch to push to (created if missing; default main)")


_VARIANT_KEYS = ("data.", "calibration.", "targets.")


class SweepVariant(StrictModel):
    """Another calibration or target choice of the same recipe, swept over the same grid (``--set`` overrides of
    ``data.*``, ``calibration.*`` or ``targets.*`` only: the evaluation is the same for every point)."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]{0,39}$", description="short label (lowercase, digits, - _ .)")
    set: list[str] = Field(min_length=1, description="recipe overrides, e.g. targets.include=[mlp]")

    @model_validator(mode="after")
    def _only_weights_keys(self) -> SweepVariant:
        for item in self.set:
            key = item.partition("=")[0].strip()
            if "=" not in item or not key.startswith(_VARIANT_KEYS):
                raise ValueError(f"{item!r}: a variant sets data.*, calibration.* or targets.* keys only (key=value)")
        return self


class PromptFormat(StrictModel):
    """Another prompt format the sweep's confirmation runs under, besides the evaluation's own (the same problems,
    other worked examples or rendering): a boost is claimed only for the formats where it was confirmed."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9 _.,+-]{0,59}$", description="short label, e.g. chat 4-shot")
    n_shot: NonNegative = Field(0, description="worked examples put before each problem")
    chat_template: bool | Literal["auto"] = Field(
        "auto", description="as evaluation.chat_template: auto, true or false"
    )
    prompt_style: Literal["question-answer", "equations"] = Field(
        "question-answer", description="as evaluation.prompt_style"
    )


class SweepConfig(StrictModel):
    """How ``mathneuro-edit sweep`` chooses and confirms a setting (docs/evaluation.md "Select, then confirm").

    The sweep draws ``selection_samples + confirmation_samples`` problems from ``evaluation.math`` (after the
    ``n_shot`` worked examples; same seed): the first ``selection_samples`` choose the setting, the rest confirm it.
    With ``first_round`` the choice is adaptive (successive halving): every point on the first ``first_round``
    problems, the best ``1/eta`` of them on ``eta`` times as many, ..., the finalists on all selection problems.
    """

    top_k: list[TopK] | None = Field(None, description="top_k values of the grid (null: the command's --top-k)")
    scale: list[Scale] | None = Field(None, description="scales of the grid (null: the command's --scale)")
    variants: list[SweepVariant] = Field(
        default_factory=list,
        description="other calibration / target choices, each swept over the same grid besides the recipe's own",
    )
    first_round: Positive | None = Field(
        None,
        description="problems of the first round of successive halving (null: every point on every selection problem)",
    )
    eta: StrictInt = Field(3, ge=2, description="each round keeps 1/eta of the points on eta times the problems")
    batch_size: BatchSize = Field(64, description="problems generated at once (one shared prompt prefix per batch)")
    kl_support: Positive = Field(
        256,
        description="base tokens kept per position for the general KL (a lower "
        "bound of the exact KL; docs/evaluation.md)",
    )

    selection_samples: Positive = Field(
        300, description="math problems every grid point is evaluated on (the setting is chosen on them)"
    )
    confirmation_samples: Positive = Field(
        600,
        description="other math problems on which only the chosen setting, the base and two control edits are "
        "evaluated (paired tests)",
    )
    general_samples: Positive | None = Field(
        None, description="general texts of the selection's loss and KL (null: evaluation.samples); fewer is faster"
    )
    kl_budget: FiniteNonNegative = Field(
        0.05, description="largest general KL(base || edited) a chosen setting may have"
    )
    alpha: Level = Field(0.05, description="level of the confirmation test (and of the Holm-adjusted selection p)")
    control_seed: StrictInt = Field(
        0, description="seed of the uniform random control edit of the confirmation (same count per matrix, same scale)"
    )
    confirmation_formats: list[PromptFormat] = Field(
        default_factory=list,
        description="other prompt formats the candidate, the base and the magnitude-matched control are confirmed "
        "under (a boost is claimed only for formats where it was confirmed)",
    )
    format_samples: Positive | None = Field(
        None,
        description="problems of each other prompt format: the first of the confirmation problems (null: all)",
    )
    search: Literal["grid", "optuna"] = Field(
        "grid",
        description="grid: every (top_k, scale) point; optuna: a TPE search (the search extra) over a scale per "
        "layer band and component and a top_k per component, confirmed the same way (docs/recipes.md)",
    )
    trials: Positive = Field(
        40, description="optuna: trials of the search (sweep --more-trials N extends a finished one by N)"
    )
    bands: Positive = Field(
        2, description="optuna: layer bands of the search space (each band's attention and MLP get their own scale)"
    )
    search_seed: StrictInt = Field(0, description="optuna: seed of the sampler (the same seed gives the same trials)")


class ConsistencyConfig(StrictModel):
    """How ``mathneuro-edit consistency`` draws its calibration subsets (the paper's data-efficiency figure)."""

    sizes: list[Positive] = Field(
        default_factory=lambda: [1, 4, 16], description="calibration samples per set of each random subset"
    )
    repeats: Positive = Field(3, description="random draws per size")
