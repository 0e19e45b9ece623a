"""The recipe sections of making the edit and writing it: ``calibration``, ``targets``, ``mask``, ``edit`` and
``outputs``.

Apart from the sections of what a run reads (:mod:`mathneuro_edit.recipe.input_sections`) and of the jobs that
judge or publish an edit (:mod:`mathneuro_edit.recipe.job_sections`): these are the settings of the method itself
(which matrices are scored, how the math-specific weights are chosen, what is done to them) and of the files a
run writes from it. They name no path and no repo.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, StrictBool, StrictInt, model_validator

from .types import BatchSize, Regex, ScaleSetting, ShardSize, StrictModel, Tokens, TopKSetting

__all__ = ["CalibrationConfig", "TargetsConfig", "MaskConfig", "EditConfig", "OutputsConfig"]


class CalibrationConfig(StrictModel):
    """Forward passes that collect activation statistics."""

    max_length: Tokens = Field(512, description="tokens per text (longer texts are truncated)")
    batch_size: BatchSize = Field(8, description="texts per forward pass")


class TargetsConfig(StrictModel):
    """Which weight matrices are scored (regular expressions searched in parameter names)."""

    include: list[Regex] = Field(
        default_factory=list, description="only parameters matching one of these (empty: all supported matrices)"
    )
    exclude: list[Regex] = Field(default_factory=list, description="drop parameters matching one of these")


class MaskConfig(StrictModel):
    """How the math-specific weights are chosen."""

    method: Literal["mathneuro", "wanda", "random"] = Field(
        "mathneuro", description="mathneuro (math top-K minus general top-K), wanda (math top-K only) or random"
    )
    top_k: TopKSetting = Field(
        0.05,
        description="fraction of each matrix (or row) kept in a top-K set; or a map per layer band and component, "
        'e.g. {default: 0.05, mlp: 0.01} (docs/recipes.md "Edits with structure")',
    )
    granularity: Literal["matrix", "row"] = Field("matrix", description="top-K per matrix or per output row")
    seed: StrictInt = Field(0, description="seed of the random method")
    reference: Literal["official"] | None = Field(
        None,
        description="official: the released MathNeuro.py's selection bit for bit (per-sample products summed "
        "in the model's dtype, batch 1; docs/method.md); null: float32 statistics",
    )

    @model_validator(mode="after")
    def _official_is_uniform_per_matrix(self) -> MaskConfig:
        if self.reference == "official" and isinstance(self.top_k, dict):
            raise ValueError("reference official selects one top_k for every matrix: set mask.top_k to a number")
        if self.reference == "official" and self.granularity != "matrix":
            raise ValueError(
                "reference official selects per matrix (the released script has no per-row top-K): "
                "set granularity: matrix"
            )
        return self


class EditConfig(StrictModel):
    """What is done to the selected weights: exactly one of ``scale: X`` or ``prune: true``."""

    scale: ScaleSetting | None = Field(
        None,
        description="multiply selected weights by this (paper: 1.1); or a map per layer band and component, "
        'e.g. {default: 1.05, mlp: 1.1, "layers 0-5": 1.0} (docs/recipes.md "Edits with structure")',
    )
    prune: StrictBool = Field(False, description="set selected weights to 0")

    @model_validator(mode="after")
    def _exactly_one(self) -> EditConfig:
        if (self.scale is None) == (not self.prune):
            got = "both" if self.prune else "neither"
            raise ValueError(f"set exactly one of scale (a number >= 0) or prune: true (got {got})")
        return self

    @property
    def effective_scale(self) -> float | dict[str, float]:
        """The factor applied to selected weights: 0.0 when pruning; a map per layer band and component as written
        (every output resolves it per matrix: :func:`~mathneuro_edit.engine.apply.scale_of`).

        Example:
            >>> EditConfig(prune=True).effective_scale, EditConfig(scale={"default": 1, "mlp": 1.1}).effective_scale
            (0.0, {'default': 1.0, 'mlp': 1.1})
        """
        if self.prune:
            return 0.0
        return dict(self.scale) if isinstance(self.scale, dict) else float(self.scale)  # type: ignore[arg-type]


_WRITTEN = Literal["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"]  # by the gguf package
_LLAMA_CPP = Literal[
    "Q2_K", "Q3_K_S", "Q3_K_M", "Q3_K_L", "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M", "Q6_K", "IQ4_NL", "IQ4_XS"
]
GgufType = _WRITTEN | _LLAMA_CPP | Literal["base"]  # llama.cpp's quantizer makes the second kind


class OutputsConfig(StrictModel):
    """What is written."""

    checkpoint: StrictBool = Field(True, description="a full edited transformers checkpoint")
    adapter: StrictBool = Field(False, description="a PEFT adapter holding the edit")
    max_shard_size: ShardSize | None = Field(
        None, description='checkpoint shard size, e.g. "2GB" (default: transformers\')'
    )
    gguf: GgufType | list[GgufType] | None = Field(
        None,
        description="also write checkpoint/model-TYPE.gguf for llama.cpp (needs the gguf extra), one type or a list; "
        "K-quants (Q4_K_M, Q5_K_M, Q6_K, ...) are made by llama.cpp's quantizer; base: the GGUF base's own type",
    )
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto",
        description="dtype of the checkpoint's floating-point weights (auto: the base's own; a GGUF base: "
        "the GGUF's when it is F32/F16/BF16, else bfloat16)",
    )

    @model_validator(mode="after")
    def _something(self) -> OutputsConfig:
        if not (self.checkpoint or self.adapter):
            raise ValueError("at least one of checkpoint or adapter must be true")
        if self.gguf is not None and not self.checkpoint:
            raise ValueError("gguf is written from the checkpoint: set checkpoint: true or gguf: null")
        if isinstance(self.gguf, list) and (not self.gguf or len(set(self.gguf)) != len(self.gguf)):
            raise ValueError(f"gguf: a list of distinct types, at least one (got {self.gguf})")
        return self

    @property
    def gguf_types(self) -> list[str]:
        """``outputs.gguf`` as a list of types (empty: no GGUF).

        Example:
            >>> OutputsConfig(gguf="Q8_0").gguf_types, OutputsConfig(gguf=["Q8_0", "Q4_K_M"]).gguf_types
            (['Q8_0'], ['Q8_0', 'Q4_K_M'])
        """
        return [] if self.gguf is None else [self.gguf] if isinstance(self.gguf, str) else list(self.gguf)
