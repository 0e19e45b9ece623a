"""Evaluation results and the pure text helpers of the GSM8K ``#### <integer>`` format (no model code: that is
:mod:`.runner`).

Every accuracy carries its 95% Wilson interval, every general loss its standard error over texts, and a base vs
edited pair its paired test (:mod:`.significance`): ``to_dict`` adds a ``comparison`` entry per task.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..layout import EVAL_NAME, LM_EVAL_RESULTS
from ..organism.data import format_math
from ..util.files import write_json_atomic
from .lm_eval_task import LmEvalResult
from .report import eval_markdown
from .significance import discordant_pairs, mcnemar_exact, ratio_se, significant, wilson_interval

__all__ = [
    "MathPrediction",
    "MathResult",
    "GeneralResult",
    "TaskResult",
    "EvalResults",
    "extract_answer",
    "truncate_completion",
    "math_prompt",
    "compare",
]

# "#### 1,234" / "#### -5" / "#### 42." / "#### 7.00": sign, digits with optional thousands commas, optional decimals
_ANSWER_RE = re.compile(r"####[ \t]*(-?\d(?:[\d,]*\d)?)(\.\d*)?")
_NEXT_QUESTION = "\nQuestion:"


def extract_answer(text: str) -> int | None:
    """The integer of the first ``#### <number>`` in ``text`` (GSM8K convention), or ``None``.

    Commas are stripped (``1,000`` -> 1000) and a trailing period or zero decimals are accepted (``42.`` and
    ``42.00`` -> 42); a number with non-zero decimals is not an integer (``None``).

    Example:
        >>> extract_answer("3 + 4 = 7\\n#### 1,007."), extract_answer("no answer")
        (1007, None)
    """
    m = _ANSWER_RE.search(text)
    if m is None or (m.group(2) and m.group(2).strip(".0")):
        return None
    return int(m.group(1).replace(",", ""))


def truncate_completion(text: str) -> tuple[str, bool]:
    """Cut a completion where its answer ends: ``(cut text, whether generation can stop)``.

    The answer ends at the first ``"\\n\\n"`` or ``"\\nQuestion:"`` after the first complete ``#### <number>``;
    without one, at the first ``"\\nQuestion:"`` (the model started a new problem: what follows is not an answer
    to this one). Generation can stop once the number is complete (a character that cannot continue it follows).

    Example:
        >>> truncate_completion("2 + 2 = 4\\n#### 4\\n\\nQuestion: next")
        ('2 + 2 = 4\\n#### 4', True)
    """
    question = text.find(_NEXT_QUESTION)
    m = _ANSWER_RE.search(text)
    if m is not None and (question < 0 or m.start() < question):
        ends = [i for i in (text.find("\n\n", m.end()), text.find(_NEXT_QUESTION, m.end())) if i >= 0]
        complete = re.match(r"[,.]*[^\d,.]", text[m.end() :]) is not None
        return (text[: min(ends)] if ends else text), complete
    return (text[:question], True) if question >= 0 else (text, False)


def math_prompt(question: str, shots: Sequence[Mapping[str, str]] = ()) -> str:
    """The prompt (:func:`~mathneuro_edit.organism.data.format_math`, the format the shipped model organism is
    trained on), few-shot examples first.

    Example:
        >>> math_prompt("1 + 1?", [{"question": "2 + 2?", "answer": "#### 4"}])
        'Question: 2 + 2?\\nAnswer: #### 4\\n\\nQuestion: 1 + 1?\\nAnswer:'
    """
    return "\n\n".join([*(format_math(s["question"], s["answer"]) for s in shots), format_math(question)])


def need(ok: bool, message: str) -> None:
    """Raise :class:`~mathneuro_edit.errors.InputError` with ``message`` unless ``ok``: the evaluation's input checks."""
    if not ok:
        raise InputError(message)


@dataclass(frozen=True)
class MathPrediction:
    """One problem's outcome: the raw completion (as generated, up to the end of turn / stop) and the number
    read from it (:func:`~mathneuro_edit.evaluation.prompts.extract_prediction`); ``prefill`` started the answer."""

    question: str
    gold: int
    completion: str
    extracted: int | float | None
    prefill: str | None = None

    @property
    def correct(self) -> bool:
        return self.extracted is not None and self.extracted == self.gold  # 12.0 was already read as 12


