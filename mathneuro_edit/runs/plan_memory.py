"""The memory model of :mod:`.plan`: the peak RSS of each command's own process on a CPU machine.

Each figure is what the command holds at its peak, from the sizes :func:`~.plan.plan_from_config` derives from
``config.json`` (``b`` bytes per weight element, ``L`` entries of the largest scored weight, ``s`` the mask's
selected entries in it, ``k`` the SHiRA entries stored for it, ``M`` the mask in memory, ``R`` =
:data:`RUNTIME_BYTES`, ``B`` = :data:`~mathneuro_edit.weights.edit_plan.ROW_BLOCK_BYTES`):

- calibrate: ``R`` + the weights held in RAM (all of them, or what ``max_memory`` places on ``cpu``: layers
  offloaded to disk are read in place from the base's safetensors files, memory-mapped pages the kernel reclaims)
  + activations + statistics;
- mask: ``R`` + the largest weight and its scores + ``M`` + the statistics (no model is loaded);
- export: ``R`` + the largest edited tensor twice (original, edited) and its bool mask + ``M``; with GGUF, the
  writer's tensor and its float32 blocks;
- export --adapter: ``R + M + L`` (the layer's unpacked mask) ``+ s x`` :data:`SELECTED_ENTRY_BYTES` ``+``
  :data:`BLOCKS_HELD` ``x B`` (the writer reads a block of rows at a time, :mod:`~mathneuro_edit.weights.adapter`);
- verify (a checkpoint and its GGUF): ``R + M + L`` (the tensor's unpacked masks) ``+`` blocks, or the GGUF audit's
  checkpoint tensor and its float32 blocks (as the GGUF export), whichever is larger; the audit reads the GGUF's
  stored rows from the file a block at a time;
- verify (adapter): ``R + M + L + k x`` :data:`STORED_ENTRY_BYTES` ``+`` blocks;
- eval (a recipe with an ``evaluation`` section): ``R`` + the weights held in RAM + the larger of one general batch
  and one generation batch (:mod:`~mathneuro_edit.evaluation.memory`'s formulas; on a GPU those bytes are the device's);
- reproduce: a whole run in one process (calibrate, then the mask from the loaded model, then the exports; with an
  evaluation section, the larger of that and eval).

``python benchmarks/scale_8b.py`` measures each against these on Llama-3.1-8B's shapes (docs/scaling.md).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = [
    "RUNTIME_BYTES",
    "SELECTED_ENTRY_BYTES",
    "STORED_ENTRY_BYTES",
    "BLOCKS_HELD",
    "DEVICE_SIZES_GB",
    "mask_file_bytes",
    "shira_file_bytes",
    "weights_placement",
    "JobSizes",
    "ram_by_command",
]

# What a mathneuro-edit command's own process holds before any weight: the interpreter with torch, transformers,
# safetensors, tokenizers and accelerate imported, and a tokenizer. Measured as the peak RSS of each command on a
# 16.5M-parameter model of Llama 3.1's vocabulary (`python benchmarks/scale_8b.py --tiny`: 0.51-0.66 GB).
RUNTIME_BYTES = 550_000_000
# Per selected entry of the adapter's largest layer: its (row, col) as int64 (16), its flat position (8), its
# delta and the float64 difference it is rounded from (2 x 8), and the sort order (8).
SELECTED_ENTRY_BYTES = 48
# Per stored SHiRA entry read back by verify: the indices as int64 (16), the delta, and per-block selections.
STORED_ENTRY_BYTES = 24
# Row blocks alive at once in the adapter writer and the audits: base, edited, merged, PEFT's float32 sum.
BLOCKS_HELD = 5
# Common accelerator sizes (GB, 10^9 bytes) used to say what fits where.
DEVICE_SIZES_GB = (16, 24, 40, 48, 80, 96, 141, 192)


def mask_file_bytes(numel: int, selected: int) -> int:
    """Bytes :class:`~mathneuro_edit.engine.mask.Mask` stores for one tensor (its own bits-vs-indices rule).

    Example:
        >>> mask_file_bytes(1_000_000, 1_000), mask_file_bytes(1_000_000, 100_000)
        (4000, 125000)
    """
    idx = selected * (4 if numel < 2**31 else 8)
    bits = (numel + 7) // 8
    return idx if idx < bits else bits


def shira_file_bytes(layers: list[tuple[int, int, int]], item_bytes: int) -> tuple[int, int]:
    """``(r, bytes)`` of a PEFT SHiRA adapter over ``(rows, cols, selected)`` layers: one ``r`` for all layers, set by
    the densest (``ceil(selected / (rows + cols))``), ``r x (rows + cols)`` int32 index pairs and values per layer.

    Example:
        >>> shira_file_bytes([(4096, 4096, 100_000), (1024, 4096, 10_000)], 2)
        (13, 1730560)
    """
    used = [(rows, cols) for rows, cols, selected in layers if selected]
    if not used:
        return 0, 0
    r = max(math.ceil(selected / (rows + cols)) for rows, cols, selected in layers if selected)
    return r, sum(r * (rows + cols) * (2 * 4 + item_bytes) for rows, cols in used)


def weights_placement(model: torch.nn.Module, dtype_name: str, device_map: Any, max_memory: Any) -> dict[str, int]:
    """Weight bytes per device as accelerate would place them, the weights in ``dtype_name`` (``"bfloat16"``, ...);
    empty when it depends on the run machine."""
    import torch  # here: importing the planner stays free of torch (tests/test_imports_are_light.py)
    from accelerate.utils import compute_module_sizes, convert_file_size_to_int, infer_auto_device_map

    dtype = getattr(torch, dtype_name)
    sizes = compute_module_sizes(model, dtype=dtype)
    if isinstance(device_map, dict):
        placed = device_map
    elif max_memory is not None:
        caps = {k: convert_file_size_to_int(v) if isinstance(v, str) else v for k, v in max_memory.items()}
        quiet = logging.getLogger("accelerate.utils.modeling")  # "Device 0 is not available": planning elsewhere
        level = quiet.level
        quiet.setLevel(logging.ERROR)
        try:
            no_split = list(getattr(model, "_no_split_modules", None) or [])
            placed = infer_auto_device_map(model, max_memory=caps, dtype=dtype, no_split_module_classes=no_split)
        finally:
            quiet.setLevel(level)
    else:
        return {}
    out: dict[str, int] = {}
    for module, dev in placed.items():
        key = f"cuda:{dev}" if isinstance(dev, int) else str(dev)
        out[key] = out.get(key, 0) + int(sizes.get(module, 0))
    return out


@dataclass(frozen=True)
class JobSizes:
    """The byte counts of one planned job that the per-command figures combine (:func:`~.plan.plan_from_config`
    derives them from ``config.json``): the module docstring's ``b`` (``nbytes``), ``M`` (``mask``), ``L``
    (``largest``), ``s`` (``selected_largest``) and ``k`` (``stored_largest``); every weight at that dtype, the
    calibration's activations on one device, the statistics files of every set, and the larger evaluation batch's
    bytes beyond the weights (``None``: the recipe evaluates nothing, no ``eval`` figure)."""

    nbytes: int
    weights: int
    activation: int
    stats: int
    mask: int
    largest: int
    selected_largest: int
    stored_largest: int
    evaluation: int | None = None

    @property
    def mask_peak(self) -> int:
        """Mask selection, the weights read one tensor at a time: the largest weight, its float32 copy, two float32
        score matrices and bool masks, plus the mask and the statistics."""
        return self.largest * (self.nbytes + 3 * 4 + 2) + self.mask + self.stats

    @property
    def export_peak(self) -> int:
        """The streaming export: the largest edited tensor twice (original, edited) and its bool mask, plus the mask."""
        return self.largest * (2 * self.nbytes + 1) + self.mask


def ram_by_command(sizes: JobSizes, placement: dict[str, int]) -> dict[str, int]:
    """The peak RSS of each command's process on a CPU machine (the module docstring says what each holds), the
    weights held in RAM being all of them or, with a ``placement``, what it puts on ``cpu``."""
    from ..weights.edit_plan import ROW_BLOCK_BYTES  # here: edit_plan imports torch

    z = sizes
    resident = placement.get("cpu", 0) if placement else z.weights
    blocks = BLOCKS_HELD * ROW_BLOCK_BYTES
    calibrate = RUNTIME_BYTES + resident + z.activation + z.stats
    gguf = z.largest * (z.nbytes + 4) + z.mask
    adapter = z.mask + z.largest + z.selected_largest * SELECTED_ENTRY_BYTES + blocks
    verify = z.mask + z.largest + blocks
    verify_adapter = verify + z.stored_largest * STORED_ENTRY_BYTES
    figures = {
        "calibrate": calibrate,
        "mask": RUNTIME_BYTES + z.mask_peak,
        "export": RUNTIME_BYTES + z.export_peak,
        "export --gguf": RUNTIME_BYTES + max(z.export_peak, gguf),
        "export --adapter": RUNTIME_BYTES + adapter,
        "verify": RUNTIME_BYTES + max(verify, gguf),
        "verify (adapter)": RUNTIME_BYTES + verify_adapter,
        "reproduce": max(calibrate, RUNTIME_BYTES + resident + z.mask_peak, RUNTIME_BYTES + adapter),
    }
    if z.evaluation is not None:
        figures["eval"] = RUNTIME_BYTES + resident + z.evaluation
        figures["reproduce"] = max(figures["reproduce"], figures["eval"])
    return figures
