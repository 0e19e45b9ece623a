"""The recipe sections naming what a run reads: the model to edit (``base``) and its texts (``data``, and the
:class:`Source` every text set is, also in ``evaluation``).

Apart from the other sections because they are the ones that name local files and Hub repos: every rule about
what a source or a base may be (the organism, the arithmetic task, ``hf://datasets/...``, a local file, a GGUF
file inside a repo, device placement) lives here, next to :meth:`Source.public_path` and
:meth:`BaseConfig.local_dir`, which :class:`~mathneuro_edit.recipe.schema.Recipe` uses for its public form and its
list of local inputs.
"""

from __future__ import annotations

import re
import string
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, StrictBool, StrictInt, model_validator

from ..organism import organism_path
from ..util.paths import ARITHMETIC, LOCAL, ORGANISM, is_local_path
from .types import Device, Positive, RepoId, Revision, StrictModel, value_rule

__all__ = ["Source", "Sources", "BaseConfig", "DataConfig"]

_HUB_DATASET = re.compile(r"^hf://datasets/(?:[\w.-]+/)?[\w.-]+$")
# the keys that do not apply to each kind of source (a refusal names them in this order)
_NOT_FOR = {
    "organism": ("field", "template", "config", "revision", "format", "hub_dataset"),
    "arithmetic": ("field", "template", "config", "split", "revision", "format", "hub_dataset"),
    "hub": ("format", "hub_dataset"),
    "local": ("config", "split", "revision"),
}


class Source(StrictModel):
    """Where texts come from: ``organism:math|general``, ``arithmetic``, ``hf://datasets/OWNER/NAME`` or a local file.

    A bare string is accepted as shorthand for ``{path: ...}``.
    """

    path: str = Field(
        min_length=1,
        description="organism:math, organism:general, arithmetic, hf://datasets/OWNER/NAME, or a local "
        ".jsonl/.json/.csv/.parquet/.txt file",
    )
    field: str | None = Field(None, description="record field holding the text (default: question+answer, else text)")
    template: str | None = Field(
        None, description='Python format string over record fields, e.g. "{question}\\n{answer}"'
    )
    config: str | None = Field(None, description="Hub dataset config name (gsm8k: main)")
    split: str | None = Field(None, description="Hub split (default train) or organism split train|test")
    revision: Revision | None = Field(None, description="Hub dataset revision (branch, tag or commit)")
    format: Literal["jsonl", "json", "csv", "parquet", "txt"] | None = Field(
        None, description="local file format (default: from the extension)"
    )
    hub_dataset: RepoId | None = Field(
        None,
        description="the Hub dataset a local file was taken from, e.g. Salesforce/wikitext (the card's datasets and "
        "model-index name it)",
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
        elif self.kind == "hub" and not _HUB_DATASET.match(self.path):
            raise ValueError(f"Hub sources look like hf://datasets/OWNER/NAME (got {self.path!r})")
        extra = [k for k in _NOT_FOR[self.kind] if getattr(self, k) is not None]
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


Sources = Annotated[list[Source], BeforeValidator(_one_or_more), value_rule(len, "must list at least one source")]
# A device's cap as accelerate reads it: whole bytes, or a number with a unit (accelerate's convert_file_size_to_int:
# GiB / MiB / KiB, GB / MB / KB); anything else would pass the recipe and fail the run's load as an internal error.
_SIZE = re.compile(r"\d+(\.\d+)?\s*[GMK]i?B", re.IGNORECASE)
MemorySize = Annotated[
    StrictInt | str,
    value_rule(
        lambda v: v >= 0 if isinstance(v, int) else _SIZE.fullmatch(v) is not None,
        'must be whole bytes (an integer) or a size with a unit, e.g. "20GiB" or "500MB"',
    ),
]
MaxMemory = Annotated[dict[int | str, MemorySize], BeforeValidator(_gpu_keys)]


class BaseConfig(StrictModel):
    """The model to edit."""

    model: str = Field(
        min_length=1, description="Hub model id, local folder, a local .gguf file, or organism (the shipped model)"
    )
    gguf_file: str | None = Field(
        None,
        description="a .gguf file inside the Hub repo (or local folder) named by model; dequantized once "
        "(docs/gguf.md)",
    )
    revision: Revision | None = Field(None, description="Hub revision (branch, tag or commit) of the model")
    dtype: Literal["float32", "bfloat16", "float16", "auto"] = Field(
        "auto", description="dtype the model is loaded and edited in (auto: the checkpoint's)"
    )
    device: Device = Field("auto", description="cpu, cuda, cuda:N, mps or auto")
    trust_remote_code: StrictBool = Field(False, description="run the model repo's own code (only for repos you trust)")
    # Why a key of its own, default off: transformers >= 5.2x with the `kernels` package swaps layers for compiled
    # kernels fetched from the Hub on an accelerator; that runs downloaded code and fails offline (issue 40).
    use_kernels: StrictBool = Field(
        False,
        description="let transformers replace layers with compiled kernels downloaded from the Hub "
        "(runs code from outside; needs the network or the kernels in the Hub cache)",
    )
    device_map: str | dict[str, int | str] | None = Field(
        None, description='accelerate device map for big models, e.g. "auto"'
    )
    max_memory: MaxMemory | None = Field(
        None, description='per-device memory cap with device_map, e.g. {0: "20GiB", cpu: "60GiB"}'
    )
    offload_folder: str | None = Field(None, description="folder for weights offloaded to disk with device_map")
    hub_id: RepoId | None = Field(
        None,
        description="the Hub model a local folder or GGUF file came from, e.g. HuggingFaceTB/SmolLM2-135M-Instruct "
        "(card base_model, title, GGUF name)",
    )
    hub_revision: Revision | None = Field(
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


class DataConfig(StrictModel):
    """Calibration data: one math source, one or more general sources."""

    math: Source = Field(description="math texts (GSM8K question/answer records are formatted automatically)")
    general: Sources = Field(description="general texts: one source or a list; each source is its own set")
    samples: Positive = Field(100, description="texts per set (math, and each general source)")
    seed: StrictInt = Field(
        0, description="seed of the sampling (a fixed shuffle: same seed, same texts on every machine)"
    )
