"""Resource planner: what a MathNeuro run on a model needs, from its ``config.json`` alone (no weights).

The model is built on the meta device (``torch.device("meta")`` + ``AutoModelForCausalLM.from_config``: shapes,
no memory), :func:`~mathneuro_edit.engine.targets.find_targets` lists the scored weights, and the sizes follow from
the file formats and the algorithms: docs/scaling.md ("Memory math") gives each formula (weights, the statistics
and mask files, calibration's activations and peak, mask selection, export, and the evaluation's, which are
:mod:`~mathneuro_edit.evaluation.memory`'s: the evaluation itself uses them to lower its batch to a GPU's free
memory); :mod:`.plan_memory` the RAM of each command.

The plan also lists the outputs this family gets (:mod:`~mathneuro_edit.weights.support`: a PEFT adapter needs
every scored weight to be an ``nn.Linear``; the GGUF families), each ``None`` or its one-line refusal.

Estimates are meant to be within tens of percent; allocator overheads (e.g. ~1 GB of CUDA context) come on top.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..engine.edit_map import Setting, value_for
from ..engine.top_k_rule import is_top_k, top_k_error
from ..errors import InputError
from ..outputs.adapter import ADAPTER
from ..outputs.checkpoint import output_dtype
from ..outputs.registry import OUTPUTS, output_support
from ..util.config_sizes import check_config_file_sizes, check_config_sizes
from ..util.paths import no_such_local_folder
from ..weights.remote_code import check_remote_code
from .plan_memory import DEVICE_SIZES_GB, JobSizes, mask_file_bytes, ram_by_command, shira_file_bytes, weights_placement

if TYPE_CHECKING:
    import torch

    from ..recipe.schema import Recipe

# Why no torch, transformers, engine or weights module at the top: `plan` reads config.json alone, and importing
# this module stays light (tests/test_imports_are_light.py); the functions that build the meta model, list its
# targets or read a mask import them where they run.

__all__ = [
    "Plan",
    "PlanSettings",
    "plan_from_config",
    "plan_recipe",
    "load_config",
    "meta_model_from_config",
    "format_bytes",
]

_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
# The prompt tokens planned per problem and per worked example: a GSM8K problem with a chat template is 100-250
# tokens with the tokenizers of the paper's models; the evaluation itself measures its real prompts.
PROMPT_TOKENS = 256


def format_bytes(n: float) -> str:
    """Human size in decimal units (``GB`` = 10^9 bytes, as model sizes are quoted).

    Example:
        >>> format_bytes(16_060_522_496), format_bytes(3_500)
        ('16.1 GB', '3.5 KB')
    """
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


def load_config(config_or_path: Any, *, revision: str | None = None, trust_remote_code: bool = False) -> Any:
    """A transformers config from a config object, a dict, ``config.json``, a model folder, ``organism`` or a Hub id.

    Only ``config.json`` is read (a Hub id fetches that one file).

    Raises:
        InputError: a missing file or folder, invalid JSON, or a Hub id that cannot be fetched.
    """
    from huggingface_hub.errors import StrictDataclassError
    from transformers import AutoConfig, PretrainedConfig

    if isinstance(config_or_path, PretrainedConfig):
        return config_or_path
    if isinstance(config_or_path, dict):
        data = dict(config_or_path)
        check_config_sizes(data)
    else:
        text = str(config_or_path)
        path = Path(text).expanduser()
        if path.is_file():
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError, RecursionError) as e:
                raise InputError(
                    f"{path}: not a readable config.json ({str(e)[:120]}); pass the model's config.json"
                ) from None
            if not isinstance(data, dict):
                raise InputError(f"{path}: not a config.json (a JSON object); pass the model's config.json")
            check_config_sizes(data, str(path))
        else:
            from ..weights.base import resolve_model_path  # imports the organism and the GGUF reader: only here

            ref = resolve_model_path(text)
            check_remote_code(ref, trust_remote_code)
            check_config_file_sizes(ref)  # a local folder's sizes, before transformers validates or builds anything
            try:
                config = AutoConfig.from_pretrained(ref, revision=revision, trust_remote_code=trust_remote_code)
            except (OSError, ValueError, TypeError, StrictDataclassError) as e:  # transformers validates fields too
                first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
                raise InputError(
                    f"{text}: cannot read its config.json ({first}); check the id or folder, your network and HF_TOKEN"
                ) from None
            check_config_sizes(config.to_dict(), f"{text}: config.json")  # a Hub config: checked once fetched
            return config
    model_type = data.get("model_type")
    if not model_type:
        raise InputError("config: no model_type; pass a transformers config.json")
    try:
        return AutoConfig.for_model(model_type, **{k: v for k, v in data.items() if k != "model_type"})
    except ValueError as e:
        raise InputError(f"config: model_type {model_type!r} is unknown to transformers ({e})") from None
    except (TypeError, StrictDataclassError) as e:  # transformers 5 validates each field's type
        raise InputError(
            f"config: transformers cannot read this {model_type!r} config ({str(e)[:200]}); fix its config.json"
        ) from None


def meta_model_from_config(config: Any, *, trust_remote_code: bool = False) -> torch.nn.Module:
    """The causal-LM class of ``config`` built on the meta device: every shape, no memory, no weights read."""
    import torch
    from transformers import AutoModelForCausalLM

    try:
        with torch.device("meta"):
            return AutoModelForCausalLM.from_config(config, trust_remote_code=trust_remote_code)
    except ValueError as e:
        raise InputError(f"config: {type(config).__name__} is not a causal LM transformers can build ({e})") from None
    except (AttributeError, KeyError, TypeError, AssertionError, IndexError) as e:  # a field no model has (a
        # `text_config` mapping on a family without one was an internal AttributeError)
        raise InputError(
            f"config: transformers cannot build a {getattr(config, 'model_type', '?')!r} model from this config.json "
            f"({type(e).__name__}: {' '.join(str(e).split())[:160]}); this config.json is corrupt or edited: use the "
            "model's own"
        ) from None


@dataclass(frozen=True)
class Plan:
    """Sizes and memory needs of a MathNeuro run (all byte counts are estimates unless said exact)."""

    model_type: str
    dtype: str
    n_params: int  # exact, as are n_targets, targets_by_kind and n_target_params (tied weights counted once)
    n_targets: int
    targets_by_kind: dict[str, int]
    n_target_params: int
    weights_bytes: int
    stats_bytes: int  # exact up to the file header
    mask_bytes: int  # an upper bound unless mask_counted (a saved mask's counts, `plan --mask FILE`)
    activation_bytes: int
    calibration_peak_bytes: int
    mask_peak_bytes: int
    export_peak_bytes: int
    largest_target: tuple[str, int]
    # accelerate's placement, device -> weight bytes, when max_memory or a dict device_map is given, else empty
    placement: dict[str, int] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    # {"checkpoint": None, "adapter": "outputs.adapter: ... gets a checkpoint only ...", ...}: None where this
    # family gets the output, else why not and the recipe line (weights/support.py)
    outputs: dict[str, str | None] = field(default_factory=dict)
    # the edited checkpoint's dtype (outputs.dtype; auto resolved: the base's own, a GGUF base's source's) and size
    output_dtype: str = ""
    checkpoint_bytes: int = 0
    adapter_bytes: int = 0  # the PEFT SHiRA adapter's size and r (0 when this family gets no adapter)
    adapter_r: int = 0
    mask_counted: bool = False
    mask_file_bytes: int | None = None  # the size of the mask file given (`plan --mask FILE`)
    # the peak RSS of each command's own process on a CPU machine (plan_memory.ram_by_command; docs/scaling.md)
    ram: dict[str, int] = field(default_factory=dict)
    # the evaluation on one device (0: no evaluation settings): weights + one general (loss and KL) batch, weights +
    # one math generation batch, and the settings they assume
    eval_general_bytes: int = 0
    eval_math_bytes: int = 0
    eval_settings: dict[str, int] = field(default_factory=dict)
    # `plan --mask` with outputs.gguf: type -> the edit's estimated survival (outputs.gguf.estimate_gguf_survival)
    gguf_survival: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Plain data (``plan --json``), with what the text says in words too: each output as
        ``{"supported": true|false, "why_not": null|"..."}`` (the text's yes / no (...)), where calibration fits,
        and the summary line."""
        data = asdict(self)
        data["outputs"] = {k: {"supported": v is None, "why_not": v} for k, v in self.outputs.items()}
        data["fits"] = self.fits()
        data["summary"] = self.to_text().splitlines()[-1]
        return data

    def check_outputs(self, recipe: Recipe) -> None:
        """Raise the family's refusal (InputError, one line with the recipe line) for an output ``recipe`` asks for
        that it does not get."""
        for out in OUTPUTS.values():
            if out.is_asked(recipe) and self.outputs.get(out.name) is not None:
                raise InputError(str(self.outputs[out.name]))

    def fits(self) -> str:
        """Where calibration fits: the smallest common device, and how many 80/141 GB devices when split."""
        need = self.calibration_peak_bytes / 1e9
        # why 92%: leave room for the allocator, the CUDA context and accelerate's uneven layer split
        one = next((size for size in DEVICE_SIZES_GB if need <= size * 0.92), None)
        split = " or ".join(f"{math.ceil(need / (size * 0.92))} x {size} GB" for size in (80, 141))
        if one is not None and one <= 80:
            return f"fits one {one} GB device"
        head = f"fits one {one} GB device, or" if one is not None else "needs"
        return f"{head} {split} with device_map=auto (layers split across devices), or CPU/disk offload"

    def to_text(self) -> str:
        """A readable summary, ending with e.g. ``8.0B bfloat16: calibration needs ~18.2 GB on one device; ...``."""
        s, b = self.settings, format_bytes
        kinds = ", ".join(f"{n} {k}" for k, n in self.targets_by_kind.items())
        sets = 1 + s.get("general_sets", 1)
        calib = (
            f"~{b(self.calibration_peak_bytes)} on one device = weights + ~{b(self.activation_bytes)} "
            f"activations + {b(self.stats_bytes)} statistics"
        )
        lines = [
            f"model: {self.model_type}, {_count(self.n_params)} parameters, {self.dtype} "
            f"({b(self.weights_bytes)} of weights)",
            f"targets: {self.n_targets} weights ({kinds}), {_count(self.n_target_params)} entries; "
            f"largest {self.largest_target[0]} ({_count(self.largest_target[1])})",
            f"files: statistics {b(self.stats_bytes)} per set ({sets} sets), "
            + (
                f"mask {self.mask_file_bytes:,} bytes (the file given; its counts: {self.mask_bytes:,} bytes of tensors)"
                if self.mask_file_bytes is not None
                else f"mask {b(self.mask_bytes)} (its counts)"
                if self.mask_counted
                else f"mask <= {b(self.mask_bytes)} (top_k={s.get('top_k')})"
            )
            + (
                f", adapter {'' if self.mask_counted else '<= '}{b(self.adapter_bytes)} (r={self.adapter_r})"
                if self.adapter_bytes
                else ""
            )
            + (
                f", edited checkpoint ~{b(self.checkpoint_bytes)} ({self.output_dtype}, outputs.dtype)"
                if self.output_dtype
                else ""
            ),
            f"calibration (batch {s.get('batch_size')} x {s.get('max_length')} tokens): {calib}; {self.fits()}",
            f"mask selection (weights streamed from the checkpoint): ~{b(self.mask_peak_bytes)} of RAM",
            f"export (streaming, one tensor at a time): ~{b(self.export_peak_bytes)} of RAM, no accelerator",
        ]
        if self.eval_settings:
            e = self.eval_settings
            lines.append(
                f"evaluation (batch {e['batch_size']}): general loss and KL over full next-token distributions "
                f"({e['max_length']} tokens) ~{b(self.eval_general_bytes)} on one device, math generation with the "
                f"KV cache (<= {e['prompt_tokens']} prompt + {e['max_new_tokens']} new tokens) "
                f"~{b(self.eval_math_bytes)}; on a GPU the batches shrink to fit its free memory"
            )
        if self.gguf_survival:
            lines.append(
                "GGUF survival of the edit (edited weights still differing from the base's): " + _survival(self)
            )
        if self.ram:
            per = ", ".join(f"{k} ~{b(v)}" for k, v in self.ram.items())
            lines.append(f"RAM per command (peak of its own process, CPU): {per}")
        if self.placement:
            where = ", ".join(f"{d}: {b(n)}" for d, n in self.placement.items())
            lines.append(f"placement of the weights (accelerate): {where}; activations on the first device")
        if self.outputs:
            lines.append(f"outputs this family ({self.model_type}) supports:")
            lines += [f"  {k}: {'yes' if v is None else 'no (' + v + ')'}" for k, v in self.outputs.items()]
        peak, export = b(self.calibration_peak_bytes), b(self.export_peak_bytes)
        lines.append(
            f"summary: {_count(self.n_params)} {self.dtype}: calibration needs ~{peak} on one device; "
            f"export needs ~{export} of RAM"
        )
        return "\n".join(lines)


