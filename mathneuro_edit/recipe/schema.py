"""The recipe: one validated description of a MathNeuro run (model, data, mask, edit, outputs, evaluation, Hub).

It is the single source of truth for the YAML files and the CLI options: ``docs/recipes.md`` documents every key
listed by :func:`~mathneuro_edit.recipe.io.recipe_fields`. Reading recipes (YAML, ``--set`` overrides, the embedded
quickstart) lives in :mod:`mathneuro_edit.recipe.io`, which imports this module (never the other way round).
The pieces this module assembles: the constrained value types in :mod:`mathneuro_edit.recipe.types`, the
``evaluation.lm_eval`` section and its old-key migration in :mod:`mathneuro_edit.recipe.lm_eval_keys`.
Every section is a pydantic v2 model that rejects unknown keys; a bad recipe raises ONE
:class:`~mathneuro_edit.errors.InputError` listing every problem with its dotted path, e.g. ``recipe.yaml: 2
problems: edit.scale: must be a finite number >= 0 (got nan); mask.top_k: must be in (0, 1] (got 1.5), did you
mean 0.015?`` (one line).

Special values: ``base.model: organism`` is the model shipped with the package, a data source path
``organism:math`` / ``organism:general`` is its synthetic data (:mod:`mathneuro_edit.organism.data`), and
``arithmetic`` is the built-in arithmetic task (:mod:`mathneuro_edit.data.arithmetic`).

Privacy: local paths (a base model folder, a data file, an offload folder) are personal. :meth:`Recipe.public_dict`
replaces them by ``"<local>"`` (data files keep their file name: ``"<local>/train.jsonl"``); the recipe hash,
the lock file and the model card only ever see that public form.
"""

from __future__ import annotations

import hashlib
import json
import re
import string
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BeforeValidator, Field, StrictBool, StrictInt, model_validator

from ..organism import organism_path
from ..util.paths import ARITHMETIC, LOCAL, ORGANISM, is_local_path, public_override
from .lm_eval_keys import LmEvalConfig, _migrate_lm_eval_keys
from .types import (
    Branch,
    Device,
    FiniteNonNegative,
    Level,
    NonNegative,
    Positive,
    Regex,
    RepoId,
    Scale,
    ShardSize,
    TopK,
    _check,
    _Model,
)

__all__ = [
    "Source",
    "BaseConfig",
    "DataConfig",
    "CalibrationConfig",
    "TargetsConfig",
    "MaskConfig",
    "EditConfig",
    "OutputsConfig",
    "LmEvalConfig",
    "EvaluationConfig",
    "HubConfig",
    "SweepConfig",
    "Recipe",
    "recipe_sha256",
]

_HUB_DATASET = re.compile(r"^hf://datasets/(?:[\w.-]+/)?[\w.-]+$")


