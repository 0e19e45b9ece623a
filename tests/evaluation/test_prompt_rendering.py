"""How a problem becomes a prompt, decided without a model (issue 48 item 2; milliseconds): the plain
Question/Answer text with worked examples (a prefilled example answers with its prefill and gold number), the
equation lines, whether the chat template is used, and that ``encode_prompts`` passes each of them through.
``scripts/mutation.sh prompts`` mutates ``evaluation/prompts.py`` against this file and
``test_answer_forms.py``."""

from __future__ import annotations

from typing import Any

import pytest

from mathneuro_edit.errors import InputError
from mathneuro_edit.evaluation.prompts import encode_prompts, render_prompt, uses_chat_template

SHOT = {"question": "2 + 2?", "answer": "#### 4", "prefill": "2 + 2 = "}
PROBLEM = {"question": "1 + 1?", "prefill": "1 + 1 = "}


class _Tok:
    """A tokenizer whose ids are the characters of the text (and a 1 for the special tokens asked for)."""

    def __init__(self, template: Any = None) -> None:
        self.chat_template = template

    def apply_chat_template(self, messages: list[dict[str, str]], tokenize: bool, add_generation_prompt: bool) -> str:
        assert tokenize is False and add_generation_prompt is True
        return "".join(f"<{m['role']}>{m['content']}" for m in messages) + "<assistant>"

    def __call__(self, texts: list[str], add_special_tokens: bool) -> dict[str, list[list[int]]]:
        return {"input_ids": [[1] * add_special_tokens + [ord(c) for c in t] for t in texts]}


def _text(ids: list[int]) -> str:
    return "".join(chr(i) for i in ids if i != 1)


def test_plain_prompts_with_and_without_a_prefill() -> None:
    assert render_prompt(None, PROBLEM, [SHOT], chat=False) == (
        "Question: 2 + 2?\nAnswer: 2 + 2 = 4\n\nQuestion: 1 + 1?\nAnswer: 1 + 1 = "
    )
    worked = {"question": "q", "answer": "a\n#### 3"}
    assert render_prompt(None, {"question": "1 + 1?"}, [worked], chat=False) == (
        "Question: q\nAnswer: a\n#### 3\n\nQuestion: 1 + 1?\nAnswer:"  # no prefill: no trailing blank
    )


def test_equation_lines_need_a_prefill_everywhere_and_chat_ignores_the_style() -> None:
    assert render_prompt(None, PROBLEM, [SHOT, SHOT], chat=False, style="equations") == "2 + 2 = 4\n2 + 2 = 4\n1 + 1 = "
    with pytest.raises(InputError, match="equations needs a prefill on every problem and worked example"):
        render_prompt(None, PROBLEM, [{"question": "q", "answer": "#### 1"}], chat=False, style="equations")
    with pytest.raises(InputError, match="equations needs a prefill"):
        render_prompt(None, {"question": "q"}, [], chat=False, style="equations")
    assert render_prompt(_Tok("t"), PROBLEM, [SHOT], chat=True, style="equations") == (
        "<user>2 + 2?<assistant>2 + 2 = 4<user>1 + 1?<assistant>1 + 1 = "
    )
    with pytest.raises(InputError, match="prompt_style: must be one of"):
        render_prompt(None, PROBLEM, [], chat=False, style="Equations")


def test_whether_the_chat_template_is_used() -> None:
    assert uses_chat_template(object(), "auto") is False  # no attribute at all: no template
    assert uses_chat_template(_Tok(None), "auto") is False and uses_chat_template(_Tok("t"), "auto") is True
    assert uses_chat_template(_Tok(None), False) is False and uses_chat_template(_Tok("t"), False) is False
    assert uses_chat_template(_Tok("t"), True) is True
    with pytest.raises(InputError):
        uses_chat_template(_Tok(None), True)
    with pytest.raises(InputError, match="chat_template: must be auto, true or false"):
        uses_chat_template(_Tok("t"), "yes")


def test_encode_prompts_passes_the_setting_and_the_style_through() -> None:
    plain = encode_prompts(_Tok(None), [PROBLEM], [SHOT], "auto")
    assert plain[0][0] == 1 and _text(plain[0]) == render_prompt(None, PROBLEM, [SHOT], chat=False)
    lines = encode_prompts(_Tok(None), [PROBLEM], [SHOT], False, style="equations")
    assert _text(lines[0]) == "2 + 2 = 4\n1 + 1 = "
    chat = encode_prompts(_Tok("t"), [PROBLEM, {"question": "3?"}], [], "auto")
    assert [c[0] for c in chat] == [ord("<"), ord("<")]  # no special tokens: the template wrote them
    assert [_text(c) for c in chat] == ["<user>1 + 1?<assistant>1 + 1 = ", "<user>3?<assistant>"]
