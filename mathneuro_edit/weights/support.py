"""Which outputs a model family gets, decided from its config alone (the model built on the meta device).

- ``checkpoint``: every family whose scored weights :func:`~mathneuro_edit.engine.targets.find_targets` finds
  (a baked checkpoint edits any tensor, whatever its layout).
- ``adapter`` (a stock PEFT SHiRA adapter): only when every scored weight is the weight of a plain
  ``nn.Linear``; PEFT cannot hold an exact delta of GPT-2's ``Conv1D``, fused 3-D MoE experts or a router
  module (a ``*Router`` that returns routing scores, even when it subclasses ``nn.Linear``). Such a family gets
  a checkpoint only, and the refusal names the recipe lines that give a run that works.
- ``gguf``: the families :mod:`.gguf_writer` writes (:func:`~mathneuro_edit.weights.gguf_arch.gguf_refusal`).

``plan`` prints this before any weights are read; a run checks it before loading the model.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from torch import nn

from ..engine.targets import Target, find_targets
from .gguf_arch import gguf_refusal

__all__ = ["OutputSupport", "output_support", "adapter_refusal", "peft_expressible"]

_LAYER = re.compile(r"^.*?\.\d+\.")  # "model.layers.0." and the like: the per-layer prefix


@dataclass(frozen=True)
class OutputSupport:
    """``None`` for an output this family gets; else the one-line refusal (what, why, the recipe line)."""

    model_type: str
    checkpoint: str | None
    adapter: str | None
    gguf: str | None

    def lines(self) -> list[str]:
        """``checkpoint: yes`` / ``adapter: no (...)`` / ``gguf: ...``, one line per output."""
        return [
            f"{k}: {'yes' if v is None else 'no: ' + v}"
            for k, v in (("checkpoint", self.checkpoint), ("adapter", self.adapter), ("gguf", self.gguf))
        ]


def peft_expressible(model: nn.Module, target: Target) -> bool:
    """Whether PEFT's SHiRA can hold an exact delta of ``target``: a plain ``nn.Linear``, not a router."""
    module = model.get_submodule(target.module_name)
    return target.kind == "linear" and isinstance(module, nn.Linear) and not type(module).__name__.endswith("Router")


def _what(model: nn.Module, t: Target) -> str:
    kind = type(model.get_submodule(t.module_name)).__name__
    if t.kind == "experts":
        return f"fused 3-D MoE experts, {kind}"
    return f"a conv1d weight, {kind}: not an nn.Linear" if t.kind == "conv1d" else f"{kind}: a router"


def adapter_refusal(model: nn.Module, targets: dict[str, Target], model_type: str) -> str | None:
    """None when every target is PEFT-expressible; else the refusal naming the first one and the recipe lines."""
    bad = [t for t in targets.values() if not peft_expressible(model, t)]
    if not bad:
        return None
    patterns = list(dict.fromkeys(re.escape(_LAYER.sub("", t.module_name + ".")) for t in bad))
    left = [n for n in targets if not any(re.search(p, n) for p in patterns)]
    shown = "[" + ", ".join(f"'{p}'" for p in patterns) + "]"  # YAML: single quotes keep the backslashes
    alt = f", or `targets.exclude: {shown}` (an adapter of the other {len(left)} weights)" if left else ""
    return (
        f"outputs.adapter: {model_type} gets a checkpoint only: {len(bad)} scored weights, e.g. {bad[0].name} "
        f"({_what(model, bad[0])}), cannot be a PEFT adapter exactly; set `outputs.adapter: false` in the "
        f"recipe (the checkpoint holds the edit){alt}"
    )


def output_support(
    model: nn.Module,
    config: dict[str, Any],
    *,
    include: Iterable[str] | None = None,
    exclude: Iterable[str] | None = None,
) -> OutputSupport:
    """The outputs ``model`` (built from ``config``, on the meta device: no weights) supports.

    Args:
        model: the causal-LM class built from the config (meta device is enough).
        config: its ``config.json`` as a dict (``model_type`` decides the GGUF export).
        include: the recipe's ``targets.include``.
        exclude: the recipe's ``targets.exclude``.

    Raises:
        InputError: from :func:`find_targets` (parameters this version cannot score).
    """
    model_type = str(config.get("model_type"))
    targets = find_targets(model, include=include, exclude=exclude)
    return OutputSupport(model_type, None, adapter_refusal(model, targets, model_type), gguf_refusal(config))