class Source(_Model):
    """Where texts come from: ``organism:math|general``, ``arithmetic``, ``hf://datasets/OWNER/NAME`` or a local file.

    A bare string is accepted as shorthand for ``{path: ...}``.
    """

    path: str = Field(
        min_length=1,
        description="organism:math, organism:general, arithmetic, "
        "hf://datasets/OWNER/NAME, or a local .jsonl/.json/.csv/.parquet/.txt "
        "file",
    )
    field: str | None = Field(None, description="record field holding the text (default: question+answer, else text)")
    template: str | None = Field(
        None, description='Python format string over record fields, e.g. "{question}\\n{answer}"'
    )
    config: str | None = Field(None, description="Hub dataset config name (gsm8k: main)")
    split: str | None = Field(None, description="Hub split (default train) or organism split train|test")
    revision: str | None = Field(None, description="Hub dataset revision (branch, tag or commit)")
    format: Literal["jsonl", "json", "csv", "parquet", "txt"] | None = Field(
        None, description="local file format (default: from the extension)"
    )
    hub_dataset: RepoId | None = Field(
        None,
        description="the Hub dataset a local file was taken from, e.g. "
        "Salesforce/wikitext (the card's datasets and model-index "
        "name it)",
    )

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        return {"path": data} if isinstance(data, str) else data

    @model_validator(mode="after")
    def _consistent(self) -> Source:
        if self.field is not None and self.template is not None:
            raise ValueError("set field or template, not both")
        if self.template is not None:
            try:
                names = [f for _, f, _, _ in string.Formatter().parse(self.template) if f is not None]
            except ValueError as e:
                raise ValueError(f"template is not a valid format string: {e} (got {self.template!r})") from None
            if not names:
                raise ValueError(f"template names no field; use e.g. '{{question}}' (got {self.template!r})")
        if self.kind == "organism":
            if self.path not in ("organism:math", "organism:general"):
                raise ValueError(f"organism sources are organism:math or organism:general (got {self.path!r})")
            if self.split not in (None, "train", "test"):
                raise ValueError(f"organism split must be train or test (got {self.split!r})")
            extra = [k for k in ("field", "template", "config", "revision", "format") if getattr(self, k) is not None]
        elif self.kind == "arithmetic":
            extra = [
                k
                for k in ("field", "template", "config", "split", "revision", "format")
                if getattr(self, k) is not None
            ]
        elif self.kind == "hub":
            if not _HUB_DATASET.match(self.path):
                raise ValueError(f"Hub sources look like hf://datasets/OWNER/NAME (got {self.path!r})")
            extra = ["format"] if self.format is not None else []
        else:
            extra = [k for k in ("config", "split", "revision") if getattr(self, k) is not None]
        if self.hub_dataset is not None and self.kind != "local":
            extra.append("hub_dataset")
        if extra:
            raise ValueError(f"{', '.join(extra)} does not apply to a {self.kind} source ({self.path})")
        return self

    def public_path(self) -> str:
        """The path as published: a local file becomes ``"<local>/NAME"`` (privacy), others are unchanged."""
        return f"{LOCAL}/{Path(self.path).name}" if is_local_path(self.path) else self.path

    @property
    def kind(self) -> Literal["organism", "arithmetic", "hub", "local"]:
        """``"organism"``, ``"arithmetic"``, ``"hub"`` or ``"local"``."""
        if self.path.startswith("organism:"):
            return "organism"
        if self.path == ARITHMETIC:
            return "arithmetic"
        return "hub" if self.path.startswith("hf://") else "local"

    @property
    def hub_id(self) -> str | None:
        """The Hub dataset id (``openai/gsm8k``) of a ``hf://datasets/...`` source, else ``None``."""
        return self.path.removeprefix("hf://datasets/") if self.kind == "hub" else None


def _one_or_more(value: Any) -> Any:
    return value if isinstance(value, list) else [value]


def _gpu_keys(value: Any) -> Any:
    """GPU indices as ints (accelerate's convention), also when read back from JSON/YAML as ``"0"``."""
    return {int(k) if str(k).isdigit() else k: v for k, v in value.items()} if isinstance(value, dict) else value


Sources = Annotated[list[Source], BeforeValidator(_one_or_more), _check(len, "must list at least one source")]
MaxMemory = Annotated[dict[int | str, str], BeforeValidator(_gpu_keys)]


