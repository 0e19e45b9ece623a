"""Which parameters of a model MathNeuro scores, and how each one maps inputs to weights.

Contract: a *target* is a weight whose entries multiply input features, so that the MathNeuro importance
``|W_ij| * stat_j`` is defined. Every target is described by a :class:`Target` that says how to view its
weight as ``(groups, rows, d_in)`` (its *canonical view*): one group for a plain matrix, one per expert for
fused MoE experts, and ``rows`` are output features.

Handled:

- ``nn.Linear``: weight ``(d_out, d_in)``.
- transformers ``Conv1D`` (GPT-2 family): weight stored transposed, ``(d_in, d_out)``.
- MoE routers (transformers 5 ``*Router`` modules holding a 2-D ``weight`` used as a linear map).
- fused MoE experts as transformers 5 stores them (modules decorated with ``use_experts_implementation``:
  3-D ``gate_up_proj`` / ``up_proj`` and ``down_proj``, ``(E, d_out, d_in)`` or transposed ``(E, d_in, d_out)``).
- Llama 4's fused experts (``Llama4TextExperts``, not decorated): every token goes to every expert, scaled by
  its router score (0 when not routed), as ``(E * tokens, d_in)``; weights ``(E, d_in, d_out)`` (transposed).
- JetMoE's ``ParallelExperts`` (its MoE MLP and its mixture of attention heads): one 3-D ``weight``
  ``(E, d_out, d_in)`` per module, called with the routed tokens sorted by expert and the count per expert; the
  token of each row is the ``batch_index`` its sibling ``router`` returned.

Never targets: embeddings, 1-D parameters (norms, biases), expert biases, and an ``lm_head`` tied to the
input embedding (editing it would silently edit the embeddings) unless asked for. Any other parameter of two
or more dimensions is reported by :func:`find_targets` as unhandled (an error naming it), never skipped
silently: the user can exclude it explicitly with a regular expression.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from ..errors import InputError
from ..util.patterns import pattern_problem

__all__ = [
    "Target",
    "find_targets",
    "canonical_view",
    "model_fingerprint",
    "is_dense_dispatch_experts",
    "is_parallel_experts",
]

TargetKind = Literal["linear", "conv1d", "experts"]


@dataclass(frozen=True)
class Target:
    """One scored weight.

    Attributes:
        name: the parameter's name in ``model.named_parameters()`` (also the key in statistics and masks).
        kind: ``"linear"`` (``(d_out, d_in)``), ``"conv1d"`` (``(d_in, d_out)``) or ``"experts"``
            (``(E, d_out, d_in)``, or ``(E, d_in, d_out)`` when ``transposed``).
        module_name: the module whose input feeds this weight.
        transposed: for experts, whether the per-expert matrices are stored ``(d_in, d_out)``.
        role: for experts, ``"up"`` (fed by the hidden states) or ``"down"`` (fed by the gated intermediate).
    """

    name: str
    kind: TargetKind
    module_name: str
    shape: tuple[int, ...]
    transposed: bool = False
    role: str = ""

    @property
    def groups(self) -> int:
        """Independent matrices in this weight: the number of experts, else 1."""
        return self.shape[0] if self.kind == "experts" else 1

    @property
    def d_in(self) -> int:
        """Number of input features (the length of one group's statistic)."""
        if self.kind == "linear":
            return self.shape[1]
        if self.kind == "conv1d":
            return self.shape[0]
        return self.shape[1] if self.transposed else self.shape[2]

    @property
    def stat_shape(self) -> tuple[int, int]:
        """Shape of this target's statistics: ``(groups, d_in)``."""
        return (self.groups, self.d_in)


def canonical_view(weight: torch.Tensor, target: Target) -> torch.Tensor:
    """View a target's weight (of shape ``target.shape``) as ``(groups, d_out, d_in)`` without copying: writing to
    the view writes to the weight.

    Example:
        >>> t = Target("h.0.attn.c_attn.weight", "conv1d", "h.0.attn.c_attn", (4, 12))
        >>> canonical_view(torch.zeros(4, 12), t).shape
        torch.Size([1, 12, 4])
    """
    if tuple(weight.shape) != target.shape:
        raise InputError(
            f"{target.name}: weight has shape {tuple(weight.shape)} but {target.shape} was expected; "
            "the statistics or mask were computed for another model: recompute them on this one"
        )
    if target.kind == "linear":
        return weight.unsqueeze(0)  # (1, d_out, d_in)
    if target.kind == "conv1d":
        return weight.t().unsqueeze(0)  # (1, d_out, d_in): Conv1D stores (d_in, d_out)
    return weight.transpose(1, 2) if target.transposed else weight  # (E, d_out, d_in)


def _is_conv1d(module: nn.Module) -> bool:
    # by name, not imported: a transformers without Conv1D still works for other models
    return type(module).__name__ == "Conv1D" and type(module).__module__.startswith("transformers")


def _is_fused_experts(module: nn.Module) -> bool:
    # transformers 5 decorates every fused-experts class with `use_experts_implementation`, which sets these
    # attributes; they say how the 3-D weights are laid out, so one code path serves all MoE families.
    return all(hasattr(module, a) for a in ("has_gate", "is_transposed", "has_bias")) and hasattr(module, "down_proj")


def is_dense_dispatch_experts(module: nn.Module) -> bool:
    """Llama 4's experts layout (module docstring): ``gate_up_proj`` ``(E, d_in, 2 * inter)``, ``down_proj``
    ``(E, inter, d_in)``."""
    up, down = getattr(module, "gate_up_proj", None), getattr(module, "down_proj", None)
    return (
        not _is_fused_experts(module)
        and type(module).__name__.endswith("Experts")
        and isinstance(up, nn.Parameter)
        and isinstance(down, nn.Parameter)
        and up.dim() == 3
        and down.dim() == 3
        and up.shape[0] == down.shape[0] == getattr(module, "num_experts", -1)
        and up.shape[2] == 2 * down.shape[1]
        and up.shape[1] == down.shape[2]
    )


def _weight_if_named(module: nn.Module, class_suffix: str, dim: int) -> nn.Parameter | None:
    """``module.weight`` when the module's class name ends in ``class_suffix`` and it is a ``dim``-D parameter."""
    weight = getattr(module, "weight", None)
    named = type(module).__name__.endswith(class_suffix)
    return weight if named and isinstance(weight, nn.Parameter) and weight.dim() == dim else None


def is_parallel_experts(module: nn.Module) -> bool:
    """JetMoE's layout: ``weight`` ``(E, d_out, d_in)``, ``forward(inputs, expert_size)`` (rows sorted by expert)."""
    weight = _weight_if_named(module, "ParallelExperts", 3)
    return weight is not None and weight.shape[0] == getattr(module, "num_experts", -1)


def _is_router(module: nn.Module) -> bool:
    return _weight_if_named(module, "Router", 2) is not None and not isinstance(module, nn.Embedding)


def _tied_lm_head_names(model: nn.Module) -> set[str]:
    """Names under which an output embedding tied to the input embedding appears."""
    try:
        emb_in, emb_out = model.get_input_embeddings(), model.get_output_embeddings()
    except (AttributeError, NotImplementedError):  # not a transformers LM, or one without embeddings
        return set()
    if emb_in is None or emb_out is None or emb_out.weight is not emb_in.weight:
        return set()
    return {name for name, module in model.named_modules(remove_duplicate=False) if module is emb_out}


def _compile(patterns: Iterable[str] | None, what: str) -> list[re.Pattern[str]]:
    compiled = []
    for p in patterns or ():
        problem = pattern_problem(p)  # invalid, or a repeat inside a repeat (minutes of backtracking)
        if problem is not None:
            raise InputError(f"{what}: {p!r}: {problem}; fix the pattern")
        compiled.append(re.compile(p))
    return compiled


def find_targets(
    model: nn.Module,
    *,
    include: Iterable[str] | None = None,
    exclude: Iterable[str] | None = None,
    include_tied_lm_head: bool = False,
) -> dict[str, Target]:
    """List the weights MathNeuro scores, in module order.

    ``include``: regular expressions (``re.search``) over parameter names; when given, only matching targets are
    kept. ``exclude``: matching parameters are dropped (also unhandled ones). ``include_tied_lm_head``: score an
    ``lm_head`` tied to the input embedding (edits the embedding too).

    Raises:
        InputError: a parameter of 2+ dimensions that is neither a target nor an embedding (a model family
            this version cannot score); the message names them and how to exclude them.

    Example:
        >>> from transformers import LlamaConfig, LlamaForCausalLM
        >>> cfg = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        ...                   num_attention_heads=2, num_key_value_heads=2)
        >>> list(find_targets(LlamaForCausalLM(cfg), include=[r"q_proj"]))
        ['model.layers.0.self_attn.q_proj.weight']
    """
    inc, exc = _compile(include, "include"), _compile(exclude, "exclude")
    found, covered = _module_targets(model, include_tied_lm_head)

    names_in_model = {n for n, _ in model.named_parameters(remove_duplicate=False)}
    unhandled = [
        n
        for n, p in model.named_parameters()
        if p.dim() >= 2 and n not in found and n not in covered and not any(r.search(n) for r in exc)
    ]
    if unhandled:
        shown = ", ".join(unhandled[:5]) + (f" and {len(unhandled) - 5} more" if len(unhandled) > 5 else "")
        raise InputError(
            f"cannot score {len(unhandled)} parameter(s) of this model family: {shown}; "
            "exclude them explicitly (e.g. exclude: ['<regex>']) or report the model family"
        )
    result = {
        name: t
        for name, t in found.items()
        if name in names_in_model
        and (not inc or any(r.search(name) for r in inc))
        and not any(r.search(name) for r in exc)
    }
    if not result:
        raise InputError("no target weights left after include/exclude; loosen the include/exclude patterns")
    return result


def _module_targets(model: nn.Module, include_tied_lm_head: bool) -> tuple[dict[str, Target], set[str]]:
    """Every weight a module kind says is scored, in module order, and the parameters that are covered without
    being scored (embeddings, a tied ``lm_head``, expert biases)."""
    tied = _tied_lm_head_names(model)
    found: dict[str, Target] = {}
    covered: set[str] = set()  # parameters that are targets, embeddings or deliberately not scored

    for mod_name, module in model.named_modules():
        prefix = f"{mod_name}." if mod_name else ""
        if isinstance(module, nn.Embedding):
            covered.add(prefix + "weight")
        elif isinstance(module, nn.Linear) or _is_router(module):
            name = prefix + "weight"
            if mod_name in tied:
                covered.add(name)
            if mod_name not in tied or include_tied_lm_head:
                found[name] = Target(name, "linear", mod_name, tuple(module.weight.shape))
        elif _is_conv1d(module):
            found[prefix + "weight"] = Target(prefix + "weight", "conv1d", mod_name, tuple(module.weight.shape))
        elif _is_fused_experts(module):
            up = "gate_up_proj" if module.has_gate else "up_proj"
            for attr, role in ((up, "up"), ("down_proj", "down")):
                w = getattr(module, attr)
                found[prefix + attr] = Target(
                    prefix + attr, "experts", mod_name, tuple(w.shape), bool(module.is_transposed), role
                )
            for pname, _ in module.named_parameters(recurse=False):
                covered.add(prefix + pname)  # expert biases are not weight matrices: never scored
        elif is_parallel_experts(module):
            found[prefix + "weight"] = Target(prefix + "weight", "experts", mod_name, tuple(module.weight.shape))
        elif is_dense_dispatch_experts(module):
            for attr, role in (("gate_up_proj", "up"), ("down_proj", "down")):
                w = getattr(module, attr)
                found[prefix + attr] = Target(prefix + attr, "experts", mod_name, tuple(w.shape), True, role)
    return found, covered


def model_fingerprint(model: nn.Module) -> str:
    """sha256 over the model's parameter names, shapes and dtypes (not values), in module order.

    Example:
        >>> len(model_fingerprint(nn.Linear(2, 3)))
        64
    """
    import hashlib

    h = hashlib.sha256()
    for name, p in model.named_parameters():
        h.update(f"{name}:{tuple(p.shape)}:{str(p.dtype).removeprefix('torch.')}\n".encode())
    return h.hexdigest()
