"""Greedy completions with the prompts' shared prefix encoded once (the sweep's generation engine).

Every prompt of a math task starts with the same tokens: the chat template's system turn, the few-shot examples,
the task's fixed wording. :func:`greedy_completions` runs them once per model state (batch 1), copies their keys
and values to every row of a batch, and feeds only each prompt's own tokens and the generated ones. The layout of
a batch row is ``[shared prefix | left padding | own tokens | generated]``: the padding is masked and the position
ids count real tokens only, so row ``i`` sees exactly the sequence of its prompt at positions ``0 .. len - 1``, as
in :func:`~mathneuro_edit.evaluation.runner.math_accuracy`'s ``generate`` with left padding.

Why a loop of its own instead of ``generate(past_key_values=...)``: the answer is a few tokens, so per-step
overhead (logits processors, stopping criteria, cache bookkeeping) is a large share of the time on a CPU, and
``generate`` cannot take a batch-1 cache for a batch of prompts. What is computed per row is the same function of
the same tokens; only matrix shapes (and so float rounding) differ, which tests/evaluation/test_greedy.py shows
does not change a prediction on the real models.

Cost (benchmarks/bench_search.py): the prompt part shrinks from ``len(prompt)`` to ``len(prompt) - len(prefix)``
tokens per row (a SmolLM2 chat prompt: 46 -> 11).
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from transformers import DynamicCache

from .memory import fitted_batch, generation_batch_bytes
from .prompts import ChatSetting, PromptStyle, completion_done, encode_prompts, extract_prediction, uses_chat_template
from .results import MathPrediction, extract_answer, truncate_completion
from .runtime import eval_mode, special_ids

__all__ = ["shared_prefix_length", "greedy_completions", "math_outcomes"]


def shared_prefix_length(rows: Sequence[Sequence[int]]) -> int:
    """Tokens every row starts with, leaving each row at least one token of its own (the last prompt token must
    be fed with the row, since its logits give the first generated token).

    Example:
        >>> shared_prefix_length([[1, 2, 3, 4], [1, 2, 5], [1, 2, 3]])
        2
    """
    n = max(min((len(r) for r in rows), default=1) - 1, 0)
    return next((i for i in range(n) if any(r[i] != rows[0][i] for r in rows)), n)


def _cache_name(model: nn.Module) -> str:
    """The cache argument's name in this transformers version (``cache``; ``past_key_values`` before)."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def greedy_completions(
    model: nn.Module,
    tokenizer: object,
    rows: Sequence[Sequence[int]],
    prefills: Sequence[str | None],
    *,
    max_new_tokens: int,
    pad_id: int,
    eos_ids: Sequence[int],
    batch_size: int = 64,
) -> list[str]:
    """Greedy completion text of every prompt (token ids), stopped per row as ``generate`` with the evaluation's
    stopping rule would (an EOS id, or :func:`~mathneuro_edit.evaluation.prompts.completion_done`, which reads the
    first number after each prompt's prefill): one completion per row, in order, the text up to the first EOS with
    special tokens skipped. The model is in eval mode under ``torch.no_grad``; ``pad_id``, ``eos_ids`` as
    :func:`~mathneuro_edit.evaluation.runtime.special_ids` returns them.
    """
    if not rows:
        return []
    device = next(model.parameters()).device
    p = shared_prefix_length(rows)
    longest = max(len(r) for r in rows)
    # on a GPU, the batch whose KV cache (the prefix copied to every row) fits the free memory
    batch_size = fitted_batch(model, batch_size, lambda s, b: generation_batch_bytes(s, b, longest, max_new_tokens))
    cache_arg = _cache_name(model)  # looked up once, not per generated token
    prefix_cache = DynamicCache(config=model.config)
    if p:
        ids = torch.tensor([list(rows[0][:p])], dtype=torch.long, device=device)  # (1, p)
        model(input_ids=ids, use_cache=True, logits_to_keep=1, **{cache_arg: prefix_cache})
    run = _GreedyRun(model, tokenizer, cache_arg, frozenset(int(e) for e in eos_ids), max_new_tokens, pad_id, device)
    # longest first: rows of similar length share a batch (less padding); results do not depend on the order
    order = sorted(range(len(rows)), key=lambda i: -len(rows[i]))
    out: dict[int, str] = {}
    for s in range(0, len(order), batch_size):
        idx = order[s : s + batch_size]
        ids, attn, pos, nxt_pos = _after_prefix([list(rows[i][p:]) for i in idx], p, pad_id)
        cache = DynamicCache(config=model.config)
        if p:  # the batch's own copy of the prefix (whose keys and values are never written to)
            cache = copy.deepcopy(prefix_cache)
            cache.batch_repeat_interleave(len(idx))
        new = run.batch(ids.to(device), attn.to(device), pos.to(device), nxt_pos, cache, [prefills[i] for i in idx])
        for b, i in enumerate(idx):
            out[i] = tokenizer.decode(new[b], skip_special_tokens=True)
    return [out[i] for i in range(len(rows))]