def _count(n: int) -> str:
    """``8030261248`` -> ``"8.03B"``, ``52480`` -> ``"52.5K"``."""
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g}{unit}" if n < 100 * scale else f"{n / scale:.0f}{unit}"
    return str(n)


@dataclass(frozen=True)
class PlanSettings:
    """What the planned run does, from the recipe's calibration, mask, outputs and evaluation keys (the defaults
    of :func:`plan_from_config`)."""

    dtype: str = "bfloat16"  # "auto" (or None, for output_dtype): the config's own
    output_dtype: str | None = None
    top_k: Setting = 0.05  # or a map per layer band and component (engine.edit_map)
    batch_size: int = 8
    max_length: int = 512
    granularity: str = "matrix"
    general_sets: int = 1
    include: list[str] | None = None
    exclude: list[str] | None = None
    evaluation: dict[str, int] | None = None  # {batch_size, max_length, prompt_tokens, max_new_tokens}; None: none


@dataclass(frozen=True)
class _TargetSizes:
    """What the scored weights add up to (one pass over the targets): counts per kind, entries, the statistics
    and mask files (one set), the widest layer, the largest weight and the SHiRA adapter's layers."""

    kinds: dict[str, int]
    entries: int
    stats: int
    mask: int
    widest: int
    largest: tuple[str, int]
    selected_largest: int
    shira_layers: list[tuple[int, int, int]]