class BaseConfig(_Model):
    """The model to edit."""

    model: str = Field(
        min_length=1, description="Hub model id, local folder, a local .gguf file, or organism (the shipped model)"
    )
    gguf_file: str | None = Field(
        None,
        description="a .gguf file inside the Hub repo (or local folder) named by "
        "model; dequantized once (docs/gguf.md)",
    )
    revision: str | None = Field(None, description="Hub revision (branch, tag or commit) of the model")
    dtype: Literal["float32", "bfloat16", "float16", "auto"] = Field(
        "auto", description="dtype the model is loaded and edited in (auto: the checkpoint's)"
    )
    device: Device = Field("auto", description="cpu, cuda, cuda:N, mps or auto")
    trust_remote_code: StrictBool = Field(False, description="run the model repo's own code (only for repos you trust)")
    device_map: str | dict[str, int | str] | None = Field(
        None, description='accelerate device map for big models, e.g. "auto"'
    )
    max_memory: MaxMemory | None = Field(
        None, description='per-device memory cap with device_map, e.g. {0: "20GiB", cpu: "60GiB"}'
    )
    offload_folder: str | None = Field(None, description="folder for weights offloaded to disk with device_map")
    hub_id: RepoId | None = Field(
        None,
        description="the Hub model a local folder or GGUF file came from, e.g. "
        "HuggingFaceTB/SmolLM2-135M-Instruct (card base_model, title, "
        "GGUF name)",
    )
    hub_revision: str | None = Field(
        None, description="the revision of hub_id the local copy is (branch, tag or commit)"
    )

    @model_validator(mode="after")
    def _placement(self) -> BaseConfig:
        if self.device_map is not None and self.device != "auto":
            raise ValueError(f"set device or device_map, not both (got device={self.device!r})")
        if (self.max_memory is not None or self.offload_folder is not None) and self.device_map is None:
            raise ValueError("max_memory and offload_folder need device_map (e.g. device_map: auto)")
        if self.gguf_file is not None and (
            not self.gguf_file.lower().endswith(".gguf") or self.model.lower().endswith(".gguf")
        ):
            raise ValueError(
                f"gguf_file names a .gguf file inside the repo or folder given as model (got "
                f"model={self.model!r}, gguf_file={self.gguf_file!r}); for a local file set model only"
            )
        if self.gguf_file is not None and (
            self.gguf_file.startswith(("/", "\\", "~"))
            or ".." in re.split(r"[/\\]", self.gguf_file)
            or ":" in self.gguf_file
        ):
            raise ValueError(
                f"gguf_file names a file inside the repo or folder given as model, not a path out of it "
                f"(got {self.gguf_file!r}); for a local file elsewhere set model: PATH.gguf"
            )
        if self.hub_revision is not None and self.hub_id is None:
            raise ValueError("hub_revision needs hub_id (the Hub model whose revision it is)")
        if self.hub_id is not None and not self.is_gguf and not is_local_path(self.model) and self.model != LOCAL:
            raise ValueError(
                f"hub_id names the Hub origin of a local folder or GGUF file; model {self.model!r} "
                "is " + ("the shipped organism" if self.model == ORGANISM else "a Hub id already") + ": remove hub_id"
            )
        return self

    @property
    def is_gguf(self) -> bool:
        """Whether the base is a GGUF file (``model: FILE.gguf``, or a repo/folder with ``gguf_file``)."""
        return self.gguf_file is not None or self.model.lower().endswith(".gguf")

    def local_dir(self) -> Path | None:
        """The model's local folder (the shipped organism's for ``organism``), or ``None`` for a Hub id."""
        if self.model == ORGANISM:
            return organism_path()
        return Path(self.model).expanduser() if is_local_path(self.model) else None


class DataConfig(_Model):
    """Calibration data: one math source, one or more general sources."""

    math: Source = Field(description="math texts (GSM8K question/answer records are formatted automatically)")
    general: Sources = Field(description="general texts: one source or a list; each source is its own set")
    samples: Positive = Field(100, description="texts per set (math, and each general source)")
    seed: StrictInt = Field(
        0, description="seed of the sampling (a fixed shuffle: same seed, same texts on every machine)"
    )


class CalibrationConfig(_Model):
    """Forward passes that collect activation statistics."""

    max_length: Positive = Field(512, description="tokens per text (longer texts are truncated)")
    batch_size: Positive = Field(8, description="texts per forward pass")


class TargetsConfig(_Model):
    """Which weight matrices are scored (regular expressions searched in parameter names)."""

    include: list[Regex] = Field(
        default_factory=list, description="only parameters matching one of these (empty: all supported matrices)"
    )
    exclude: list[Regex] = Field(default_factory=list, description="drop parameters matching one of these")


class MaskConfig(_Model):
    """How the math-specific weights are chosen."""

    method: Literal["mathneuro", "wanda", "random"] = Field(
        "mathneuro", description="mathneuro (math top-K minus general top-K), wanda (math top-K only) or random"
    )
    top_k: TopK = Field(0.05, description="fraction of each matrix (or row) kept in a top-K set")
    granularity: Literal["matrix", "row"] = Field("matrix", description="top-K per matrix or per output row")
    seed: StrictInt = Field(0, description="seed of the random method")
    reference: Literal["official"] | None = Field(
        None,
        description="official: the released MathNeuro.py's selection bit for bit (per-sample products summed "
        "in the model's dtype, batch 1; docs/method.md); null: float32 statistics",
    )

    @model_validator(mode="after")
    def _official_is_per_matrix(self) -> MaskConfig:
        if self.reference == "official" and self.granularity != "matrix":
            raise ValueError(
                "reference official selects per matrix (the released script has no per-row top-K): "
                "set granularity: matrix"
            )
        return self


