"""Calibration: forward passes with hooks that accumulate MathNeuro's per-input-feature statistics
(:class:`~.stats.ActivationStats`: the paper's per-sample L2 norms and Wanda's sums of squares, in float32 whatever
the model's dtype; O(d_in) per weight).

Batches are right-padded and padding tokens are masked out, so with a causal model the result equals the
batch-size-1 computation up to float32 rounding. The hooks are in :mod:`.recorder`; the forward stops once the last
scored input has been recorded (:mod:`.forward_stop`): no logits, nothing after the last scored layer.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn.utils.rnn import pad_sequence
from tqdm.auto import tqdm

from .._version import __version__
from ..errors import InputError
from ..util.hashing import texts_sha256
from ..util.paths import LOCAL, is_local_path
from .devices import model_device
from .forward_stop import ForwardStop
from .recorder import Recorder
from .stats import ActivationStats
from .targets import find_targets, model_fingerprint

__all__ = ["calibrate", "checked_texts", "tokenize_texts"]


def tokenize_texts(tokenizer: Any, texts: list[str], max_length: int) -> tuple[list[list[int]], int]:
    """Every text's token ids (special tokens added), cut to ``max_length``, and how many were cut."""
    ids = tokenizer(texts, add_special_tokens=True, truncation=False)["input_ids"]
    truncated = sum(len(x) > max_length for x in ids)
    ids = [list(x[:max_length]) for x in ids]
    for i, x in enumerate(ids):
        if not x:
            raise InputError(f"texts[{i}]: tokenizes to no tokens; remove empty texts from the calibration data")
    return ids, truncated


def calibrate(
    model: nn.Module,
    tokenizer: Any,
    texts: Sequence[str],
    *,
    max_length: int = 512,
    batch_size: int = 8,
    progress: bool = True,
    include: Sequence[str] | None = None,
    exclude: Sequence[str] | None = None,
    include_tied_lm_head: bool = False,
) -> ActivationStats:
    """Run the calibration texts through the model and accumulate MathNeuro statistics for every target.

    Why 9 parameters: the model, its tokenizer and the texts, then six keyword-only options, each one documented
    choice with a default.

    The model is left in the train/eval mode it came in, the tokenizer unmodified (one without a pad token works).
    ``max_length``: tokens kept per sample (one text), longer samples truncated and counted in ``meta``;
    ``batch_size``: samples per forward pass (right-padded; padding does not count); ``include``/``exclude``:
    regular expressions over the target parameter names (:func:`~mathneuro_edit.engine.targets.find_targets`).

    Example:
        >>> stats = calibrate(model, tokenizer, ["Question: 2+3?\\nAnswer: 5"], progress=False)  # doctest: +SKIP
    """
    texts = checked_texts(texts)
    if max_length < 1 or batch_size < 1:
        raise InputError(f"max_length and batch_size must be >= 1 (got {max_length}, {batch_size})")
    targets = find_targets(model, include=include, exclude=exclude, include_tied_lm_head=include_tied_lm_head)
    ids, truncated = tokenize_texts(tokenizer, texts, max_length)
    pad_id = next((v for v in (tokenizer.pad_token_id, tokenizer.eos_token_id) if v is not None), 0)
    recorder, n_tokens = _record(model, targets, ids, pad_id, batch_size, progress)

    norm, sq, count = {}, {}, {}
    for name, acc in recorder.acc.items():
        shape = acc.target.stat_shape
        # a target that saw no token (an expert no token was routed to) has zero statistics
        norm[name] = (acc.norm if acc.norm is not None else torch.zeros(shape)).cpu()
        sq[name] = (acc.sq if acc.sq is not None else torch.zeros(shape)).cpu()
        count[name] = acc.count
    meta = _meta(model, texts, n_tokens, truncated, max_length)
    return ActivationStats(norm, sq, count, dict(targets), meta)


def checked_texts(texts: Sequence[str], label: str = "texts") -> list[str]:
    """The texts as a list, refused (one line naming ``label``) when not a list, empty, or holding a non-string."""
    if isinstance(texts, str) or not isinstance(texts, Sequence):
        raise InputError(f"{label}: must be a list of strings, got a single string or non-sequence; wrap it in a list")
    texts = list(texts)
    if not texts:
        raise InputError(f"{label}: the calibration set is empty; give at least one sample")
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise InputError(f"{label}[{i}]: must be a string, got {type(t).__name__}")
    return texts


def _record(
    model: nn.Module, targets: dict[str, Any], ids: list[list[int]], pad_id: int, batch_size: int, progress: bool
) -> tuple[Recorder, int]:
    """The forward passes, with the recorder's hooks and the early stop: ``(recorder, tokens seen)``."""
    # Longest first: batches of similar lengths waste little compute on padding; sums do not depend on order
    # beyond float32 rounding.
    order = sorted(range(len(ids)), key=lambda i: (-len(ids[i]), i))
    device = model_device(model)
    recorder = Recorder(model, targets)
    # after the recorder: hooks run in registration order, the inputs are recorded before the stop
    stop = ForwardStop(model, list(dict.fromkeys(t.module_name for t in targets.values())))
    was_training = model.training
    model.eval()  # dropout off: statistics must be deterministic
    n_tokens = 0
    try:
        with torch.no_grad():
            batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
            for batch in tqdm(batches, desc="calibrate", unit="batch", disable=not progress, leave=False):
                # right padding: real tokens keep positions 0..n-1
                input_ids = pad_sequence([torch.tensor(ids[i]) for i in batch], batch_first=True, padding_value=pad_id)
                lengths = torch.tensor([len(ids[i]) for i in batch])  # (batch,)
                attention = (torch.arange(input_ids.shape[1]) < lengths[:, None]).long()  # (batch, tokens)
                input_ids, attention = input_ids.to(device), attention.to(device)
                recorder.set_batch(attention, sum(len(ids[i]) for i in batch))  # counted here: no device sync
                stop.forward(model, input_ids=input_ids, attention_mask=attention)
                recorder.batch_done()
                n_tokens += recorder.n_tokens
        recorder.finish()
    finally:
        stop.remove()
        recorder.remove()  # hooks never outlive the call, also on error
        model.train(was_training)
    return recorder, n_tokens


def _meta(model: nn.Module, texts: list[str], n_tokens: int, truncated: int, max_length: int) -> dict[str, Any]:
    """What the statistics record about their making: the texts' hash, the model, its dtype, the versions."""
    import transformers

    first = next(p for p in model.parameters() if p.dtype.is_floating_point)
    return {
        "num_samples": len(texts),
        "num_tokens": n_tokens,
        "truncated_samples": truncated,
        "max_length": max_length,
        "texts_sha256": texts_sha256(texts),
        "model_fingerprint": model_fingerprint(model),
        "model_name": _public_name(getattr(getattr(model, "config", None), "_name_or_path", "") or ""),
        "dtype": str(first.dtype).removeprefix("torch."),
        "versions": {
            "mathneuro_edit": __version__,
            "torch": torch.__version__,
            "transformers": transformers.__version__,
        },
    }


def _public_name(name: str) -> str:
    """A Hub id as is; a local folder as ``<local>``: the same model in another folder gives the same statistics
    (and no personal path ends up in a file that may be shared)."""
    return LOCAL if name and (is_local_path(str(name)) or Path(str(name)).is_absolute()) else str(name)