def plan_from_config(
    config_or_path: Any,
    settings: PlanSettings | None = None,
    *,
    device_map: Any = None,
    max_memory: dict[Any, Any] | None = None,
    revision: str | None = None,
    trust_remote_code: bool = False,
    mask_file: Any = None,
) -> Plan:
    """Plan a run (a :class:`Plan`) from the model's config alone (:func:`load_config`: only ``config.json`` is
    fetched) and, once it exists, a saved mask of this base (``mask_file``: its exact counts replace the top-K
    bound in the mask size, the adapter's size and the adapter commands' memory). ``device_map``: a dict placement
    to sum up (``"auto"`` depends on the run machine: give ``max_memory``, the per-device caps accelerate's
    ``infer_auto_device_map`` places the weights with).
    """
    from ..engine.targets import find_targets

    s = settings or PlanSettings()
    _check_settings(s)
    config = load_config(config_or_path, revision=revision, trust_remote_code=trust_remote_code)
    dtype, output_dtype = _dtype(config, s.dtype, "dtype"), _dtype(config, s.output_dtype, "outputs.dtype")
    nbytes = _BYTES[dtype]
    model = meta_model_from_config(config, trust_remote_code=trust_remote_code)
    targets = find_targets(model, include=s.include, exclude=s.exclude)
    n_params = sum(p.numel() for p in model.parameters())  # parameters() yields a tied weight once
    counts = _mask_counts(mask_file, targets) if mask_file is not None else None
    t = _target_sizes(targets, config, s, counts)
    # the SHiRA adapter's deltas are in the base's own dtype (its config's), whatever the run loads it in
    shira_r, adapter_bytes = shira_file_bytes(t.shira_layers, _BYTES.get(_dtype(config, None, ""), nbytes))
    shape = targets[t.largest[0]].shape  # the adapter stores r x (rows + columns) entries of the largest weight
    stored_largest = shira_r * (shape[0] + shape[-1]) if len(shape) == 2 else 0
    eval_general, eval_math = _evaluation_bytes(config, s.evaluation, nbytes, t.widest)
    sizes = JobSizes(  # what the per-command memory figures combine
        nbytes=nbytes,
        weights=n_params * nbytes,
        activation=_activation_bytes(config, s, nbytes, t.widest),
        stats=(1 + s.general_sets) * t.stats,
        mask=t.mask,
        largest=t.largest[1],
        selected_largest=t.selected_largest,
        stored_largest=stored_largest,
        evaluation=max(eval_general, eval_math) if s.evaluation is not None else None,
    )
    weights = sizes.weights
    placement = weights_placement(model, dtype, device_map, max_memory)
    outputs_supported = output_support(model, config.to_dict(), include=s.include, exclude=s.exclude)
    adapter = outputs_supported[ADAPTER.name] is None
    return Plan(
        model_type=str(getattr(config, "model_type", "?")),
        dtype=dtype,
        n_params=n_params,
        n_targets=len(targets),
        targets_by_kind=t.kinds,
        n_target_params=t.entries,
        weights_bytes=weights,
        stats_bytes=t.stats,
        mask_bytes=t.mask,
        activation_bytes=sizes.activation,
        calibration_peak_bytes=weights + sizes.activation + t.stats,
        mask_peak_bytes=sizes.mask_peak,
        export_peak_bytes=sizes.export_peak,
        largest_target=t.largest,
        placement=placement,
        settings={k: getattr(s, k) for k in ("batch_size", "max_length", "top_k", "granularity", "general_sets")},
        outputs=outputs_supported,
        output_dtype=output_dtype,
        checkpoint_bytes=n_params * _BYTES[output_dtype],
        adapter_bytes=adapter_bytes if adapter else 0,
        adapter_r=shira_r if adapter else 0,
        mask_counted=counts is not None,
        mask_file_bytes=Path(mask_file).stat().st_size if isinstance(mask_file, (str, Path)) else None,
        ram=ram_by_command(sizes, placement),
        eval_general_bytes=weights + eval_general if s.evaluation is not None else 0,
        eval_math_bytes=weights + eval_math if s.evaluation is not None else 0,
        eval_settings=dict(s.evaluation or {}),
    )