class EditConfig(_Model):
    """What is done to the selected weights: exactly one of ``scale: X`` or ``prune: true``."""

    scale: Scale | None = Field(None, description="multiply selected weights by this (paper: 1.1)")
    prune: StrictBool = Field(False, description="set selected weights to 0")

    @model_validator(mode="after")
    def _exactly_one(self) -> EditConfig:
        if (self.scale is None) == (not self.prune):
            got = "both" if self.prune else "neither"
            raise ValueError(f"set exactly one of scale (a number >= 0) or prune: true (got {got})")
        return self

    @property
    def effective_scale(self) -> float:
        """The factor applied to selected weights: 0.0 when pruning.

        Example:
            >>> EditConfig(prune=True).effective_scale
            0.0
        """
        return 0.0 if self.prune else float(self.scale)  # type: ignore[arg-type]


class OutputsConfig(_Model):
    """What is written."""

    checkpoint: StrictBool = Field(True, description="a full edited transformers checkpoint")
    adapter: StrictBool = Field(False, description="a PEFT adapter holding the edit")
    max_shard_size: ShardSize | None = Field(
        None, description='checkpoint shard size, e.g. "2GB" (default: transformers\')'
    )
    gguf: Literal["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "base"] | None = Field(
        None,
        description="also write checkpoint/model-TYPE.gguf for llama.cpp (needs the gguf extra); base: the "
        "GGUF base's own type",
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
        return self


class EvaluationConfig(_Model):
    """Before/after evaluation (optional)."""

    math: Source = Field(
        description="math problems with question/answer (GSM8K format, gold after '#### '; "
        "optional prefill), or arithmetic"
    )
    general: Sources = Field(description="general texts for loss and KL: one source or a list")
    samples: Positive = Field(100, description="problems and texts evaluated")
    seed: StrictInt = Field(0, description="seed of the sampling")
    n_shot: NonNegative = Field(0, description="worked examples put before each problem")
    max_new_tokens: Positive = Field(256, description="generation budget per problem")
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

    @model_validator(mode="before")
    @classmethod
    def _old_lm_eval_keys(cls, data: Any) -> Any:
        return _migrate_lm_eval_keys(data)


class HubConfig(_Model):
    """Where ``mathneuro-edit push`` publishes (optional)."""

    repo_id: RepoId = Field(description="target model repo, e.g. user/name")
    private: StrictBool = Field(False, description="create the repo private")
    revision: Branch | None = Field(None, description="branch to push to (created if missing; default main)")


_VARIANT_KEYS = ("data.", "calibration.", "targets.")


class SweepVariant(_Model):
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


class SweepConfig(_Model):
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
    batch_size: Positive = Field(64, description="problems generated at once (one shared prompt prefix per batch)")
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
        description="other math problems on which only the chosen setting and the base are evaluated (one paired test)",
    )
    general_samples: Positive | None = Field(
        None, description="general texts of the selection's loss and KL (null: evaluation.samples); fewer is faster"
    )
    kl_budget: FiniteNonNegative = Field(
        0.05, description="largest general KL(base || edited) a chosen setting may have"
    )
    alpha: Level = Field(0.05, description="level of the confirmation test (and of the Holm-adjusted selection p)")


class ConsistencyConfig(_Model):
    """How ``mathneuro-edit consistency`` draws its calibration subsets (the paper's data-efficiency figure)."""

    sizes: list[Positive] = Field(
        default_factory=lambda: [1, 4, 16], description="calibration samples per set of each random subset"
    )
    repeats: Positive = Field(3, description="random draws per size")


