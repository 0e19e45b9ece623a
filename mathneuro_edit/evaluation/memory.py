"""What an evaluation batch holds on the device, and the batch that fits it: the one memory model of ``eval``,
shared by :mod:`~mathneuro_edit.runs.plan` (what it predicts) and the evaluation itself (how it batches).

With ``B`` rows per batch, ``T`` tokens per general text, ``P`` prompt tokens and ``N`` new tokens per problem,
``V`` the vocabulary, ``H`` the hidden size, ``W`` the widest layer input or output (the MLP width), ``h``
attention heads, ``L`` layers, ``kv`` key/value heads of ``d`` dimensions and ``b`` bytes per element of the model's
dtype, beyond the weights:

- general loss and KL (:func:`general_batch_bytes`): ``2 B T V b`` (the base's and the edited logits, alive at
  once: the KL compares full next-token distributions) ``+ 4 T V 4`` (one text's float32 log-softmax of each, its
  float32 copy on the way, and the KL terms; one text at a time) ``+ B T (4H + 3W) b + B h T^2 b`` (one layer's
  activations, as calibration's);
- math generation with the KV cache (:func:`generation_batch_bytes`): ``B (P + N) 2 L kv d b`` (the cache)
  ``+ B P (4H + 3W) b + B h P^2 b`` (the prompt's forward) ``+ 2 B V 4`` (the last position's logits in float32
  and the processors' copy: ``generate`` keeps one position's logits).

:func:`fit_batch` lowers a requested batch until its bytes fit :func:`device_budget` (90% of a GPU's free memory
once the model is loaded; no limit on the CPU, whose batches stay as asked): an 8B model with a 128k vocabulary
evaluates where it calibrated, with smaller batches, and the numbers do not depend on the batch (each text's and
problem's results are its own).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

__all__ = [
    "EvalShapes",
    "shapes_of",
    "general_batch_bytes",
    "generation_batch_bytes",
    "fit_batch",
    "device_budget",
    "model_shapes",
    "logits_device",
    "fitted_batch",
    "BUDGET_SHARE",
]

# Why 90%: the CUDA caching allocator rounds blocks up and fragments; the rest is its room.
BUDGET_SHARE = 0.9


@dataclass(frozen=True)
class EvalShapes:
    """The sizes the formulas read from a model's config: vocabulary, hidden size, widest layer, attention heads,
    layers, key/value heads and their dimension, bytes per element of the dtype the model runs in."""

    vocab: int
    hidden: int
    widest: int
    heads: int
    layers: int
    kv_heads: int
    head_dim: int
    nbytes: int


def shapes_of(config: Any, nbytes: int, widest: int | None = None) -> EvalShapes:
    """:class:`EvalShapes` of a transformers config (its text config for a multimodal one); ``widest`` defaults to
    the MLP width (``intermediate_size``), else the hidden size.

    Example:
        >>> from transformers import LlamaConfig
        >>> s = shapes_of(LlamaConfig(vocab_size=100, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        ...                           num_attention_heads=4, num_key_value_heads=2), 2)
        >>> (s.vocab, s.widest, s.kv_heads, s.head_dim)
        (100, 128, 2, 16)
    """
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    vocab, layers = (int(getattr(text, key, 0) or 0) for key in ("vocab_size", "num_hidden_layers"))
    hidden = int(getattr(text, "hidden_size", 0) or 0)
    heads = int(getattr(text, "num_attention_heads", 0) or 1)
    kv = int(getattr(text, "num_key_value_heads", 0) or heads)
    head_dim = int(getattr(text, "head_dim", 0) or (hidden // heads if heads else 0))
    wide = widest if widest is not None else int(getattr(text, "intermediate_size", 0) or hidden)
    return EvalShapes(vocab, hidden, max(wide, hidden), heads, layers, kv, head_dim, nbytes)


def _layer_activations(s: EvalShapes, batch: int, tokens: int) -> int:
    """One layer's transient tensors and its attention scores for ``batch x tokens`` (calibration's term)."""
    return batch * tokens * (4 * s.hidden + 3 * s.widest) * s.nbytes + batch * s.heads * tokens**2 * s.nbytes


def general_batch_bytes(s: EvalShapes, batch: int, tokens: int) -> int:
    """Device bytes of one general batch beyond the weights: both logits, one text's float32 work, activations.

    Example:
        >>> general_batch_bytes(EvalShapes(1000, 64, 128, 4, 2, 2, 16, 2), batch=2, tokens=10)
        267200
    """
    logits = 2 * batch * tokens * s.vocab * s.nbytes
    one_text = 4 * tokens * s.vocab * 4
    return logits + one_text + _layer_activations(s, batch, tokens)


def generation_batch_bytes(s: EvalShapes, batch: int, prompt_tokens: int, new_tokens: int) -> int:
    """Device bytes of one generation batch beyond the weights: the KV cache, the prompt's forward, the last logits.

    Example:
        >>> generation_batch_bytes(EvalShapes(1000, 64, 128, 4, 2, 2, 16, 2), batch=2, prompt_tokens=10, new_tokens=5)
        50880
    """
    cache = batch * (prompt_tokens + new_tokens) * 2 * s.layers * s.kv_heads * s.head_dim * s.nbytes
    logits = 2 * batch * s.vocab * 4
    return cache + _layer_activations(s, batch, prompt_tokens) + logits


def fit_batch(requested: int, bytes_of: Callable[[int], int], budget: int | None) -> int:
    """The largest batch ``<= requested`` whose ``bytes_of(batch)`` fits ``budget`` (at least 1; ``requested``
    without a budget).

    Example:
        >>> fit_batch(64, lambda b: 100 * b, 1_000), fit_batch(64, lambda b: 100 * b, None), fit_batch(8, lambda b: 10**9, 1)
        (10, 64, 1)
    """
    if budget is None:
        return requested
    return next((batch for batch in range(requested, 0, -1) if bytes_of(batch) <= budget), 1)


def device_budget(device: torch.device) -> int | None:
    """Bytes an evaluation batch may take on ``device`` now: :data:`BUDGET_SHARE` of a GPU's free memory (what the
    driver reports free plus what torch's allocator holds unused); ``None`` (no limit) elsewhere."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    free, _ = torch.cuda.mem_get_info(device)
    cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    return int(BUDGET_SHARE * (free + cached))


def model_shapes(model: nn.Module) -> EvalShapes:
    """:class:`EvalShapes` of a loaded model: its config, and the element size of its floating-point weights."""
    first = next((p for p in model.parameters() if p.dtype.is_floating_point), None)
    nbytes = first.element_size() if first is not None else 4
    return shapes_of(model.config, nbytes)


def logits_device(model: nn.Module) -> torch.device:
    """Where the logits are made (the output embedding's device; a split model's last device)."""
    head = getattr(model, "get_output_embeddings", lambda: None)()
    weight = getattr(head, "weight", None)
    if isinstance(weight, torch.Tensor) and weight.device.type != "meta":
        return weight.device
    return next(model.parameters()).device


def fitted_batch(model: nn.Module, requested: int, bytes_of: Callable[[EvalShapes, int], int]) -> int:
    """``requested``, lowered until ``bytes_of(shapes, batch)`` fits the free memory of the device the model makes
    its logits on (unchanged on a CPU)."""
    budget = device_budget(logits_device(model))
    if budget is None:  # the CPU: the config is not even read
        return requested
    shapes = model_shapes(model)
    return fit_batch(requested, lambda batch: bytes_of(shapes, batch), budget)
