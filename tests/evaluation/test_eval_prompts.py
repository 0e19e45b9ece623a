"""Math prompts for instruct models (chat template, few-shot turns, prefill), answer extraction, arithmetic task."""

from __future__ import annotations

import os
import re

import pytest
import torch
from torch import nn

from mathneuro_edit.data.arithmetic import POOL_SIZE, arithmetic_problems
from mathneuro_edit.data.sources import load_math_problems, load_texts
from mathneuro_edit.errors import InputError
from mathneuro_edit.evaluation.prompts import (
    completion_done,
    extract_prediction,
    parse_number,
    render_prompt,
)
from mathneuro_edit.evaluation.results import MathPrediction
from mathneuro_edit.evaluation.runner import evaluate, math_accuracy
from mathneuro_edit.evaluation.tasks import MathTask
from mathneuro_edit.recipe.io import quickstart_recipe, recipe_from_dict
from tests._tiny import char_tokenizer

# a small template in the ChatML spirit; the real SmolLM2 one is checked in the `real` test below
TEMPLATE = (
    "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)


def chat_tokenizer():  # noqa: ANN201
    tok = char_tokenizer()  # adds <s> to plain text: a chat prompt must not get it (the template writes its own)
    tok.chat_template = TEMPLATE
    return tok


# ------------------------------------------------------------------------------------------------- extraction


@pytest.mark.parametrize(
    "completion, prefill, expected",
    [
        ("3 + 4 = 7\n#### 7", None, 7),  # rule 1: after ####
        ("#### 1,234.", None, 1234),
        ("The total is 8 + 4 = 12. #### 13 more text 99", None, 13),  # #### wins over the last number
        ("#### about 5", None, None),  # #### without a number right after it: no answer
        ("68", "23 + 45 = ", 68),  # rule 2: the first number after a prefill
        ("68\n\nThat is 12 more than 56", "23 + 45 = ", 68),
        ("-5, since 3 - 8 is negative", "3 - 8 = ", -5),
        ("12.0", "6 * 2 = ", 12),  # decimals equal to an integer are that integer
        ("She had 5 apples and ate 2, so 3 are left.", None, 3),  # rule 3: the last number
        ("Total: $1,250.50 then 1,000,000.", None, 1000000),
        ("10-5 = 5", None, 5),  # a minus after a digit is an operator, not a sign
        ("the result is -17.", None, -17),
        ("half of 7 is 3.5", None, 3.5),
        ("a list 1,2,3", None, 3),  # commas not in groups of three are separators
        ("3 apples\nQuestion: how about 9?", None, 3),  # a question the model made up is cut first
        ("no number here", None, None),
        ("", "1 + 1 = ", None),
    ],
)
def test_extract_prediction(completion: str, prefill: str | None, expected: int | float | None) -> None:
    got = extract_prediction(completion, prefill)
    assert got == expected and type(got) is type(expected)


def test_decimal_gold_comparison() -> None:
    assert MathPrediction("q", 12, "12.0", parse_number("12.0")).correct
    assert not MathPrediction("q", 12, "12.5", parse_number("12.5")).correct
    assert not MathPrediction("q", 0, "", None).correct  # no answer is never right, not even for gold 0
    assert parse_number("0.30") == 0.3 and parse_number("-0.0") == 0 and parse_number("1e5") == 100000


@pytest.mark.parametrize(
    "text, prefill, done",
    [
        ("68", "23 + 45 = ", False),  # the number may continue
        ("68.", "23 + 45 = ", False),  # 68.5 is possible
        ("68<", "23 + 45 = ", True),
        ("68\n", "23 + 45 = ", True),
        ("The sum is", "23 + 45 = ", False),
        ("I think 68 is", None, False),  # without a prefill only #### or a new question ends the answer
        ("#### 68\n", None, True),
    ],
)
def test_completion_done(text: str, prefill: str | None, done: bool) -> None:
    assert completion_done(text, prefill) is done


# ---------------------------------------------------------------------------------------------------- prompts


SHOTS = [
    {"question": "What is 2 + 3?", "answer": "2 + 3 = 5\n#### 5", "prefill": "2 + 3 = "},
    {"question": "Tom has 4 cards and gets 1. How many?", "answer": "4 + 1 = 5\n#### 5"},
]
ITEM = {"question": "What is 23 + 45?", "answer": "#### 68", "prefill": "23 + 45 = "}


def test_chat_prompt_has_shots_as_turns_and_prefill_last() -> None:
    tok = chat_tokenizer()
    prompt = render_prompt(tok, ITEM, SHOTS, chat=True)
    # written out by hand: a shot with a prefill answers "prefill + gold", one without its worked answer
    assert prompt == (
        "<user>What is 2 + 3?\n<assistant>2 + 3 = 5\n<user>Tom has 4 cards and gets 1. How many?\n"
        "<assistant>4 + 1 = 5\n#### 5\n<user>What is 23 + 45?\n<assistant>23 + 45 = "
    )
    assert render_prompt(tok, ITEM, [], chat=False) == "Question: What is 23 + 45?\nAnswer: 23 + 45 = "


class ChatFake(nn.Module):
    """Answers the last user turn of a chat prompt from a script; checks the prompt it was given."""

    def __init__(self, tok, script: dict[str, str]) -> None:  # noqa: ANN001
        super().__init__()
        self.w = nn.Parameter(torch.zeros(1))
        self.tok, self.script, self.prompts = tok, script, []

    def generate(self, input_ids, attention_mask, **kw):  # type: ignore[no-untyped-def]
        rows = []
        for ids, m in zip(input_ids, attention_mask):
            prompt = self.tok.decode(ids[m.bool()])  # special tokens kept: a BOS would show as "<s>"
            self.prompts.append(prompt)
            question = re.findall(r"<user>(.*)\n", prompt)[-1]
            rows.append(self.tok(self.script[question], add_special_tokens=False)["input_ids"] + [2])  # 2: eos
        width = max(map(len, rows))
        new = torch.tensor([r + [kw["pad_token_id"]] * (width - len(r)) for r in rows])
        return torch.cat([input_ids, new], 1)


def test_chat_evaluation_end_to_end() -> None:
    tok = chat_tokenizer()
    problems = [
        ITEM,
        {"question": "What is 9 - 4?", "answer": "#### 5", "prefill": "9 - 4 = "},
        {"question": "Mia has 3 pens and buys 2. How many?", "answer": "3 + 2 = 5\n#### 5"},
    ]
    fake = ChatFake(
        tok,
        {
            "What is 23 + 45?": "68\n\nso 68 it is 99",
            "What is 9 - 4?": "6",
            "Mia has 3 pens and buys 2. How many?": "She buys 2, so 3 + 2 = 5 pens.",
        },
    )
    res = math_accuracy(fake, tok, problems, n_shot=1, shots=SHOTS[:1], batch_size=2, progress=False)
    assert [p.extracted for p in res.predictions] == [68, 6, 5] and res.correct == 2
    assert res.predictions[0].prefill == "23 + 45 = " and res.predictions[2].prefill is None
    assert res.predictions[2].completion == "She buys 2, so 3 + 2 = 5 pens."  # the raw answer is kept
    assert all(not p.startswith("<s>") for p in fake.prompts)  # the chat prompt gets no extra BOS
    assert (
        sorted(fake.prompts)[0]
        == "<user>What is 2 + 3?\n<assistant>2 + 3 = 5\n<user>Mia has 3 pens and buys 2. How many?\n<assistant>"
    )
    # plain prompts on the same tokenizer when asked: the organism's format, with the tokenizer's BOS
    plain = MathTask("m", problems, chat_template=False)
    assert plain.sha256 != MathTask("m", problems).sha256  # a cached base is never reused across prompt formats


def test_chat_template_true_needs_a_template() -> None:
    tok = char_tokenizer()  # no chat template
    with pytest.raises(
        InputError, match="evaluation.chat_template: true, but the model's tokenizer has no chat template"
    ):
        evaluate(ChatFake(tok, {}), tok, [MathTask("m", [ITEM], chat_template=True)], progress=False)
    with pytest.raises(InputError, match="chat_template must be"):
        MathTask("m", [ITEM], chat_template="yes")  # type: ignore[arg-type]
    with pytest.raises(InputError, match="prefill must be a string"):
        MathTask("m", [{**ITEM, "prefill": 3}])


def test_recipe_chat_template_key() -> None:
    d = quickstart_recipe().resolved_dict()
    assert d["evaluation"]["chat_template"] == "auto"
    assert recipe_from_dict(d, ["evaluation.chat_template=false"]).evaluation.chat_template is False
    assert recipe_from_dict(d, ["evaluation.chat_template=true"]).evaluation.chat_template is True
    with pytest.raises(InputError, match="evaluation.chat_template"):
        recipe_from_dict(d, ["evaluation.chat_template=sometimes"])


# ------------------------------------------------------------------------------------------------ arithmetic


def test_arithmetic_problems_are_deterministic_distinct_and_right() -> None:
    a = arithmetic_problems(300, seed=0)
    assert a == arithmetic_problems(300, seed=0) and a != arithmetic_problems(300, seed=1)
    assert arithmetic_problems(50, seed=0) == a[:50]  # a prefix: more items never reshuffle the first ones
    assert len({p["question"] for p in a}) == 300
    kinds = {"+": 0, "-": 0, "*": 0}
    for p in a:
        x, op, y = re.fullmatch(r"What is (\d+) ([-+*]) (\d+)\?", p["question"]).groups()
        x, y = int(x), int(y)
        value = {"+": x + y, "-": x - y, "*": x * y}[op]
        kinds[op] += 1
        assert p["prefill"] == f"{x} {op} {y} = " and p["answer"] == f"{x} {op} {y} = {value}\n#### {value}"
        assert (10 <= x <= 99 and 10 <= y <= 99) if op != "*" else (1 <= x <= 9 and 1 <= y <= 9)
        assert value >= 0
    assert all(70 <= n <= 130 for n in kinds.values()), kinds  # one third each
    many = arithmetic_problems(1000, seed=0)
    assert sum(p["question"].count("*") for p in many) == 81  # every one-digit product once, then + and - only
    with pytest.raises(InputError, match="1 to 12276"):
        arithmetic_problems(POOL_SIZE + 1, seed=0)


def test_arithmetic_source() -> None:
    problems = load_math_problems("arithmetic", 5, seed=3)
    assert problems == [{**p, "gold": int(p["answer"].rsplit("#### ", 1)[1])} for p in arithmetic_problems(5, 3)]
    texts = load_texts({"path": "arithmetic"}, 2, seed=3).texts
    assert texts[0] == f"Question: {problems[0]['question']}\nAnswer: {problems[0]['answer']}"
    r = recipe_from_dict(quickstart_recipe().resolved_dict(), ["evaluation.math=arithmetic", "evaluation.samples=4"])
    assert r.public_dict()["evaluation"]["math"]["path"] == "arithmetic"  # not a local path: never redacted
    from mathneuro_edit.runs.steps.evaluate import eval_tasks

    task = eval_tasks(r)[0]
    assert [p["prefill"] for p in task.problems] == [p["prefill"] for p in arithmetic_problems(4, 0)]
    with pytest.raises(InputError, match="split does not apply to a arithmetic source"):
        recipe_from_dict(quickstart_recipe().resolved_dict(), ["evaluation.math={path: arithmetic, split: test}"])


def test_gsm8k_file_with_prefill(tmp_path) -> None:  # noqa: ANN001
    f = tmp_path / "p.jsonl"
    f.write_text(
        '{"question": "2 + 2?", "answer": "#### 4", "prefill": "2 + 2 = "}\n{"question": "3 + 3?", "answer": "#### 6"}\n'
    )
    got = sorted(load_math_problems(str(f), 2, seed=0), key=lambda p: p["gold"])
    assert got == [
        {"question": "2 + 2?", "answer": "#### 4", "gold": 4, "prefill": "2 + 2 = "},
        {"question": "3 + 3?", "answer": "#### 6", "gold": 6},
    ]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "x", "answer": "#### 1", "prefill": 5}\n')
    with pytest.raises(InputError, match="line 1: prefill must be text"):
        load_math_problems(str(bad), 1, seed=0)


