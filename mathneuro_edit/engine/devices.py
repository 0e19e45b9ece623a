"""Where the work runs: the accelerator when there is one, and how a lock names the device a run was made on.

Why one home: the mask step, the audits and the lock all ask "which device?", and the answer must be the same
everywhere: the model's (or the statistics') device when it is CUDA, else CUDA when it is present and asked for
(``"auto"``), else the CPU. What is computed on the chosen device gives the same bits as on the CPU (float32 scores,
integer selection, elementwise edits), so the choice is a matter of speed, never of the result.
"""

from __future__ import annotations

import platform
from typing import Any

import torch
from torch import nn

from .recorder import accelerate_hooks

__all__ = ["work_device", "selection_device", "model_device", "device_record", "device_type"]


def work_device(device: str | torch.device | None = "auto") -> torch.device:
    """The device a stage computes on: ``"auto"``/``None`` -> ``cuda`` when available, else ``cpu``; otherwise the
    device given (a ``cuda`` asked for on a machine without one falls back to ``cpu``: the result is the same).

    Why not MPS under ``"auto"``: the selection needs ``kthvalue``/``bincount`` on float32 and int32, which MPS
    lacks or emulates; the CPU gives the same bits.

    Example:
        >>> work_device("cpu")
        device(type='cpu')
    """
    if device is None or device == "auto":
        return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    dev = torch.device(device)
    return torch.device("cpu") if dev.type == "cuda" and not torch.cuda.is_available() else dev


def selection_device(device: str | torch.device | None = "auto") -> torch.device:
    """Where the mask step and the audits compute: :func:`work_device` when it is a CUDA device, else the CPU (the
    two where the same bits are tested; MPS is not asked to run an integer histogram select).

    Example:
        >>> selection_device("cpu").type
        'cpu'
    """
    dev = work_device(device)
    return dev if dev.type == "cuda" else torch.device("cpu")


def model_device(model: nn.Module) -> torch.device:
    """The device a model computes on, where its ``input_ids`` go: its input embedding's, or accelerate's execution
    device when the embedding is offloaded."""
    emb = getattr(model, "get_input_embeddings", lambda: None)()
    if emb is not None and emb.weight.device.type != "meta":
        return emb.weight.device
    for module in (emb, model):  # offloaded embedding: accelerate computes it on the hook's execution device
        for hook in accelerate_hooks(module) if module is not None else []:
            dev = getattr(hook, "execution_device", None)
            if isinstance(dev, int):  # accelerate's accelerator index (cuda:N on NVIDIA)
                found = torch.accelerator.current_accelerator()
                return torch.device(found.type if found is not None else "cuda", dev)
            if dev is not None:
                return torch.device(dev)
    real = [p.device for p in model.parameters() if p.device.type != "meta"]
    return real[0] if real else torch.device("cpu")


def device_type(record: Any) -> str | None:
    """``"cuda"`` from a lock's ``device`` record (``{"type": "cuda", "name": ...}``); ``None`` when absent.

    Example:
        >>> device_type({"type": "cuda", "name": "NVIDIA H200"}), device_type(None)
        ('cuda', None)
    """
    kind = record.get("type") if isinstance(record, dict) else None
    return kind if isinstance(kind, str) else None


def device_record(device: str | torch.device) -> dict[str, str]:
    """What the lock records of the device a run's statistics were computed on: its type and its model.

    The name is the accelerator's model (``NVIDIA H200``) or the CPU's architecture (``x86_64``): enough to say
    why two runs' float sums differ, nothing that identifies a machine.

    Example:
        >>> device_record("cpu")["type"]
        'cpu'
    """
    dev = torch.device(device)
    if dev.type == "cuda" and torch.cuda.is_available():
        name = torch.cuda.get_device_name(dev.index if dev.index is not None else torch.cuda.current_device())
    elif dev.type == "cpu":
        name = platform.machine() or "cpu"
    else:
        name = dev.type
    return {"type": dev.type, "name": name}