def _check_settings(s: PlanSettings) -> None:
    """The settings' ranges, before any config is read."""
    for top_k in s.top_k.values() if isinstance(s.top_k, Mapping) else [s.top_k]:  # a map: each of its values
        if not is_top_k(top_k):
            raise top_k_error(top_k)
    if s.batch_size < 1 or s.max_length < 1:
        raise InputError(f"batch_size and max_length must be >= 1 (got {s.batch_size}, {s.max_length})")


def _dtype(config: Any, asked: str | None, key: str) -> str:
    """A dtype name: ``asked``, or for ``None`` / ``"auto"`` the config's own (``float32`` when it names none);
    checked against what a plan sizes (``key``: the setting a refusal names; ``""``: unchecked)."""
    if asked in (None, "auto"):
        own = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None) or "float32"
        asked = str(own).removeprefix("torch.")
    if key and asked not in _BYTES:
        raise InputError(f"{key}: must be float32, bfloat16, float16 or auto, got {asked!r}")
    return asked


def _target_sizes(targets: dict[str, Any], config: Any, s: PlanSettings, counts: dict[str, int] | None) -> _TargetSizes:
    """One pass over the scored weights: their kinds, entries, statistics and mask bytes, the selected count of
    each (the mask's own when ``counts`` is given, else the top-K count), and the widest layer."""
    from ..engine.mask import k_of

    kinds: dict[str, int] = {}
    stats = mask = entries = widest = 0
    vocab = int(getattr(config.get_text_config(), "vocab_size", 0) or 0)
    selected_of: dict[str, int] = {}
    shira_layers: list[tuple[int, int, int]] = []
    for t in targets.values():
        kinds[t.kind] = kinds.get(t.kind, 0) + 1
        numel = math.prod(t.shape)
        entries += numel
        stats += 2 * t.groups * t.d_in * 4 + t.groups * 8  # float32 norm/sq sums + int64 token counts
        d_out = numel // (t.groups * t.d_in)
        if counts is not None:  # the mask's own count (exact)
            selected = counts.get(t.name, 0)
        elif s.granularity == "row":
            selected = t.groups * d_out * k_of(value_for(s.top_k, t.name), t.d_in)
        else:  # the top-K count: an upper bound for mathneuro (it removes what general data also selects)
            selected = t.groups * k_of(value_for(s.top_k, t.name), d_out * t.d_in)
        selected_of[t.name] = selected
        mask += mask_file_bytes(numel, selected)
        if t.kind == "linear":
            shira_layers.append((d_out, t.d_in, selected))
        widest = max([widest, *(d for d in (t.d_in, d_out) if d != vocab)])  # the head's V outputs: never computed
    largest = max(((n, math.prod(t.shape)) for n, t in targets.items()), key=lambda x: x[1])
    return _TargetSizes(kinds, entries, stats, mask, widest, largest, selected_of[largest[0]], shira_layers)


