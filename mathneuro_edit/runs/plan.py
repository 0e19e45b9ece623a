"""Resource planner: what a MathNeuro run on a model needs, from its ``config.json`` alone (no weights).

The model is built on the meta device (``torch.device("meta")`` + ``AutoModelForCausalLM.from_config``: shapes,
no memory), :func:`~mathneuro_edit.engine.targets.find_targets` lists the scored weights, and the sizes follow from
the file formats and the algorithms (``b`` = bytes per weight element of the chosen dtype, ``B`` = batch size,
``T`` = max_length, ``H`` = hidden size, ``W`` = the widest target input or output (the MLP width), ``V`` =
vocabulary, ``h`` = attention heads):

- weights: ``parameters x b``;
- statistics file: per target ``2 x groups x d_in x 4`` (float32 ``norm_sum``, ``sq_sum``) ``+ groups x 8``
  (int64 ``token_count``);
- mask file: per target ``min(ceil(numel / 8), selected x 4)`` (bit-packed or int32 indices, the smaller), with
  ``selected`` the top-K count ``int(n * top_k)`` per matrix (per row with ``granularity="row"``; an upper bound
  for mathneuro, exact for wanda);
- calibration activations (no grad, one layer alive at a time): ``B T (4H + 3W) b`` (residual, norms, q/k/v,
  attention output, MLP gate/up/product) ``+ B h T^2 b`` (attention scores when materialised: eager attention or
  CPU; SDPA/flash on GPU need less) ``+ 2 B T W 4`` (our hooks' float32 copy and square); no ``B T V`` logits:
  the calibration forward stops once the last scored input is recorded (:mod:`~mathneuro_edit.engine.forward_stop`);
- calibration peak on one device: weights + activations + the float32 statistics;
- mask selection, weights read one tensor at a time (:func:`~mathneuro_edit.weights.loading.weights_from_checkpoint`):
  ``largest target x (b + 3 x 4 + 2)`` (the weight, its float32 copy, two float32 score matrices, bool masks)
  ``+`` the mask ``+`` the statistics;
- export (streaming, :mod:`~mathneuro_edit.weights.checkpoint_writer`): ``largest edited tensor x (2b + 1)`` (original, edited
  copy, bool mask) ``+`` the mask in memory; no accelerator.
- evaluation (with evaluation settings: a recipe's ``evaluation`` section), on one device: weights + one batch of
  the general loss and KL (``2 B T V b`` logits of the base and the edit at once ``+ 4 T V 4`` one text's float32
  work + one layer's activations) or of the math generation (``B (P + N) 2 L kv d b`` KV cache + the prompt's
  activations ``+ 2 B V 4``), with ``B`` the evaluation batch, ``T`` calibration's max_length, ``P`` =
  :data:`PROMPT_TOKENS` ``x (1 + n_shot)`` (an assumed bound), ``N`` max_new_tokens (formulas:
  :mod:`~mathneuro_edit.evaluation.memory`, which the evaluation itself uses to lower ``B`` to a GPU's free memory).

The plan also lists the outputs this family gets (:mod:`~mathneuro_edit.weights.support`: a PEFT adapter needs
every scored weight to be an ``nn.Linear``; the GGUF families), each ``None`` or its one-line refusal.

Estimates are meant to be within tens of percent; allocator overheads (e.g. ~1 GB of CUDA context) come on top.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..engine.mask import as_mask, k_of
from ..engine.targets import find_targets
from ..engine.topk import top_k_hint
from ..errors import InputError
from ..evaluation.memory import general_batch_bytes, generation_batch_bytes, shapes_of
from ..evaluation.runner import DEFAULT_BATCH_SIZE
from ..publish.outputs import ADAPTER, GGUF, OUTPUTS
from ..util.config_sizes import check_config_file_sizes, check_config_sizes
from ..util.paths import no_such_local_folder
from ..weights.base import base_reference, resolve_model_path
from ..weights.remote_code import check_remote_code
from ..weights.support import output_support
from .plan_memory import DEVICE_SIZES_GB, mask_file_bytes, ram_by_command, shira_file_bytes, weights_placement
from .steps import output_dtype

__all__ = ["Plan", "plan_from_config", "plan_recipe", "load_config", "meta_model_from_config", "format_bytes"]

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
    from transformers import AutoModelForCausalLM

    try:
        with torch.device("meta"):
            return AutoModelForCausalLM.from_config(config, trust_remote_code=trust_remote_code)
    except ValueError as e:
        raise InputError(f"config: {type(config).__name__} is not a causal LM transformers can build ({e})") from None


@dataclass(frozen=True)
class Plan:
    """Sizes and memory needs of a MathNeuro run (all byte counts are estimates unless said exact).

    Attributes:
        model_type, dtype: the config's family and the dtype planned for.
        n_params: parameters (tied weights once), exact.
        n_targets, targets_by_kind: scored weights, exact (``{"linear": 224, ...}``); n_target_params their entries.
        weights_bytes, stats_bytes, mask_bytes: sizes (stats exact up to the file header; mask an upper bound).
        activation_bytes, calibration_peak_bytes, mask_peak_bytes, export_peak_bytes: peak memory per step.
        largest_target: ``(name, entries)`` of the largest scored weight.
        placement: accelerate's placement ``device -> weight bytes`` when ``max_memory`` or a dict device_map is
            given, else empty.
        settings: batch_size, max_length, top_k, granularity, general_sets.
        outputs: ``{"checkpoint": None, "adapter": "outputs.adapter: ... gets a checkpoint only ...", "gguf": ...}``:
            None where this family gets the output, else why not and the recipe line (no weights read).
        adapter_bytes, adapter_r: the PEFT SHiRA adapter's size and ``r`` (0 when this family gets no adapter).
        mask_counted: whether the mask's sizes come from a saved mask's counts (exact) or from ``top_k`` (a bound).
        output_dtype, checkpoint_bytes: the dtype the edited checkpoint is written in (``outputs.dtype``; ``auto``
            resolved: the base's own, a GGUF base's source's) and the checkpoint's size at that dtype.
        ram: the peak RSS of each command's own process on a CPU machine (``calibrate``, ``mask``, ``export``,
            ``export --gguf``, ``export --adapter``, ``verify``, ``reproduce``), with :data:`~.plan_memory.RUNTIME_BYTES` and,
            with ``max_memory``, only the weights placed in RAM (disk-offloaded layers are read in place).
    """

    model_type: str
    dtype: str
    n_params: int
    n_targets: int
    targets_by_kind: dict[str, int]
    n_target_params: int
    weights_bytes: int
    stats_bytes: int
    mask_bytes: int
    activation_bytes: int
    calibration_peak_bytes: int
    mask_peak_bytes: int
    export_peak_bytes: int
    largest_target: tuple[str, int]
    placement: dict[str, int] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    # output -> None (this family gets it) or the one-line refusal: from the config alone (weights/support.py)
    outputs: dict[str, str | None] = field(default_factory=dict)
    output_dtype: str = ""
    checkpoint_bytes: int = 0
    adapter_bytes: int = 0
    adapter_r: int = 0
    mask_counted: bool = False
    # command -> the peak RSS of its own process on a CPU machine (docs/scaling.md: the model, what bounds each)
    ram: dict[str, int] = field(default_factory=dict)
    # evaluation on one device (0: no evaluation settings): weights + one general (loss and KL) batch, and weights +
    # one math generation batch; eval_settings: batch_size, max_length, prompt_tokens, max_new_tokens
    eval_general_bytes: int = 0
    eval_math_bytes: int = 0
    eval_settings: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Plain data (``plan --json``), with what the text says in words too: each output as
        ``{"supported": true|false, "why_not": null|"..."}`` (the text's yes / no (...)), where calibration fits,
        and the summary line."""
        data = asdict(self)
        data["outputs"] = {k: {"supported": v is None, "why_not": v} for k, v in self.outputs.items()}
        data["fits"] = self.fits()
        data["summary"] = self.to_text().splitlines()[-1]
        return data

    def check_outputs(self, *, adapter: bool, gguf: bool) -> None:
        """Raise the family's refusal (InputError, one line with the recipe line) for an output it does not get."""
        for output, asked in ((ADAPTER.name, adapter), (GGUF.name, gguf)):
            if asked and self.outputs.get(output) is not None:
                raise InputError(str(self.outputs[output]))

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
                f"mask {b(self.mask_bytes)} (its counts)"
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


