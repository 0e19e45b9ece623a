"""General-text loss and KL(base || edited) against a base computed once, in bounded memory.

A sweep compares dozens of edits with one base on the same texts. Keeping the base's full next-token
distributions costs ``positions x vocabulary x 4`` bytes (1.6 GB for SmolLM2's 49,152 tokens, ~8.5 GB for Gemma
3's 262,144 at 40 texts), and recomputing them doubles every edit's forward passes. :class:`BaseSupport` keeps, for
every real position of every text, the base's ``k`` most likely next tokens and their log-probabilities, the
base's loss on the text's own next tokens, and nothing else: ``positions x k x 8`` bytes (40 texts of 256 tokens
at k = 256: 21 MB, whatever the vocabulary).

The KL of an edit is then computed on the *coarsened* distributions: the ``k`` tokens of the support and one
bucket for everything else (base mass ``P_T = 1 - sum of the support``, edited mass ``Q_T`` likewise).
Error bound, by the chain rule of KL over that partition:

    KL(p || q) = KL_coarse(p || q) + P_T * KL(p_T || q_T)

where ``p_T``, ``q_T`` are the two distributions restricted to the tail and renormalised. So the coarse value is
a **lower bound** of the exact KL (the data-processing inequality), and the gap is the base's tail mass times the
divergence inside the tail. :attr:`EditedGeneral.tail_mass` reports the mean ``P_T`` so that a reader sees how
much mass the bound leaves out; docs/evaluation.md gives the measured gap on the real models
(benchmarks/bench_search.py).

The losses are exact: the base's is computed in full when the support is built, the edited one from the edited
logits at the texts' own next tokens.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from .runtime import eval_mode, pad_rows, param_device

__all__ = ["BaseSupport", "EditedGeneral", "base_support", "edited_general"]


@dataclass
class BaseSupport:
    """The base on general texts: token rows, top-``k`` support per position, exact loss sums per text."""

    rows: list[list[int]]
    top_ids: list[torch.Tensor]  # per text (n, k) int64
    top_logp: list[torch.Tensor]  # per text (n, k) float32, the base's log-probabilities of those tokens
    loss_sums: list[float]  # per text: sum of -log p(next token) over its n - 1 predictions
    k: int
    log_tail: list[torch.Tensor] | None = None  # per text (n,) float64: log of the base's mass outside the support

    @property
    def tokens(self) -> int:
        return sum(len(r) for r in self.rows)


@dataclass(frozen=True)
class EditedGeneral:
    """An edit on the support's texts: per-text loss sums (paired with the base's), the coarse KL (a lower bound
    of the exact one, see the module docstring) and the base's mean tail mass outside the support."""

    loss_sums: tuple[float, ...]
    kl: float
    tail_mass: float


def _per_text(model: nn.Module, rows: list[list[int]], batch_size: int) -> Iterator[tuple[torch.Tensor, float]]:
    """Each text's float32 next-token log-probabilities ``(n, vocab)`` and its summed loss, in order."""
    for s in range(0, len(rows), batch_size):
        chunk = rows[s : s + batch_size]
        ids, attn = pad_rows(chunk, 0, "right", param_device(model))  # right: a text's own outputs unchanged
        logits = model(input_ids=ids, attention_mask=attn, use_cache=False).logits  # (batch, tokens, vocab)
        for b, r in enumerate(chunk):
            lp = logits[b, : len(r)].float().log_softmax(-1)  # (n, vocab)
            yield lp, -lp[:-1].gather(-1, ids[b, 1 : len(r), None]).sum().item()


def base_support(
    model: nn.Module, tokenizer: Any, texts: Sequence[str], *, max_length: int, k: int = 256, batch_size: int = 8
) -> BaseSupport:
    """The base's top-``k`` next-token support and exact loss on every text (model in eval mode, no grad)."""
    enc = tokenizer(list(texts), add_special_tokens=True, truncation=True, max_length=max_length)["input_ids"]
    rows = [list(r) for r in enc]
    ids_out: list[torch.Tensor] = []
    lp_out: list[torch.Tensor] = []
    tails: list[torch.Tensor] = []
    loss: list[float] = []
    with eval_mode(model):
        for lp, text_loss in _per_text(model, rows, batch_size):
            top = lp.topk(min(k, lp.shape[-1]), dim=-1)  # ties: topk's order, the same on every call
            ids_out.append(top.indices.cpu())
            lp_out.append(top.values.cpu())
            tails.append(_log_outside(lp, top.indices).cpu())
            loss.append(text_loss)
    return BaseSupport(rows, ids_out, lp_out, loss, k, tails)


def _log_outside(logp: torch.Tensor, support: torch.Tensor) -> torch.Tensor:
    """``log`` of the mass outside ``support`` per position, summed over the full distribution (not ``1 - sum``,
    which float rounding makes noise below ~1e-6): ``(n,)`` float64, -inf when the support is the vocabulary."""
    rest = logp.double().scatter(-1, support, -math.inf)  # (n, vocab)
    return torch.logsumexp(rest, dim=-1)


def edited_general(model: nn.Module, support: BaseSupport, *, batch_size: int = 8) -> EditedGeneral:
    """Loss of the model as it is now (an edit applied) on the support's texts, and its coarse KL from the base."""
    loss: list[float] = []
    kl_sum, tail_sum, positions = 0.0, 0.0, 0
    with eval_mode(model):
        for i, (q, text_loss) in enumerate(_per_text(model, support.rows, batch_size)):
            loss.append(text_loss)
            p_s = support.top_logp[i].to(q.device)  # (n, k)
            q_s = q.gather(-1, support.top_ids[i].to(q.device))  # (n, k)
            pt = support.log_tail[i].to(q.device)  # (n,)
            qt = _log_outside(q, support.top_ids[i].to(q.device))  # (n,)
            head = (p_s.double().exp() * (p_s.double() - q_s.double())).sum(-1)  # (n,)
            # the tail bucket; 0 where the base puts no mass outside the support (a support of the whole vocabulary)
            tail = torch.where(torch.isinf(pt), torch.zeros_like(pt), pt.exp() * (pt - qt))
            kl_sum += float((head + tail).sum())
            tail_sum += float(pt.exp().sum())
            positions += len(q)
    return EditedGeneral(
        tuple(loss), kl_sum / positions if positions else math.nan, tail_sum / positions if positions else math.nan
    )