def _activation_bytes(config: Any, s: PlanSettings, nbytes: int, widest: int) -> int:
    """Calibration's activations on one device (docs/scaling.md's formula, term by term)."""
    text = config.get_text_config()
    hidden = int(getattr(text, "hidden_size", 0) or widest)
    heads = int(getattr(text, "num_attention_heads", 0) or 1)
    tokens = s.batch_size * s.max_length
    return (
        tokens * (4 * hidden + 3 * widest) * nbytes  # one layer's transient tensors
        + s.batch_size * heads * s.max_length**2 * nbytes  # attention scores when materialised
        # no logits term: calibration stops before the LM head's matmul
        + 2 * tokens * widest * 4
    )  # hooks: float32 copy and its square of the widest input


def _evaluation_bytes(config: Any, evaluation: dict[str, int] | None, nbytes: int, widest: int) -> tuple[int, int]:
    """One general (loss and KL) batch and one math generation batch beyond the weights: the evaluation's own
    formulas (evaluation/memory.py) on the widest layer; ``(0, 0)`` without an evaluation."""
    if evaluation is None:
        return 0, 0
    from ..evaluation.memory import general_batch_bytes, generation_batch_bytes, shapes_of

    shapes = shapes_of(config, nbytes, widest=widest)
    eb = evaluation["batch_size"]
    return (
        general_batch_bytes(shapes, eb, evaluation["max_length"]),
        generation_batch_bytes(shapes, eb, evaluation["prompt_tokens"], evaluation["max_new_tokens"]),
    )