class Recipe(_Model):
    """A full, validated run description. Build it with :func:`load_recipe` or :func:`recipe_from_dict`."""

    base: BaseConfig
    data: DataConfig
    calibration: CalibrationConfig = Field(default_factory=CalibrationConfig)
    targets: TargetsConfig = Field(default_factory=TargetsConfig)
    mask: MaskConfig = Field(default_factory=MaskConfig)
    edit: EditConfig
    outputs: OutputsConfig = Field(default_factory=OutputsConfig)
    evaluation: EvaluationConfig | None = None
    hub: HubConfig | None = None
    sweep: SweepConfig = Field(default_factory=SweepConfig)
    consistency: ConsistencyConfig = Field(default_factory=ConsistencyConfig)

    @model_validator(mode="after")
    def _gguf_base_type(self) -> Recipe:
        if self.outputs.gguf == "base" and not self.base.is_gguf:
            raise ValueError(
                "outputs.gguf: base means the GGUF base's own type, but base.model is not a GGUF; "
                "choose a type (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1)"
            )
        return self

    def resolved_dict(self) -> dict[str, Any]:
        """The recipe as plain data with every default explicit (JSON/YAML types only)."""
        return self.model_dump(mode="json")

    def public_dict(self) -> dict[str, Any]:
        """:meth:`resolved_dict` with local paths redacted (``"<local>"``; data files keep their name)."""
        d = self.resolved_dict()
        if is_local_path(d["base"]["model"]):
            d["base"]["model"] = LOCAL
        if d["base"]["offload_folder"] is not None:
            d["base"]["offload_folder"] = LOCAL
        for name in ("data", "evaluation"):
            section = getattr(self, name)
            if section is not None:
                d[name]["math"]["path"] = section.math.public_path()
                for src, out in zip(section.general, d[name]["general"]):
                    out["path"] = src.public_path()
        for variant in (d.get("sweep") or {}).get("variants") or []:  # an override may name a local data file
            variant["set"] = [public_override(o) for o in variant.get("set") or []]
        lm = self.evaluation.lm_eval if self.evaluation is not None else None
        if lm is not None and lm.include_path is not None and is_local_path(lm.include_path):
            d["evaluation"]["lm_eval"]["include_path"] = f"{LOCAL}/{Path(lm.include_path).name}"  # the lock hashes it
        return d

    def local_inputs(self) -> list[tuple[str, Path]]:
        """``(what, path)`` of every local file or folder the recipe reads: the base (folder or ``.gguf`` file),
        each local data file (calibration and evaluation) and the lm-eval task folder. No output may be written
        onto one of them (:func:`mathneuro_edit.util.outdir.check_output`).

        Example:
            >>> from mathneuro_edit.recipe.io import quickstart_recipe
            >>> [what for what, _ in quickstart_recipe().local_inputs()]
            ['base folder']
        """
        found: list[tuple[str, Path]] = []
        if self.base.model == ORGANISM or is_local_path(self.base.model):
            local = self.base.local_dir()
            if local is not None:
                found.append(("base file" if self.base.model.lower().endswith(".gguf") else "base folder", local))
        for name in ("data", "evaluation"):
            section = getattr(self, name)
            if section is not None:
                for key, src in [
                    (f"{name}.math", section.math),
                    *[(f"{name}.general.{i}", g) for i, g in enumerate(section.general)],
                ]:
                    if src.kind == "local":
                        found.append((f"data file ({key})", Path(src.path).expanduser()))
        lm = self.evaluation.lm_eval if self.evaluation is not None else None
        if lm is not None and lm.include_path is not None:
            found.append(("lm-eval task folder", Path(lm.include_path).expanduser()))
        return found

    def to_yaml(self) -> str:
        """The resolved recipe as YAML (every default explicit, keys in documentation order)."""
        return yaml.safe_dump(self.resolved_dict(), sort_keys=False, allow_unicode=True)


def recipe_sha256(recipe: Recipe) -> str:
    """SHA-256 of the recipe's canonical JSON (public form: local paths redacted).

    Why the public form: the hash names the recipe in commits and cards without leaking paths, and is the same on
    every machine; the base weights and data contents are pinned separately by the lock's own hashes.

    Example:
        >>> from mathneuro_edit.recipe.io import quickstart_recipe
        >>> len(recipe_sha256(quickstart_recipe()))
        64
    """
    canonical = json.dumps(recipe.public_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()
