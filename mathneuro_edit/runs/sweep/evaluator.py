"""How a sweep evaluates its points: :class:`_Evaluator` runs the math problems of one block (the base, or an edit
switched on with :class:`~mathneuro_edit.engine.apply.ReversibleEdit`) and the general texts' loss and KL, each result
cached by content (:mod:`.cache`) so that a killed sweep resumes; :func:`_blocks` cuts the problems into the
same blocks in every run.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch

from ...data.sources import problem_sha256
from ...engine.apply import ReversibleEdit
from ...evaluation.general_kl import BaseSupport, base_support, edited_general
from ...evaluation.greedy import math_outcomes
from ...evaluation.prompts import uses_chat_template
from ...evaluation.results import GeneralResult, compare
from ..steps.record import RunRecord
from .cache import ResultCache

# problems per cached block: a kill loses at most one block per point in progress; round boundaries also cut blocks
BLOCK = 128


def model_weights_sha256(model: Any) -> str:
    """sha256 of the model's parameters and buffers (names, dtypes, shapes and their bytes): the cache's model key,
    independent of where the files were. (:func:`~mathneuro_edit.engine.targets.model_fingerprint` hashes the
    shapes only: two checkpoints of one architecture share it, and must not share cached results.)"""
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}\n".encode())
        h.update(t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _blocks(start: int, end: int, cuts: Sequence[int]) -> list[tuple[int, int]]:
    """``[start, end)`` cut at every multiple of :data:`BLOCK` and at ``cuts``: the same blocks in every run."""
    edges = sorted(
        {start, end, *[c for c in cuts if start < c < end], *range((start // BLOCK + 1) * BLOCK, end, BLOCK)}
    )
    return list(zip(edges[:-1], edges[1:]))


@dataclass(frozen=True)
class _Context:
    """What every part of one sweep shares: the run record (the recipe, the model in memory, its tokenizer, progress
    bars, the stage printer), the weights' sha256 (the cache's model key), the result cache and the echo of one line
    per evaluated point.

    Why one object: the evaluator, the calibration and the confirmation each needed the same eight of them."""

    run: RunRecord
    fingerprint: str
    cache: ResultCache
    echo: Callable[[str], None] = field(default=lambda s: None)


class _Evaluator:
    """Evaluates the base or an edit on blocks of problems and the general texts, through the result cache."""

    def __init__(
        self,
        ctx: _Context,
        shots: list[dict[str, Any]],
        texts: Sequence[str],
        fmt: Any = None,
        weights: str | None = None,
    ) -> None:
        """``fmt`` (a :class:`~mathneuro_edit.recipe.job_sections.PromptFormat`) replaces the evaluation's prompt
        settings; ``weights`` names the dtype the model's weights were rounded to (a cache key of their own)."""
        recipe, fingerprint = ctx.run.recipe, ctx.fingerprint
        self.echo, self.weights = ctx.echo, weights  # a confirmation's lines name the weights it measures
        ev, sw = recipe.evaluation, recipe.sweep
        assert ev is not None
        src = fmt if fmt is not None else ev
        self.model, self.tok, self.cache = ctx.run.model, ctx.run.tokenizer, ctx.cache
        self.shots, self.n_shot, self.max_new = shots, src.n_shot, ev.max_new_tokens
        self.chat = uses_chat_template(self.tok, src.chat_template)
        self.style = src.prompt_style
        self.batch_size, self.k = sw.batch_size, sw.kl_support
        self.texts, self.max_length = list(texts), recipe.calibration.max_length
        self.prompt_key = {
            "model": fingerprint,
            "shots": [problem_sha256(s) for s in shots[: self.n_shot]],
            "chat_template": self.chat,
            **({} if self.style == "question-answer" else {"prompt_style": self.style}),
            "max_new_tokens": self.max_new,
            "batch_size": self.batch_size,
            "engine": "greedy-shared-prefix/1",
            **({} if weights is None else {"weights": weights}),
        }
        self.general_key = {
            "model": fingerprint,
            "texts": hashlib.sha256(json.dumps(self.texts).encode()).hexdigest(),
            "max_length": self.max_length,
            "kl_support": self.k,
            "engine": "general-support/1",
        }
        self._support: BaseSupport | None = None

    def _state(self, mask: Any, scale: float) -> dict[str, Any]:
        return {"base": True} if mask is None else {"mask": mask.sha256, "scale": scale}

    def math(self, problems: Sequence[dict[str, Any]], mask: Any = None, scale: float = 1.0) -> list[bool]:
        """Correct flags of the base (``mask=None``) or the edit on ``problems`` (one block), cached."""
        return self.outcomes(problems, mask, scale)[0]

    def outcomes(
        self, problems: Sequence[dict[str, Any]], mask: Any = None, scale: float = 1.0, edit: Any = None
    ) -> tuple[list[bool], list[str]]:
        """``(correct flags, completions)`` of the base or the edit on ``problems`` (one block), cached. ``edit``:
        a prepared :class:`~mathneuro_edit.engine.apply.ReversibleEdit` of ``mask`` and ``scale`` (one that writes
        the release's stored values), used instead of a new one."""
        hashes = [problem_sha256(p) for p in problems]
        key = {"what": "math", **self.prompt_key, **self._state(mask, scale), "problems": hashes}
        hit = self.cache.get(key)
        if hit is None:
            cpu = time.process_time()
            if edit is None and mask is not None:
                edit = ReversibleEdit(self.model, mask, scale)
            with edit if edit is not None else nullcontext():
                correct, completions = math_outcomes(
                    self.model,
                    self.tok,
                    problems,
                    shots=self.shots[: self.n_shot],
                    chat_template=self.chat,
                    prompt_style=self.style,
                    max_new_tokens=self.max_new,
                    batch_size=self.batch_size,
                )
            # the CPU seconds this block took (benchmarks/bench_search.py sums them: a search's cost survives kills)
            hit = {"correct": correct, "completions": completions, "cpu_s": round(time.process_time() - cpu, 3)}
            self.cache.put(key, hit)
        return [bool(c) for c in hit["correct"]], [str(c) for c in hit["completions"]]

    def base_general(self) -> dict[str, Any]:
        key = {"what": "general-base", **self.general_key}
        hit = self.cache.get(key)
        if hit is None:
            hit = {"loss_sums": self.support().loss_sums, "tokens": [len(r) - 1 for r in self.support().rows]}
            self.cache.put(key, hit)
        return hit

    def support(self) -> BaseSupport:
        if self._support is None:
            self._support = base_support(self.model, self.tok, self.texts, max_length=self.max_length, k=self.k)
        return self._support

    def general(self, mask: Any, scale: float) -> dict[str, Any]:
        """Loss sums per text, coarse KL and tail mass of an edit on the general texts, cached."""
        key = {"what": "general", **self.general_key, **self._state(mask, scale)}
        hit = self.cache.get(key)
        if hit is None:
            cpu = time.process_time()
            support = self.support()
            with ReversibleEdit(self.model, mask, scale):
                g = edited_general(self.model, support)
            cpu_s = round(time.process_time() - cpu, 3)
            hit = {"loss_sums": list(g.loss_sums), "kl": g.kl, "tail_mass": g.tail_mass, "cpu_s": cpu_s}
            self.cache.put(key, hit)
        return hit


def _general_result(sums: Sequence[float], tokens: Sequence[int], kl: float = 0.0) -> GeneralResult:
    pairs = [(s, t) for s, t in zip(sums, tokens) if t > 0]  # texts with a token to predict
    kept_sums, kept_tokens = tuple(s for s, _ in pairs), tuple(t for _, t in pairs)
    n = sum(kept_tokens)
    return GeneralResult(sum(kept_sums) / n if n else math.nan, n, kl, "", kept_sums, kept_tokens)


def _general_change(base_general: dict[str, Any], g: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """An edit's general result (loss sums per text, KL) and its paired change against the base's on the same
    texts (:func:`~mathneuro_edit.evaluation.results.compare`; empty when there is nothing to compare)."""
    base_g = _general_result(base_general["loss_sums"], base_general["tokens"])
    ed_g = _general_result(g.get("loss_sums", []), base_general["tokens"], float(g.get("kl", math.nan)))
    return ed_g, compare(base_g, ed_g) or {}