def _mask_counts(mask_file: Any, targets: dict[str, Any]) -> dict[str, int]:
    """Selected entries per scored weight of a saved mask (read without unpacking), checked against the config."""
    from ..engine.mask import as_mask

    mask = as_mask(mask_file)
    for entry in mask:
        if entry not in targets or tuple(mask.shape_of(entry)) != tuple(targets[entry].shape):
            raise InputError(
                f"mask entry {entry!r} {tuple(mask.shape_of(entry))} is not a scored weight of this config; the "
                "mask was computed for another model (or other targets): pass the mask of this recipe's base"
            )
    return {entry: selected for entry, (selected, _) in mask.counts().items()}


def plan_recipe(recipe: Any, mask_file: Any = None) -> Plan:
    """Plan a recipe's run: its base model's config, dtype, placement, calibration and mask settings (and the
    counts of ``mask_file``, a saved mask of this base, when given).
    """
    from ..weights.base import base_reference

    b = recipe.base
    local = b.local_dir()
    if local is not None and not local.exists():  # never a Hub lookup of a mistyped path
        raise no_such_local_folder(b.model)
    if b.is_gguf:  # its dequantized folder (created in the cache on first use: it holds the config)
        local = Path(base_reference(recipe.base))
    settings = PlanSettings(
        dtype=b.dtype,
        output_dtype=output_dtype(recipe),  # as the run resolves it; None: the base's own (its config's)
        top_k=recipe.mask.top_k,
        batch_size=recipe.calibration.batch_size,
        max_length=recipe.calibration.max_length,
        granularity=recipe.mask.granularity,
        general_sets=len(recipe.data.general),
        include=recipe.targets.include or None,
        exclude=recipe.targets.exclude or None,
        evaluation=_evaluation_settings(recipe),
    )
    plan = plan_from_config(
        str(local) if local is not None else b.model,
        settings,
        device_map=b.device_map,
        max_memory=b.max_memory,
        revision=b.revision,
        trust_remote_code=b.trust_remote_code,
        mask_file=mask_file,
    )
    if mask_file is not None and recipe.outputs.gguf_types and local is not None:  # reads the edited matrices
        from ..outputs.gguf import estimate_gguf_survival

        return dataclasses.replace(plan, gguf_survival=estimate_gguf_survival(recipe, mask_file, local))
    return plan


def _survival(plan: Plan) -> str:
    """``Q4_0 99.98% (estimated), Q4_K_M measured after quantizing`` of :attr:`Plan.gguf_survival`."""
    return "; ".join(
        f"{t} {v['survived_share']:.2%} of {int(v['edited']):,} (estimated with the gguf package)"
        if v.get("survived_share") is not None
        else f"{t}: {v.get('note', 'no edited weight')}"
        for t, v in plan.gguf_survival.items()
    )


def _evaluation_settings(recipe: Any) -> dict[str, int] | None:
    """What the recipe's evaluation runs, for :func:`plan_from_config` (``None`` without an evaluation section):
    the evaluation's batch, calibration's max_length (the general texts'), :data:`PROMPT_TOKENS` per problem and
    worked example, max_new_tokens."""
    from ..evaluation.runner import DEFAULT_BATCH_SIZE

    ev = recipe.evaluation
    if ev is None:
        return None
    return {
        "batch_size": DEFAULT_BATCH_SIZE,
        "max_length": recipe.calibration.max_length,
        "prompt_tokens": PROMPT_TOKENS * (1 + ev.n_shot),
        "max_new_tokens": ev.max_new_tokens,
    }