@dataclass(frozen=True)
class MathResult:
    """Exact-match accuracy with its counts and the per-problem predictions."""

    correct: int
    total: int
    predictions: tuple[MathPrediction, ...] = field(default=(), repr=False)
    task_sha256: str = ""

    @property
    def accuracy(self) -> float:
        return self.correct / self.total if self.total else 0.0

    @property
    def ci95(self) -> tuple[float, float]:
        """95% Wilson interval of the accuracy."""
        return wilson_interval(self.correct, self.total)

    def metrics(self) -> dict[str, float]:
        low, high = self.ci95
        return {
            "math_accuracy": self.accuracy,
            "math_correct": self.correct,
            "math_total": self.total,
            "math_ci95_low": low,
            "math_ci95_high": high,
        }


@dataclass(frozen=True)
class GeneralResult:
    """Mean next-token loss over ``n_tokens`` predicted tokens, its perplexity, and KL(base || this) (0 for base)."""

    loss: float
    n_tokens: int
    kl: float = 0.0
    task_sha256: str = ""
    # per text with >= 1 predicted token: summed next-token loss and predicted tokens (for the standard errors)
    text_loss_sums: tuple[float, ...] = field(default=(), repr=False)
    text_tokens: tuple[int, ...] = field(default=(), repr=False)
    # the base's float32 next-token log-probabilities per text ((tokens, vocab) tensors), kept by
    # ``evaluate(..., keep_base_logprobs=True)`` so that later edits' KL reuses them; never serialised
    logprobs: tuple[Any, ...] | None = field(default=None, repr=False, compare=False)

    @property
    def perplexity(self) -> float:
        return math.exp(self.loss) if self.loss < 709 else math.inf  # exp overflows a float beyond ~709.78

    @property
    def loss_se(self) -> float:
        """Standard error of :attr:`loss` over texts (:func:`~mathneuro_edit.evaluation.significance.ratio_se`); nan if unknown."""
        return ratio_se(self.text_loss_sums, self.text_tokens) if self.text_tokens else math.nan

    def metrics(self) -> dict[str, float]:
        return {
            "general_loss": self.loss,
            "general_loss_se": self.loss_se,
            "general_perplexity": self.perplexity,
            "general_kl": self.kl,
            "general_texts": len(self.text_tokens),
        }


TaskResult = MathResult | GeneralResult | LmEvalResult


def compare(base: TaskResult, edited: TaskResult | None) -> dict[str, Any] | None:
    """The paired comparison of one task, base vs edited (``None`` when there is nothing to pair).

    Math: the discordant counts, the exact McNemar p-value and whether it is significant (p < 0.05), on the
    same problems. General: the loss change and its paired standard error over the same texts.

    Example:
        >>> P = lambda ok: MathPrediction("q", 1, "", 1 if ok else 0)
        >>> compare(MathResult(1, 2, (P(True), P(False))), MathResult(2, 2, (P(True), P(True))))["mcnemar_p"]
        1.0
    """
    if isinstance(base, MathResult) and isinstance(edited, MathResult) and base.predictions and edited.predictions:
        if [p.question for p in base.predictions] != [p.question for p in edited.predictions]:
            raise InputError("compare: base and edited were evaluated on different problems; pair the same task")
        b, c = discordant_pairs([p.correct for p in base.predictions], [p.correct for p in edited.predictions])
        p = mcnemar_exact(b, c)
        return {
            "test": "mcnemar_exact",
            "accuracy_change": edited.accuracy - base.accuracy,
            "base_only": b,
            "edited_only": c,
            "mcnemar_p": p,
            "significant": significant(p),
        }
    if (
        isinstance(base, GeneralResult)
        and isinstance(edited, GeneralResult)
        and base.text_tokens
        and base.text_tokens == edited.text_tokens
    ):
        diffs = [e - b for b, e in zip(base.text_loss_sums, edited.text_loss_sums)]
        return {"loss_change": edited.loss - base.loss, "loss_change_se": ratio_se(diffs, base.text_tokens)}
    return None


