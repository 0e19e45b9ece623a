"""The built-in evaluation tasks as data (:class:`MathTask`, :class:`GeneralTask`), and ``Task``, any task
:func:`~.runner.evaluate` takes (these two and :class:`~.lm_eval_task.LmEvalTask`).

Apart from :mod:`mathneuro_edit.evaluation.runner` because a task is checked and fingerprinted without a model: its
``sha256`` is what a cached base result must match (a sweep's cache, ``base_results``).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .lm_eval_task import LmEvalTask
from .prompts import ChatSetting, PromptStyle
from .results import extract_answer, need

__all__ = ["MathTask", "GeneralTask", "Task"]


def _sha(spec: Any) -> str:
    return hashlib.sha256(json.dumps(spec, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def is_int(x: Any, lo: int, hi: float = math.inf) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and lo <= x <= hi


def _check_problems(where: str, problems: Any) -> tuple[dict[str, str], ...]:
    """Validate ``[{"question": str, "answer": str, "prefill": str (optional)}]`` with a ``#### <integer>`` in
    every answer; returns plain copies (``prefill`` only where given)."""
    need(
        isinstance(problems, Sequence) and not isinstance(problems, str),
        f"{where}: must be a list of {{'question': str, 'answer': str}} dicts, got {type(problems).__name__}",
    )
    for i, p in enumerate(problems):
        ok = isinstance(p, Mapping) and isinstance(p.get("question"), str) and isinstance(p.get("answer"), str)
        need(ok, f"{where}[{i}]: must be a dict with str 'question' and 'answer', got {p!r:.80}")
        need(
            extract_answer(p["answer"]) is not None,
            f"{where}[{i}]: the answer has no '#### <integer>' line; GSM8K answers end with '#### 42'",
        )
        need(
            p.get("prefill") is None or isinstance(p["prefill"], str),
            f"{where}[{i}]: prefill must be a string (the text that starts the answer), got {p.get('prefill')!r:.40}",
        )
    return tuple(
        {"question": p["question"], "answer": p["answer"], **({"prefill": p["prefill"]} if p.get("prefill") else {})}
        for p in problems
    )


@dataclass(frozen=True)
class MathTask:
    """GSM8K-style problems scored by exact match of the number read from a greedy completion.

    Args:
        problems: ``[{"question": str, "answer": str, "prefill": str (optional)}]``; the gold is the integer after
            ``#### `` in the answer; ``prefill`` starts the model's answer (e.g. ``"23 + 45 = "``).
        n_shot: how many of ``shots`` precede each prompt (as earlier chat turns with a chat template).
        shots: worked examples in the same form (kept apart from ``problems``).
        max_new_tokens: generation budget per problem.
        chat_template: ``"auto"`` (the tokenizer's chat template when it has one), ``True`` (required) or
            ``False`` (plain prompts); see :mod:`mathneuro_edit.evaluation.prompts`.
        prompt_style: the plain prompts' format: ``"question-answer"`` or ``"equations"`` (worked examples as
            bare ``12 + 34 = 46`` lines, the problem as its prefill; for pretrained bases).

    Example:
        >>> MathTask("toy", [{"question": "1 + 1?", "answer": "#### 2"}]).problems[0]["answer"]
        '#### 2'
    """

    name: str
    problems: Sequence[Mapping[str, str]]
    n_shot: int = 0
    shots: Sequence[Mapping[str, str]] = ()
    max_new_tokens: int = 256
    chat_template: ChatSetting = "auto"
    prompt_style: PromptStyle = "question-answer"

    def __post_init__(self) -> None:
        where = f"MathTask {self.name!r}"
        need(
            self.chat_template == "auto" or isinstance(self.chat_template, bool),
            f"{where}: chat_template must be 'auto', True or False, got {self.chat_template!r}",
        )
        object.__setattr__(self, "problems", _check_problems(f"{where}: problems", self.problems))
        object.__setattr__(self, "shots", _check_problems(f"{where}: shots", self.shots))
        need(bool(self.problems), f"{where}: problems is empty; pass at least one problem")
        need(
            is_int(self.n_shot, 0, len(self.shots)),
            f"{where}: n_shot={self.n_shot!r} but {len(self.shots)} shots were given; pass n_shot <= len(shots)",
        )
        need(
            is_int(self.max_new_tokens, 1), f"{where}: max_new_tokens must be an int >= 1, got {self.max_new_tokens!r}"
        )

    @property
    def sha256(self) -> str:
        """Fingerprint of the task's content and settings (a cached base result must match it)."""
        style = [] if self.prompt_style == "question-answer" else [self.prompt_style]  # old fingerprints unchanged
        shots = list(self.shots[: self.n_shot])
        return _sha(["math", list(self.problems), shots, self.max_new_tokens, self.chat_template, *style])


@dataclass(frozen=True)
class GeneralTask:
    """Non-math texts scored by next-token loss, perplexity and (with an edit) KL(base || edited).

    Each text is truncated to ``max_length`` (>= 2) tokens.

    Example:
        >>> GeneralTask("wiki", ["A quiet morning in the park."]).max_length
        512
    """

    name: str
    texts: Sequence[str]
    max_length: int = 512

    def __post_init__(self) -> None:
        ok = not isinstance(self.texts, str) and bool(self.texts) and all(isinstance(t, str) for t in self.texts)
        need(ok, f"GeneralTask {self.name!r}: texts must be a non-empty list of str")
        object.__setattr__(self, "texts", tuple(self.texts))
        need(
            is_int(self.max_length, 2),
            f"GeneralTask {self.name!r}: max_length must be an int >= 2, got {self.max_length!r}",
        )

    @property
    def sha256(self) -> str:
        """Fingerprint of the texts and settings."""
        return _sha(["general", list(self.texts), self.max_length])


Task = MathTask | GeneralTask | LmEvalTask
