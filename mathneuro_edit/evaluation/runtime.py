"""What every evaluation runner shares (the runner, greedy completions, general loss and KL): eval mode, the edit
guard, the parameters' device, padding, special ids, the stop rule and batch ranges.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn
from tqdm.auto import tqdm
from transformers import StoppingCriteria

from ..engine.apply import ReversibleEdit
from .prompts import completion_done
from .results import need


@contextmanager
def eval_mode(model: nn.Module) -> Iterator[None]:
    """``model.eval()`` and ``no_grad`` inside; every submodule's own training flag restored afterwards."""
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        for m, mode in modes:
            m.training = mode


@contextmanager
def edit_guard(edit: ReversibleEdit | None) -> Iterator[None]:
    """Start from the base weights; end in the state the edit was given in (applied or not), even on errors."""
    if edit is None:
        yield
        return
    was_applied = bool(edit.applied)
    edit.restore()
    try:
        yield
    finally:
        edit.restore()
        if was_applied:
            edit.apply()  # edited values are a pure function of the saved originals: bit-identical to before


def param_device(model: nn.Module) -> torch.device:
    """``model.device`` (transformers' property), else the device of its first parameter."""
    device = getattr(model, "device", None)
    return device if isinstance(device, torch.device) else next(model.parameters()).device


def special_ids(model: nn.Module, tokenizer: Any) -> tuple[int, list[int]]:
    """``(pad id, eos ids)``: the tokenizer's pad, else an eos (passed per call, the tokenizer is untouched).

    The eos ids are the tokenizer's and the model's generation config's together (chat models often stop on
    several, e.g. ``<|eot_id|>`` besides ``<|end_of_text|>``).
    """
    eos: list[Any] = [tokenizer.eos_token_id, getattr(getattr(model, "generation_config", None), "eos_token_id", None)]
    flat = [e for x in eos for e in (x if isinstance(x, (list, tuple)) else [x]) if e is not None]
    eos_ids = list(dict.fromkeys(int(e) for e in flat))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (eos_ids[0] if eos_ids else None)
    need(pad is not None, "tokenizer: has neither a pad_token nor an eos_token; set tokenizer.eos_token")
    return int(pad), eos_ids


def pad_rows(
    rows: Sequence[Sequence[int]], pad_id: int, side: str, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad token-id lists to one length; returns ``(ids, attention_mask)``, both ``(batch, tokens)``."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        sl = slice(width - len(r), width) if side == "left" else slice(0, len(r))
        ids[i, sl], attn[i, sl] = torch.tensor(list(r), dtype=torch.long), 1
    return ids.to(device), attn.to(device)


class AnswerStop(StoppingCriteria):
    """Stops each row once :func:`~mathneuro_edit.evaluation.prompts.completion_done` says its answer is complete.

    What a stopped row gets next is padding (a special token, dropped when decoding). A row's status depends on
    its own text only, so batching does not change what a row generates.
    """

    def __init__(self, tokenizer: Any, prompt_len: int, prefills: Sequence[str | None]) -> None:
        self.tokenizer, self.prompt_len, self.prefills = tokenizer, prompt_len, list(prefills)
        self.done = [False] * len(self.prefills)

    def __call__(self, input_ids: torch.LongTensor, scores: Any, **kwargs: Any) -> torch.BoolTensor:
        new = input_ids[:, self.prompt_len :]  # (batch, generated so far)
        for i in range(new.shape[0]):
            if not self.done[i]:
                text = self.tokenizer.decode(new[i], skip_special_tokens=True)
                self.done[i] = completion_done(text, self.prefills[i])
        return torch.tensor(self.done, device=input_ids.device)


def batch_ranges(n: int, batch_size: int, desc: str, progress: bool) -> Iterator[range]:
    """``range(0, n)`` in consecutive slices of ``batch_size``, with a progress bar when ``progress``."""
    starts = range(0, n, batch_size)
    for s in tqdm(starts, desc=desc, disable=not progress, leave=False, unit="batch"):
        yield range(s, min(n, s + batch_size))
