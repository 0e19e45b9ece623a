"""Evaluation: judge an edit before publishing it, by running the task specs of :mod:`.tasks`.

- math: greedy generation (batched, left-padded) of the prompts of :mod:`.prompts`, exact match of the number read
  from the completion, with a 95% Wilson interval;
- general: mean next-token cross entropy over real tokens (with its standard error over texts), perplexity, and
  the mean KL(base || edited) of the next-token distribution, on the same texts;
- optional lm-evaluation-harness tasks (:mod:`.lm_eval_bridge`).

With ``edit=ReversibleEdit(model, mask, scale)`` one model in memory is evaluated as base and as edited; it
always ends in the state it was given in (also on errors), and the user's tokenizer is never modified.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from transformers import StoppingCriteriaList

from ..engine.apply import ReversibleEdit
from ..errors import InputError
from .lm_eval_bridge import run_lm_eval
from .lm_eval_index import require_lm_eval
from .lm_eval_task import LmEvalTask
from .memory import fitted_batch, general_batch_bytes, generation_batch_bytes
from .prompts import ChatSetting, encode_prompts, extract_prediction
from .results import (
    EvalResults,
    GeneralResult,
    MathPrediction,
    MathResult,
    TaskResult,
    extract_answer,
    need,
    truncate_completion,
)
from .runtime import AnswerStop, batch_ranges, edit_guard, eval_mode, pad_rows, param_device, special_ids
from .tasks import GeneralTask, MathTask, Task, is_int

__all__ = ["math_accuracy", "general_loss", "evaluate", "DEFAULT_BATCH_SIZE"]


# problems / texts per batch when the caller names none (what `run` and `eval` use); on a GPU lowered to fit its
# free memory (evaluation/memory.py), which `plan` predicts with this value
DEFAULT_BATCH_SIZE = 16


def _run_math(
    model: nn.Module, tokenizer: Any, task: MathTask, batch_size: int, progress: bool, desc: str
) -> MathResult:
    pad_id, eos_ids = special_ids(model, tokenizer)
    shots = task.shots[: task.n_shot]
    prefills = [p.get("prefill") for p in task.problems]
    # no padding/truncation arguments: we pad, the tokenizer stays as is
    encoded = encode_prompts(tokenizer, task.problems, shots, task.chat_template, task.prompt_style)
    # longest first: batches of similar length waste less padding (results do not depend on batch composition)
    order = sorted(range(len(encoded)), key=lambda i: -len(encoded[i]))
    longest = max((len(r) for r in encoded), default=1)
    # on a GPU, the batch whose KV cache fits (an 8B model's cache is 128 KB per token and row)
    batch_size = fitted_batch(
        model, batch_size, lambda s, b: generation_batch_bytes(s, b, longest, task.max_new_tokens)
    )
    completions: dict[int, str] = {}
    for chunk in batch_ranges(len(order), batch_size, desc, progress):
        idx = [order[j] for j in chunk]
        # left padding: every row's last prompt token sits at the same position, where generation continues
        ids, attn = pad_rows([encoded[i] for i in idx], pad_id, "left", param_device(model))  # (batch, prompt tokens)
        stop = AnswerStop(tokenizer, ids.shape[1], [prefills[i] for i in idx])
        out = model.generate(
            input_ids=ids,
            attention_mask=attn,
            do_sample=False,
            max_new_tokens=task.max_new_tokens,
            pad_token_id=pad_id,
            eos_token_id=eos_ids or None,
            stopping_criteria=StoppingCriteriaList([stop]),
        )  # (batch, prompt tokens + generated)
        for row, i in enumerate(idx):
            new = out[row, ids.shape[1] :].tolist()
            cut = next((k for k, t in enumerate(new) if t in eos_ids), len(new))  # after EOS only padding follows
            completions[i] = tokenizer.decode(new[:cut], skip_special_tokens=True)
    preds = []
    for i, p in enumerate(task.problems):
        text = truncate_completion(completions[i])[0]  # drops only a next "Question:" the model made up
        gold = int(extract_answer(p["answer"]))
        preds.append(MathPrediction(p["question"], gold, text, extract_prediction(text, prefills[i]), prefills[i]))
    return MathResult(sum(p.correct for p in preds), len(preds), tuple(preds), task.sha256)


# the largest base log-probability cache kept for reuse (float32 tokens x vocab over all texts): 40 texts of 128
# tokens with a 49,152-token vocabulary are 1.0 GB
KEEP_LOGPROBS_MAX_BYTES = 2 * 1024**3


def _run_general(
    model: nn.Module,
    tokenizer: Any,
    task: GeneralTask,
    edit: ReversibleEdit | None,
    batch_size: int,
    bar: str | None,
    cached: Sequence[Any] | None = None,
    keep: bool = False,
) -> tuple[GeneralResult, GeneralResult | None]:
    """The base (and with ``edit`` the edited) loss of every text, and KL(base || edited), at most ``batch_size``
    texts a batch, under a progress bar labelled ``bar`` (``None``: no bar).

    ``cached``: the base's log-probabilities of these texts from an earlier call (``keep=True``); the base forward
    pass is then skipped, with the same numbers (the same tensors). ``keep``: return them in the base result when
    they fit :data:`KEEP_LOGPROBS_MAX_BYTES`.
    """
    encoded = [ids[: task.max_length] for ids in tokenizer(list(task.texts))["input_ids"]]
    n_pred = sum(max(len(r) - 1, 0) for r in encoded)
    if n_pred == 0:
        raise InputError(f"GeneralTask {task.name!r}: every text is shorter than 2 tokens; nothing to predict")
    rows_all = [r for r in encoded if r]
    longest = max(len(r) for r in rows_all)
    # on a GPU, the batch whose two full-vocabulary logits fit (128k tokens x 512 positions x 2 bytes: 131 MB a row)
    batch_size = fitted_batch(model, batch_size, lambda s, b: general_batch_bytes(s, b, longest))
    if cached is not None and len(cached) != len(rows_all):
        cached = None  # not these texts: recompute
    kept: list[Any] | None = None
    if keep and cached is None:
        vocab = getattr(getattr(model, "config", None), "vocab_size", None) or 0
        if sum(len(r) for r in rows_all) * vocab * 4 <= KEEP_LOGPROBS_MAX_BYTES:
            kept = []
    sums = _GeneralSums()
    for chunk in batch_ranges(len(rows_all), batch_size, bar or "", bar is not None):
        rows = [rows_all[i] for i in chunk]
        # right padding: with causal attention, padding after a text cannot change its real tokens' outputs
        # (pad id 0: any id would do, padded positions are masked and their outputs never read)
        ids, attn = pad_rows(rows, 0, "right", param_device(model))  # (batch, tokens)
        # (batch, tokens, vocab)
        base_logits = model(input_ids=ids, attention_mask=attn, use_cache=False).logits if cached is None else None
        edited_logits = None
        if edit is not None:
            edit.apply()
            try:
                edited_logits = model(input_ids=ids, attention_mask=attn, use_cache=False).logits
            finally:
                edit.restore()
        for b, r in enumerate(rows):
            n = len(r)
            # float32 log-softmax: in bf16 a large vocabulary's normaliser loses ~3 digits, and KL of two close
            # distributions is a small difference of large numbers; one row at a time bounds the float32 copy
            if cached is not None:
                base_lp = cached[chunk[b]].to(param_device(model))  # (n, vocab), as computed by the earlier call
            else:
                base_lp = base_logits[b, :n].float().log_softmax(-1)  # (n, vocab)
                if kept is not None:
                    kept.append(base_lp.detach().cpu())
            ed_lp = edited_logits[b, :n].float().log_softmax(-1) if edited_logits is not None else None  # (n, vocab)
            sums.add(ids[b, 1:n], base_lp, ed_lp)
        sums.n_dist += sum(len(r) for r in rows)
    logprobs = tuple(cached) if cached is not None else tuple(kept) if kept is not None else None
    return sums.results(task.sha256, n_pred, logprobs, edited=edit is not None)


@dataclass
class _GeneralSums:
    """The running sums of :func:`_run_general`, added text by text in order (the same floats as one loop)."""

    base_loss: float = 0.0
    edited_loss: float = 0.0
    kl_sum: float = 0.0
    n_dist: int = 0  # next-token distributions compared (every real position)
    base_sums: list[float] = field(default_factory=list)  # per text with >= 1 prediction: its summed loss
    edited_sums: list[float] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)

    def add(self, target: torch.Tensor, base_lp: torch.Tensor, ed_lp: torch.Tensor | None) -> None:
        """One text: ``target`` its ``(n - 1,)`` next tokens, the log-probabilities ``(n, vocab)`` float32."""
        n = len(target) + 1
        text_loss = -base_lp[:-1].gather(-1, target[:, None]).sum().item()
        self.base_loss += text_loss
        if n > 1:
            self.base_sums.append(text_loss)
            self.counts.append(n - 1)
        if ed_lp is not None:
            text_loss = -ed_lp[:-1].gather(-1, target[:, None]).sum().item()
            self.edited_loss += text_loss
            if n > 1:
                self.edited_sums.append(text_loss)
            # KL(base || edited) of every real position's next-token distribution (the last one included)
            self.kl_sum += F.kl_div(ed_lp, base_lp, log_target=True, reduction="none").sum(-1).sum().item()

    def results(
        self, sha256: str, n_pred: int, logprobs: tuple[Any, ...] | None, *, edited: bool
    ) -> tuple[GeneralResult, GeneralResult | None]:
        """The base result (with ``logprobs`` kept) and, when an edit ran, the edited one."""
        counts = tuple(self.counts)
        base = GeneralResult(self.base_loss / n_pred, n_pred, 0.0, sha256, tuple(self.base_sums), counts, logprobs)
        if not edited:
            return base, None
        return base, GeneralResult(
            self.edited_loss / n_pred, n_pred, self.kl_sum / self.n_dist, sha256, tuple(self.edited_sums), counts
        )


def _check_batch_size(batch_size: Any) -> int:
    need(is_int(batch_size, 1), f"batch_size: must be an int >= 1, got {batch_size!r}")
    return batch_size


def math_accuracy(
    model: nn.Module,
    tokenizer: Any,
    problems: Sequence[Mapping[str, str]],
    *,
    n_shot: int = 0,
    shots: Sequence[Mapping[str, str]] = (),
    max_new_tokens: int = 256,
    batch_size: int = DEFAULT_BATCH_SIZE,
    progress: bool = True,
    chat_template: ChatSetting = "auto",
) -> MathResult:
    """Exact-match accuracy of greedy completions of the model as it is (see :class:`MathTask` for the arguments).

    Why 9 parameters: the model, its tokenizer and the problems, then six keyword-only options, each one documented
    choice with a default (the fields of :class:`MathTask` and the batching).

    Example:
        >>> with edit:  # an edited model: wrap the call in a ReversibleEdit  # doctest: +SKIP
        ...     math_accuracy(model, tok, [{"question": "2 + 3?", "answer": "#### 5"}]).accuracy
    """
    task = MathTask("math", problems, n_shot, shots, max_new_tokens, chat_template)
    with eval_mode(model):
        return _run_math(model, tokenizer, task, _check_batch_size(batch_size), progress, "math")


def general_loss(
    model: nn.Module,
    tokenizer: Any,
    texts: Sequence[str],
    *,
    edit: ReversibleEdit | None = None,
    max_length: int = 512,
    batch_size: int = DEFAULT_BATCH_SIZE,
    progress: bool = True,
) -> GeneralResult:
    """Mean next-token loss and perplexity on texts (each cut to ``max_length`` tokens); with ``edit``, of the
    edited model, plus KL(base || edited). Returns a :class:`GeneralResult` (``kl`` 0.0 without an edit).

    Example:
        >>> general_loss(model, tok, ["The cat sat."], edit=ReversibleEdit(model, mask, 0.0)).kl  # doctest: +SKIP
    """
    task = GeneralTask("general", texts, max_length)
    with eval_mode(model), edit_guard(edit):
        bar = "general" if progress else None
        base, edited = _run_general(model, tokenizer, task, edit, _check_batch_size(batch_size), bar)
    return base if edited is None else edited


def evaluate(
    model: nn.Module,
    tokenizer: Any,
    tasks: Sequence[Task],
    *,
    edit: ReversibleEdit | None = None,
    base_results: EvalResults | Mapping[str, TaskResult] | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    progress: bool = True,
    keep_base_logprobs: bool = False,
) -> EvalResults:
    """Evaluate the model on tasks, as base and (with ``edit``) as edited, on one model in memory.

    Args:
        model: a causal LM with its base weights (``transformers`` ``generate`` and ``logits``).
        tokenizer: its tokenizer; never modified (padding is done here, eos serves as pad when there is none).
        tasks: :class:`MathTask`, :class:`GeneralTask` and :class:`LmEvalTask` specs with unique names.
        base_results: earlier results (``previous`` or ``previous.base``) whose base parts are reused for tasks of
            the same name and content (a sweep: many edits, base computed once). General tasks still run the base
            forward pass when there is an edit (the KL needs it), unless the cached result kept its log-probabilities
            (``keep_base_logprobs``); no base generation happens again.
        batch_size: problems / texts per batch (a general batch holds two ``(batch, tokens, vocab)`` logits
            tensors at once: lower it for large vocabularies).
        keep_base_logprobs: keep the base's next-token log-probabilities of every general text in the base result
            (in memory, up to :data:`KEEP_LOGPROBS_MAX_BYTES`), so that a later call with these ``base_results``
            skips the base forward pass of the KL (a sweep: one base, many edits); the numbers are the same.

    Returns:
        :class:`EvalResults`; ``edited`` is empty without an edit. The model ends in the state (weights, train/eval
        modes) it was given in, also when an error is raised.

    Example:
        >>> tasks = [MathTask("math", problems), GeneralTask("general", texts)]  # doctest: +SKIP
        >>> res = evaluate(model, tok, tasks, edit=ReversibleEdit(model, mask, 1.1))  # doctest: +SKIP
        >>> print(res.to_markdown()); res.save_json(out_dir)  # doctest: +SKIP
    """
    batch_size = _check_batch_size(batch_size)
    _check_tasks(tasks, edit)
    cached = _cached_bases(tasks, base_results)
    out = EvalResults({}, {})
    with eval_mode(model), edit_guard(edit):
        for t in tasks:
            base = cached.get(t.name)
            if isinstance(t, MathTask):
                if base is None:
                    base = _run_math(model, tokenizer, t, batch_size, progress, f"{t.name} [base]")
                if edit is not None:
                    edit.apply()
                    try:
                        out.edited[t.name] = _run_math(model, tokenizer, t, batch_size, progress, f"{t.name} [edited]")
                    finally:
                        edit.restore()
            elif isinstance(t, GeneralTask):
                if base is None or edit is not None:
                    reuse = getattr(base, "logprobs", None) if edit is not None else None
                    bar = t.name if progress else None
                    base, edited = _run_general(model, tokenizer, t, edit, batch_size, bar, reuse, keep_base_logprobs)
                    if edited is not None:
                        out.edited[t.name] = edited
            else:
                base, edited = run_lm_eval(model, tokenizer, t, edit=edit, base=base, batch_size=batch_size)
                if edited is not None:
                    out.edited[t.name] = edited
            out.base[t.name] = base
    return out


def _check_tasks(tasks: Sequence[Task], edit: ReversibleEdit | None) -> None:
    """Refuse what is not a list of tasks with unique names, an lm-eval task without lm-eval (before hours of
    other tasks, not after), and an edit that is not a ReversibleEdit."""
    if isinstance(tasks, (MathTask, GeneralTask, LmEvalTask)) or not isinstance(tasks, Sequence) or not tasks:
        raise InputError("tasks: must be a non-empty list of MathTask / GeneralTask / LmEvalTask")
    names = [getattr(t, "name", None) for t in tasks]
    for t in tasks:
        if not isinstance(t, (MathTask, GeneralTask, LmEvalTask)):
            raise InputError(f"tasks: {t!r:.60} is not a MathTask, GeneralTask or LmEvalTask")
        if names.count(t.name) > 1:
            raise InputError(f"tasks: the name {t.name!r} is used twice; give every task its own name")
        if isinstance(t, LmEvalTask):
            require_lm_eval(t.name)  # fail before hours of other tasks, not after
    if edit is not None and not all(hasattr(edit, a) for a in ("apply", "restore", "applied")):
        raise InputError(f"edit: must be a ReversibleEdit(model, mask, scale), got {type(edit).__name__}")


def _cached_bases(
    tasks: Sequence[Task], base_results: EvalResults | Mapping[str, TaskResult] | None
) -> dict[str, TaskResult]:
    """The earlier base results by task name, each proven to be of the same task content and settings."""
    cached = dict(base_results.base if isinstance(base_results, EvalResults) else (base_results or {}))
    for t in tasks:
        if t.name in cached and getattr(cached[t.name], "task_sha256", None) != t.sha256:
            raise InputError(
                f"base_results[{t.name!r}]: computed for a different task content or settings; "
                "drop it from base_results to recompute the base"
            )
    return cached