def plan_from_config(
    config_or_path: Any,
    *,
    dtype: str = "bfloat16",
    output_dtype: str | None = None,
    top_k: float = 0.05,
    batch_size: int = 8,
    max_length: int = 512,
    granularity: str = "matrix",
    general_sets: int = 1,
    include: list[str] | None = None,
    exclude: list[str] | None = None,
    device_map: Any = None,
    max_memory: dict[Any, Any] | None = None,
    revision: str | None = None,
    trust_remote_code: bool = False,
    mask_file: Any = None,
    evaluation: dict[str, int] | None = None,
) -> Plan:
    """Plan a run from the model's config alone (and, once it exists, the mask's per-weight counts).

    Args:
        config_or_path: a transformers config, a dict, a ``config.json`` path, a model folder, ``organism`` or a
            Hub id (only ``config.json`` is fetched).
        dtype: ``"bfloat16"``, ``"float16"``, ``"float32"`` or ``"auto"`` (the config's dtype).
        output_dtype: the edited checkpoint's dtype (``outputs.dtype``); ``None`` or ``"auto"``: the config's.
        top_k: the mask fraction (sets the mask size bound).
        batch_size: calibration batch size.
        max_length: calibration tokens per text.
        granularity: ``"matrix"`` or ``"row"`` (top-K per matrix or per output row).
        general_sets: number of general sets (one statistics file each).
        include: target name patterns, as for calibrate.
        exclude: target name patterns, as for calibrate.
        device_map: a dict placement to sum up (``"auto"`` depends on the run machine: give ``max_memory``).
        max_memory: per-device caps; accelerate's ``infer_auto_device_map`` then places the weights.
        revision: Hub revision of the config.
        trust_remote_code: allow the repository's code (only for repos you trust).
        mask_file: a saved mask (or :class:`~mathneuro_edit.engine.mask.Mask`) of this base: its exact counts
            replace the top-K bound in the mask size, the adapter's size and the adapter commands' memory.
        evaluation: ``{"batch_size", "max_length", "prompt_tokens", "max_new_tokens"}`` of the evaluation to plan
            (``eval_general_bytes``, ``eval_math_bytes`` and the ``eval`` RAM figure); ``None``: no evaluation.

    Returns:
        A :class:`Plan`.

    Example:
        >>> print(plan_from_config("meta-llama/Llama-3.1-8B", dtype="bfloat16").to_text())  # doctest: +SKIP
    """

    if not 0 < top_k <= 1:
        raise InputError(f"top_k: must be in (0, 1], got {top_k!r}{top_k_hint(top_k)}; pass a fraction such as 0.05")
    if batch_size < 1 or max_length < 1:
        raise InputError(f"batch_size and max_length must be >= 1 (got {batch_size}, {max_length})")
    config = load_config(config_or_path, revision=revision, trust_remote_code=trust_remote_code)
    if dtype == "auto":
        cfg_dtype = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None) or "float32"
        dtype = str(cfg_dtype).removeprefix("torch.")
    if dtype not in _BYTES:
        raise InputError(f"dtype: must be float32, bfloat16, float16 or auto, got {dtype!r}")
    nbytes = _BYTES[dtype]
    if output_dtype in (None, "auto"):  # the checkpoint keeps the base's own dtype (its config's)
        own = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None) or "float32"
        output_dtype = str(own).removeprefix("torch.")
    if output_dtype not in _BYTES:
        raise InputError(f"outputs.dtype: must be float32, bfloat16, float16 or auto, got {output_dtype!r}")
    model = meta_model_from_config(config, trust_remote_code=trust_remote_code)
    targets = find_targets(model, include=include, exclude=exclude)

    n_params = sum(p.numel() for p in model.parameters())  # parameters() yields a tied weight once
    counts = _mask_counts(mask_file, targets) if mask_file is not None else None
    kinds: dict[str, int] = {}
    stats = mask = target_params = 0
    widest = 0
    vocab = int(getattr(config.get_text_config(), "vocab_size", 0) or 0)
    selected_of: dict[str, int] = {}
    shira_layers: list[tuple[int, int, int]] = []
    for t in targets.values():
        kinds[t.kind] = kinds.get(t.kind, 0) + 1
        numel = int(torch.Size(t.shape).numel())
        target_params += numel
        stats += 2 * t.groups * t.d_in * 4 + t.groups * 8  # float32 norm/sq sums + int64 token counts
        d_out = numel // (t.groups * t.d_in)
        if counts is not None:  # the mask's own count (exact)
            selected = counts.get(t.name, 0)
        elif granularity == "row":
            selected = t.groups * d_out * k_of(top_k, t.d_in)
        else:  # the top-K count: an upper bound for mathneuro (it removes what general data also selects)
            selected = t.groups * k_of(top_k, d_out * t.d_in)
        selected_of[t.name] = selected
        mask += mask_file_bytes(numel, selected)
        if t.kind == "linear":
            shira_layers.append((d_out, t.d_in, selected))
        widest = max([widest, *(d for d in (t.d_in, d_out) if d != vocab)])  # the head's V outputs: never computed
    name, largest = max(((n, int(torch.Size(t.shape).numel())) for n, t in targets.items()), key=lambda x: x[1])
    # the adapter stores deltas in the base's own dtype (its config's), whatever the run loads it in
    own = str(getattr(config, "dtype", None) or getattr(config, "torch_dtype", None) or "float32")
    shira_r, adapter_bytes = shira_file_bytes(shira_layers, _BYTES.get(own.removeprefix("torch."), nbytes))
    largest_shape = targets[name].shape

    text = config.get_text_config()
    hidden = int(getattr(text, "hidden_size", 0) or widest)
    heads = int(getattr(text, "num_attention_heads", 0) or 1)
    tokens = batch_size * max_length
    activation = (
        tokens * (4 * hidden + 3 * widest) * nbytes  # one layer's transient tensors
        + batch_size * heads * max_length**2 * nbytes  # attention scores when materialised
        # no logits term: calibration stops before the LM head's matmul
        + 2 * tokens * widest * 4
    )  # hooks: float32 copy and its square of the widest input
    weights = n_params * nbytes
    eval_general = eval_math = 0
    if evaluation is not None:  # the evaluation's own formulas (evaluation/memory.py), on the widest layer
        shapes = shapes_of(config, nbytes, widest=widest)
        eb = evaluation["batch_size"]
        eval_general = general_batch_bytes(shapes, eb, evaluation["max_length"])
        eval_math = generation_batch_bytes(shapes, eb, evaluation["prompt_tokens"], evaluation["max_new_tokens"])
    torch_dtype = getattr(torch, dtype)
    placement = weights_placement(model, torch_dtype, device_map, max_memory)
    outputs_supported = dict(zip(OUTPUTS, _support(model, config, include, exclude)))  # checkpoint, adapter, gguf
    mask_peak = largest * (nbytes + 3 * 4 + 2) + mask + (1 + general_sets) * stats
    export_peak = largest * (2 * nbytes + 1) + mask
    ram = ram_by_command(
        nbytes=nbytes,
        weights=weights,
        placement=placement,
        activation=activation,
        stats=(1 + general_sets) * stats,
        mask=mask,
        largest=largest,
        selected_largest=selected_of[name],
        stored_largest=shira_r * (largest_shape[0] + largest_shape[-1]) if len(largest_shape) == 2 else 0,
        mask_peak=mask_peak,
        export_peak=export_peak,
        evaluation=max(eval_general, eval_math) if evaluation is not None else None,
    )
    return Plan(
        model_type=str(getattr(config, "model_type", "?")),
        dtype=dtype,
        n_params=n_params,
        n_targets=len(targets),
        targets_by_kind=kinds,
        n_target_params=target_params,
        weights_bytes=weights,
        stats_bytes=stats,
        mask_bytes=mask,
        activation_bytes=activation,
        calibration_peak_bytes=weights + activation + stats,
        mask_peak_bytes=mask_peak,
        export_peak_bytes=export_peak,
        largest_target=(name, largest),
        placement=placement,
        settings=dict(
            batch_size=batch_size,
            max_length=max_length,
            top_k=top_k,
            granularity=granularity,
            general_sets=general_sets,
        ),
        outputs=outputs_supported,
        output_dtype=output_dtype,
        checkpoint_bytes=n_params * _BYTES[output_dtype],
        adapter_bytes=adapter_bytes if outputs_supported[ADAPTER.name] is None else 0,
        adapter_r=shira_r if outputs_supported[ADAPTER.name] is None else 0,
        mask_counted=counts is not None,
        ram=ram,
        eval_general_bytes=weights + eval_general if evaluation is not None else 0,
        eval_math_bytes=weights + eval_math if evaluation is not None else 0,
        eval_settings=dict(evaluation) if evaluation is not None else {},
    )