# ------------------------------------------------------------------------------------- the real model (optional)

GGUF = os.environ.get("MATHNEURO_EDIT_SMOLLM2_GGUF")


@pytest.mark.real
@pytest.mark.skipif(not GGUF, reason="set MATHNEURO_EDIT_SMOLLM2_GGUF to SmolLM2-135M-Instruct.Q4_1.gguf")
def test_smollm2_chat_eval_gives_nontrivial_arithmetic() -> None:
    from pathlib import Path

    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(GGUF)  # type: ignore[arg-type]
    tok = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name).eval()
    problems = [{k: p[k] for k in ("question", "answer", "prefill")} for p in arithmetic_problems(48, seed=0)]
    chat = math_accuracy(model, tok, problems, max_new_tokens=6, batch_size=16, progress=False)
    # measured on 300 problems: 35.7% (30.5-41.2), see docs/evaluation.md; the old prompt (no prefill) gets ~0%
    assert chat.accuracy >= 0.2, [(p.completion, p.gold) for p in chat.predictions]
    assert all(p.prefill for p in chat.predictions) and tok.chat_template


def test_real_model_recipe_and_its_vendored_data(monkeypatch: pytest.MonkeyPatch) -> None:
    from pathlib import Path

    from mathneuro_edit.data.sources import load_texts
    from mathneuro_edit.recipe.io import load_recipe
    from mathneuro_edit.runs.steps.evaluate import eval_tasks

    root = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(root)  # the recipe's paths are relative to the repository root
    r = load_recipe("recipes/smollm2-arithmetic-boost.yaml")
    assert r.base.model.endswith(".gguf") and r.evaluation.chat_template == "auto"
    assert r.public_dict()["base"]["model"] == "<local>"  # a local file, never published as a path
    math_task, general = eval_tasks(r)
    assert len(math_task.problems) == 300 and all(p["prefill"] for p in math_task.problems)
    assert len(general.texts) == 300
    data = root / "recipes" / "data"
    calib = load_texts(str(data / "wikitext2_test_calib.txt"), 200, 0).texts
    assert len(set(calib)) == 200 and not set(calib) & set(general.texts)  # held-out texts are never calibration texts
    test_q = {p["question"] for p in load_math_problems(str(data / "gsm8k_test_300.jsonl"), 300, 0)}
    train_q = {p["question"] for p in load_math_problems(str(data / "gsm8k_train_200.jsonl"), 200, 0)}
    assert len(test_q) == 300 and len(train_q) == 200 and not test_q & train_q
    assert (data / "LICENSE.gsm8k").read_text().startswith("MIT License")
    assert "CC BY-SA 3.0" in (data / "LICENSE.wikitext").read_text()