def _json_value(x: Any) -> Any:
    # strict JSON has no NaN/Infinity: a broken (e.g. over-pruned) model's inf perplexity is written as null
    return None if isinstance(x, float) and not math.isfinite(x) else x


@dataclass
class EvalResults:
    """Results of :func:`evaluate`: ``base`` (the model as given) and ``edited`` (empty without an edit).

    Example:
        >>> r = EvalResults({"toy": MathResult(1, 2)}, {"toy": MathResult(2, 2)})
        >>> r.to_dict()["toy"]["edited"]["math_accuracy"]
        1.0
    """

    base: dict[str, TaskResult]
    edited: dict[str, TaskResult] = field(default_factory=dict)

    def to_dict(self, predictions: bool = False) -> dict[str, dict[str, dict[str, Any]]]:
        """``{task: {"base": {metric: value}, "edited": {...}}}``; ``predictions=True`` adds per-problem rows."""
        out: dict[str, dict[str, dict[str, Any]]] = {}
        for name, base in self.base.items():
            out[name] = {}
            for label, res in (("base", base), ("edited", self.edited.get(name))):
                if res is None:
                    continue
                row: dict[str, Any] = {k: _json_value(v) for k, v in res.metrics().items()}
                if predictions and isinstance(res, MathResult):
                    row["predictions"] = [_prediction_row(p) for p in res.predictions]
                out[name][label] = row
            comparison = compare(base, self.edited.get(name))
            if comparison is not None:
                out[name]["comparison"] = {k: _json_value(v) for k, v in comparison.items()}
        return out

    def save_json(self, path: str | Path, predictions: bool = True) -> Path:
        """Write :meth:`to_dict` as JSON atomically to ``path``, a file or an existing folder (``eval.json`` in it);
        ``predictions``: with the per-problem rows (question, gold, prefill, completion, extracted, correct), so
        that a reader can audit every score. Returns the path written."""
        path = Path(path)
        if path.is_dir():
            path = path / EVAL_NAME
        if not path.parent.is_dir():
            raise InputError(f"save_json: folder {path.parent} does not exist; create it first")
        write_json_atomic(path, self.to_dict(predictions))
        return path

    def lm_eval_reports(self) -> dict[str, dict[str, Any]]:
        """lm-eval's own results documents (:func:`~mathneuro_edit.evaluation.lm_eval_task.harness_report`), by
        file name (:data:`~mathneuro_edit.layout.LM_EVAL_RESULTS`: base, edited); empty without an lm-eval task.
        Several lm-eval entries are merged per model, as one ``lm_eval`` call over their tasks would report them."""
        out: dict[str, dict[str, Any]] = {}
        for name, side in zip(LM_EVAL_RESULTS, (self.base, self.edited)):
            for res in side.values():
                if isinstance(res, LmEvalResult) and res.report:
                    doc = out.setdefault(name, {})
                    for key, value in res.report.items():
                        if isinstance(value, dict):
                            doc.setdefault(key, {}).update(value)
                        else:
                            doc.setdefault(key, value)
        return out

    def save_lm_eval(self, folder: str | Path) -> list[Path]:
        """Write :meth:`lm_eval_reports` into ``folder`` (beside eval.json); returns the paths (none without lm-eval)."""
        return [write_json_atomic(Path(folder) / name, doc) for name, doc in self.lm_eval_reports().items()]

    def to_markdown(self) -> str:
        """The before/after table (console and model card, :func:`~mathneuro_edit.evaluation.report.eval_markdown`):
        accuracies with n and 95% interval, losses with standard errors, changes with the paired test."""
        return eval_markdown(self.to_dict())


def _prediction_row(p: MathPrediction) -> dict[str, Any]:
    """One audit row of eval.json (key order fixed: the file is byte-identical between runs)."""
    return {k: getattr(p, k) for k in ("question", "gold", "prefill", "completion", "extracted", "correct")}