def _mask_counts(mask_file: Any, targets: dict[str, Any]) -> dict[str, int]:
    """Selected entries per scored weight of a saved mask (read without unpacking), checked against the config."""
    mask = as_mask(mask_file)
    for entry in mask:
        if entry not in targets or tuple(mask.shape_of(entry)) != tuple(targets[entry].shape):
            raise InputError(
                f"mask entry {entry!r} {tuple(mask.shape_of(entry))} is not a scored weight of this config; the "
                "mask was computed for another model (or other targets): pass the mask of this recipe's base"
            )
    return {entry: selected for entry, (selected, _) in mask.counts().items()}


def _support(model: torch.nn.Module, config: Any, include: Any, exclude: Any) -> tuple[str | None, ...]:
    s = output_support(model, config.to_dict(), include=include, exclude=exclude)
    return s.checkpoint, s.adapter, s.gguf


def _output_dtype(recipe: Any) -> str | None:
    """``outputs.dtype`` as the run resolves it (:func:`~mathneuro_edit.runs.steps.output_dtype`); ``None``: the
    base's own (its config's dtype)."""
    return output_dtype(recipe)


def plan_recipe(recipe: Any, mask_file: Any = None) -> Plan:
    """Plan a recipe's run: its base model's config, dtype, placement, calibration and mask settings (and the
    counts of ``mask_file``, a saved mask of this base, when given).

    Example:
        >>> print(plan_recipe(load_recipe("recipes/quickstart.yaml")).to_text())  # doctest: +SKIP
    """
    b = recipe.base
    local = b.local_dir()
    if local is not None and not local.exists():  # never a Hub lookup of a mistyped path
        raise no_such_local_folder(b.model)
    if b.is_gguf:  # its dequantized folder (created in the cache on first use: it holds the config)
        local = Path(base_reference(recipe))
    return plan_from_config(
        str(local) if local is not None else b.model,
        dtype=b.dtype,
        output_dtype=_output_dtype(recipe),
        top_k=recipe.mask.top_k,
        batch_size=recipe.calibration.batch_size,
        max_length=recipe.calibration.max_length,
        granularity=recipe.mask.granularity,
        general_sets=len(recipe.data.general),
        include=recipe.targets.include or None,
        exclude=recipe.targets.exclude or None,
        device_map=b.device_map,
        max_memory=b.max_memory,
        revision=b.revision,
        trust_remote_code=b.trust_remote_code,
        mask_file=mask_file,
        evaluation=_evaluation_settings(recipe),
    )


def _evaluation_settings(recipe: Any) -> dict[str, int] | None:
    """What the recipe's evaluation runs, for :func:`plan_from_config` (``None`` without an evaluation section):
    the evaluation's batch, calibration's max_length (the general texts'), :data:`PROMPT_TOKENS` per problem and
    worked example, max_new_tokens."""
    ev = recipe.evaluation
    if ev is None:
        return None
    return {
        "batch_size": DEFAULT_BATCH_SIZE,
        "max_length": recipe.calibration.max_length,
        "prompt_tokens": PROMPT_TOKENS * (1 + ev.n_shot),
        "max_new_tokens": ev.max_new_tokens,
    }
