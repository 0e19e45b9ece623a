"""Whether PEFT can hold the edit of a model family exactly, decided from its config alone (the model built on the
meta device).

A stock PEFT SHiRA adapter holds an exact delta only when every scored weight is the weight of a plain
``nn.Linear``; PEFT cannot hold an exact delta of GPT-2's ``Conv1D``, fused 3-D MoE experts or a router module (a
``*Router`` that returns routing scores, even when it subclasses ``nn.Linear``). Such a family gets a checkpoint
only, and the refusal names the recipe lines that give a run that works (``plan`` prints it before any weights are
read: :func:`mathneuro_edit.outputs.registry.output_support`).
"""

from __future__ import annotations

import re

from torch import nn

from ..engine.targets import Target

__all__ = ["adapter_refusal", "peft_expressible"]

_LAYER = re.compile(r"^.*?\.\d+\.")  # "model.layers.0." and the like: the per-layer prefix


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
