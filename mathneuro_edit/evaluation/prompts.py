"""Math prompts (plain or through the tokenizer's chat template) and the answer read from a completion.

The prompt formats (worked examples as earlier chat turns, the ``prefill``, tokenization without added special
tokens) and the rules that read the answer (``####``, then the first number after a prefill, else the last; what
a number is and when a minus is a sign) are docs/evaluation.md's "Prompts" and "Reading the answer": the user's
contract, which :func:`encode_prompts` and :func:`extract_prediction` implement.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any, Literal

from ..errors import InputError
from .results import extract_answer, math_prompt, truncate_completion

__all__ = [
    "ChatSetting",
    "PromptStyle",
    "PROMPT_STYLES",
    "parse_number",
    "extract_prediction",
    "ANSWER_FORMS",
    "answer_form",
    "operation_of",
    "completion_done",
    "uses_chat_template",
    "render_prompt",
    "encode_prompts",
]

ChatSetting = bool | Literal["auto"]
# plain prompts (no chat template): "question-answer" is the organism's "Question: ...\nAnswer:" format;
# "equations" writes each worked example as its bare equation line ("12 + 34 = 46") and the problem as its
# prefill ("23 + 45 = "): the format a pretrained base continues best (docs/evaluation.md "Prompt formats")
PromptStyle = Literal["question-answer", "equations"]
PROMPT_STYLES = ("question-answer", "equations")

# sign only after a non-word, non-')' character; thousands commas only in groups of three; decimals need a digit
_NUMBER = re.compile(r"(?:(?<![\w)])-)?(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?")
_HASHES = re.compile(r"####[ \t]*")
# a number followed by a character that cannot continue it (what "the number is complete" means while generating)
_COMPLETE = re.compile(r"[,.]*[^\d,.]")
# after the first number of a prefilled answer: an operator or "=" means the model wrote an expression, not a result
_RESTART = re.compile(r"[ \t]*[-+*/\u00d7\u00f7=]")
# the operation of a prefill "a + b = "
_OPERATION = re.compile(r"^\s*-?\d[\d,.]*\s*([-+*/\u00d7\u00f7])\s*-?\d")

ANSWER_FORMS = ("answer", "restart", "none")
"""What a completion is (:func:`answer_form`): a well-formed answer, a restart of the problem, or no number."""


def parse_number(token: str) -> int | float | None:
    """A number as written (``"1,234"``, ``"-5"``, ``"12.0"``, ``"12.5"``): an int when integral, else a float.

    Why Decimal: ``"12.0"`` must equal the gold 12 exactly, and ``"0.30"`` must not pass through binary rounding
    before the integral test.

    Example:
        >>> parse_number("1,234"), parse_number("-12.0"), parse_number("2.5"), parse_number("x")
        (1234, -12, 2.5, None)
    """
    try:
        value = Decimal(token.replace(",", ""))
    except ArithmeticError:  # decimal.InvalidOperation
        return None
    if not value.is_finite():
        return None
    return int(value) if value == value.to_integral_value() else float(value)


def extract_prediction(completion: str, prefill: str | None = None) -> int | float | None:
    """The answer of a completion (what the model generated after the prompt and the item's prefill, if it had
    one) by the rules of the module docstring (``None``: no number found).

    Example:
        >>> extract_prediction("so 3 + 4 = 7\\n#### 7"), extract_prediction("68\\n\\n12 more", "23 + 45 = ")
        (7, 68)
        >>> extract_prediction("She has 2 + 3 = 5 apples, so 1,005.00 in all.")
        1005
    """
    text = truncate_completion(completion)[0]
    hashes = _HASHES.search(text)
    if hashes is not None:
        m = _NUMBER.match(text, hashes.end())
        return parse_number(m.group()) if m else None
    numbers = _NUMBER.findall(text)
    return parse_number(numbers[0] if prefill else numbers[-1]) if numbers else None


def answer_form(completion: str, prefill: str | None = None) -> str:
    """The form of a completion, apart from whether it is right: ``"answer"``, ``"restart"`` or ``"none"``.

    - ``"none"``: no number to read (or ``####`` without a number after it);
    - ``"restart"`` (prefilled problems only): the first number is followed by an operator or ``=``, so the model
      began to write the problem again (``42 +`` after ``Answer: 42 + 17 = ``) instead of its result;
    - ``"answer"``: otherwise, a number the rules of :func:`extract_prediction` read as the answer.

    Why: a pretrained base under a prompt it handles poorly often restarts the equation; an edit that only makes
    it answer raises accuracy without any better arithmetic. The sweep reports the answer rate and the accuracy
    among answers apart from the accuracy (docs/evaluation.md "Format apart from math").

    Generation stops once the first number is complete (:func:`completion_done`); a tokenizer that writes ``" +"``
    as one token (SmolLM2, Gemma 3) shows the operator in the completion; one that writes the space alone stops
    before it, and such a restart reads as an answer (a wrong one).

    Example:
        >>> answer_form("59", "42 + 17 = "), answer_form("42 +", "42 + 17 = "), answer_form(" so", "42 + 17 = ")
        ('answer', 'restart', 'none')
        >>> answer_form("She has 5 apples.\\n#### 5"), answer_form("#### none")
        ('answer', 'none')
    """
    text = truncate_completion(completion)[0]
    hashes = _HASHES.search(text)
    if hashes is not None:
        return "answer" if _NUMBER.match(text, hashes.end()) else "none"
    m = _NUMBER.search(text)
    if m is None:
        return "none"
    return "restart" if prefill and _RESTART.match(text, m.end()) else "answer"


def operation_of(problem: Mapping[str, Any]) -> str:
    """The operation of an arithmetic problem (``"+"``, ``"-"``, ``"*"``, ...) read from its prefill, or ``""``.

    Example:
        >>> operation_of({"question": "What is 9 * 7?", "prefill": "9 * 7 = "}), operation_of({"question": "x"})
        ('*', '')
    """
    m = _OPERATION.match(problem.get("prefill") or "")
    return m.group(1) if m else ""


def completion_done(text: str, prefill: str | None = None) -> bool:
    """Whether generation can stop: the answer is complete (``####`` rule, a new question, or with a prefill the
    first number followed by a character that cannot continue it).

    Example:
        >>> completion_done("68", "23 + 45 = "), completion_done("68\\n", "23 + 45 = "), completion_done("68\\n")
        (False, True, False)
    """
    if truncate_completion(text)[1]:
        return True
    m = _NUMBER.search(text) if prefill else None
    return m is not None and _COMPLETE.match(text, m.end()) is not None


def uses_chat_template(tokenizer: Any, setting: ChatSetting) -> bool:
    """Resolve ``evaluation.chat_template`` for a tokenizer (``True`` needs one that has a chat template).

    Example:
        >>> class Tok: chat_template = None
        >>> uses_chat_template(Tok(), "auto"), uses_chat_template(Tok(), False)
        (False, False)
    """
    has = bool(getattr(tokenizer, "chat_template", None))
    if setting == "auto":
        return has
    if setting is True and not has:
        raise InputError(
            "evaluation.chat_template: true, but the model's tokenizer has no chat template; set "
            "evaluation.chat_template: auto (plain 'Question:/Answer:' prompts) or use a chat model"
        )
    if not isinstance(setting, bool):
        raise InputError(f"chat_template: must be auto, true or false, got {setting!r}")
    return setting


def _shot_answer(shot: Mapping[str, str]) -> str:
    """What the assistant says in a worked example: the prefill and the gold number, or the worked answer."""
    return f"{shot['prefill']}{extract_answer(shot['answer'])}" if shot.get("prefill") else shot["answer"]


def render_prompt(
    tokenizer: Any,
    problem: Mapping[str, str],
    shots: Sequence[Mapping[str, str]],
    chat: bool,
    style: PromptStyle = "question-answer",
) -> str:
    """The prompt text of one problem (see the module docstring), prefill included.

    Example:
        >>> render_prompt(None, {"question": "1 + 1?", "prefill": "1 + 1 = "}, [], chat=False)
        'Question: 1 + 1?\\nAnswer: 1 + 1 = '
        >>> shot = {"question": "2 + 2?", "answer": "#### 4", "prefill": "2 + 2 = "}
        >>> render_prompt(None, {"question": "1 + 1?", "prefill": "1 + 1 = "}, [shot], chat=False, style="equations")
        '2 + 2 = 4\\n1 + 1 = '
    """
    prefill = problem.get("prefill") or ""
    if not chat and style == "equations":
        if not prefill or not all(s.get("prefill") for s in shots):
            raise InputError(
                "evaluation.prompt_style: equations needs a prefill on every problem and worked example "
                "(the arithmetic task has one); use question-answer for other problems"
            )
        return "".join(f"{_shot_answer(s)}\n" for s in shots) + prefill
    if style not in PROMPT_STYLES:
        raise InputError(f"prompt_style: must be one of {', '.join(PROMPT_STYLES)}, got {style!r}")
    if not chat:
        plain = math_prompt(problem["question"], [{**s, "answer": _shot_answer(s)} for s in shots])
        return f"{plain} {prefill}" if prefill else plain
    messages = []
    for s in shots:
        messages += [{"role": "user", "content": s["question"]}, {"role": "assistant", "content": _shot_answer(s)}]
    messages.append({"role": "user", "content": problem["question"]})
    return chat_text(tokenizer, messages) + prefill


def chat_text(tokenizer: Any, messages: list[dict[str, str]]) -> str:
    """``messages`` rendered by the tokenizer's chat template, ready for the assistant's turn.

    Why every exception is caught: the template is a program from the model's files (its ``tokenizer_config.json``
    or ``chat_template.jinja``), someone else's; whatever it raises on a plain conversation (a syntax error,
    ``raise_exception``, an undefined name, the sandbox's refusal of ``__class__``, a division by zero, a template
    that is not text) is that file's fault, and was an internal error: one line names it and the two ways out.
    """
    try:
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    except Exception as e:  # noqa: BLE001 - see the docstring: the template is input
        why = " ".join(f"{type(e).__name__}: {e}".split())[:200]
        raise InputError(
            f"the tokenizer's chat template fails on a plain conversation ({why}); fix chat_template in the "
            "model's tokenizer_config.json (or chat_template.jinja), or set evaluation.chat_template: false"
        ) from None
    if not isinstance(text, str):
        raise InputError(
            f"the tokenizer's chat template gave {type(text).__name__}, not text; fix chat_template in the "
            "model's tokenizer_config.json, or set evaluation.chat_template: false"
        )
    return text


def encode_prompts(
    tokenizer: Any,
    problems: Sequence[Mapping[str, str]],
    shots: Sequence[Mapping[str, str]],
    setting: ChatSetting,
    style: PromptStyle = "question-answer",
) -> list[list[int]]:
    """Token ids of every problem's prompt: plain prompts with the tokenizer's special tokens (BOS, as in training),
    chat prompts without (the template wrote them)."""
    chat = uses_chat_template(tokenizer, setting)
    texts = [render_prompt(tokenizer, p, shots, chat, style) for p in problems]
    return [list(ids) for ids in tokenizer(texts, add_special_tokens=not chat)["input_ids"]]