def _after_prefix(
    own: list[list[int]], p: int, pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A batch's tokens after the shared prefix of length ``p``, left-padded: ``(ids, attention, positions, next
    position)``; the attention covers the prefix too, and positions count real tokens only."""
    width, n = max(len(r) for r in own), len(own)
    ids = torch.full((n, width), pad_id, dtype=torch.long)  # (batch, own tokens), left-padded
    attn = torch.zeros((n, p + width), dtype=torch.long)  # (batch, prefix + own tokens)
    pos = torch.zeros((n, width), dtype=torch.long)
    attn[:, :p] = 1
    for b, r in enumerate(own):
        ids[b, width - len(r) :] = torch.tensor(r, dtype=torch.long)
        attn[b, p + width - len(r) :] = 1
        pos[b, width - len(r) :] = torch.arange(p, p + len(r))  # real tokens only are counted
    nxt_pos = torch.tensor([p + len(r) for r in own], dtype=torch.long)  # (batch,) next real position
    return ids, attn, pos, nxt_pos


@dataclass(frozen=True)
class _GreedyRun:
    """What every batch of one :func:`greedy_completions` call shares: the model, the stopping rule, the budget."""

    model: nn.Module
    tokenizer: Any
    cache_arg: str  # the name the model's forward takes its cache by
    eos: frozenset[int]
    max_new_tokens: int
    pad_id: int
    device: torch.device

    def batch(
        self,
        ids: torch.Tensor,
        attn: torch.Tensor,
        pos: torch.Tensor,
        nxt_pos: torch.Tensor,
        cache: DynamicCache,
        prefills: list[str | None],
    ) -> list[list[int]]:
        """The new token ids of each row, stopped at an EOS or once its answer is complete."""
        n, device = len(prefills), self.device
        new: list[list[int]] = [[] for _ in range(n)]
        done = [False] * n
        for _step in range(self.max_new_tokens):
            # the cache's length is the index of the first new column (the model derives cache positions from it)
            logits = self.model(
                input_ids=ids,
                attention_mask=attn,
                position_ids=pos,
                use_cache=True,
                logits_to_keep=1,
                **{self.cache_arg: cache},
            ).logits  # (batch, 1, vocab)
            tok = logits[:, -1].argmax(-1)  # (batch,) greedy: the first maximum, as generate's argmax
            for b in range(n):
                if done[b]:
                    continue
                t = int(tok[b])
                if t in self.eos:
                    done[b] = True
                    continue
                new[b].append(t)
                done[b] = completion_done(self.tokenizer.decode(new[b], skip_special_tokens=True), prefills[b])
            if all(done):
                break
            ids = tok[:, None].masked_fill(torch.tensor(done, device=device)[:, None], self.pad_id)  # (batch, 1)
            attn = torch.cat([attn, torch.ones((n, 1), dtype=attn.dtype, device=device)], dim=1)
            pos = nxt_pos.to(device)[:, None]
            nxt_pos = nxt_pos + 1
        return new


def math_outcomes(
    model: nn.Module,
    tokenizer: object,
    problems: Sequence[dict[str, str]],
    *,
    shots: Sequence[dict[str, str]] = (),
    chat_template: ChatSetting = "auto",
    prompt_style: PromptStyle = "question-answer",
    max_new_tokens: int = 256,
    batch_size: int = 64,
) -> tuple[list[bool], list[str]]:
    """``(correct, completions)`` of the model as it is on ``problems``: the prompts of
    :func:`~mathneuro_edit.evaluation.runner.math_accuracy` (``shots`` are all put before each problem), generated
    by :func:`greedy_completions`, read by the same rules (:func:`~mathneuro_edit.evaluation.prompts.extract_prediction`).
    """
    chat = uses_chat_template(tokenizer, chat_template)
    rows = encode_prompts(tokenizer, problems, shots, chat, prompt_style)
    prefills = [p.get("prefill") for p in problems]
    pad_id, eos_ids = special_ids(model, tokenizer)
    budget = {"max_new_tokens": max_new_tokens, "pad_id": pad_id, "eos_ids": eos_ids, "batch_size": batch_size}
    with eval_mode(model):
        texts = greedy_completions(model, tokenizer, rows, prefills, **budget)
    completions = [truncate_completion(t)[0] for t in texts]
    # the evaluation's own rule (MathPrediction.correct), so a sweep and a release score an answer alike
    correct = [
        MathPrediction(p["question"], int(extract_answer(p["answer"])), c, extract_prediction(c, f), f).correct
        for c, f, p in zip(completions, prefills, problems)
    ]
    return correct, completions
