"""Tests of the model organism: its data generators and the shipped model."""

from __future__ import annotations

import json
import re

import pytest
import torch

from mathneuro_edit.errors import InputError
from mathneuro_edit.organism import (
    format_math,
    general_text_entropy,
    general_texts,
    load_organism,
    math_problems,
    math_texts,
    mixed_texts,
    organism_path,
    parse_answer,
)
from mathneuro_edit.organism.data import NAMES, OBJECTS

STEP = re.compile(r"^(\d+) ([+\-*]) (\d+) = (\d+)$")
OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}


def _key(problem: dict[str, str]) -> tuple[int, ...]:
    """The numbers of a problem's question, in order (its numbers-and-operations identity)."""
    return tuple(int(x) for x in re.findall(r"\d+", problem["question"]))


def test_generators_are_deterministic_and_seed_dependent() -> None:
    assert math_problems(50, seed=3) == math_problems(50, seed=3)
    assert general_texts(50, seed=3, split="test") == general_texts(50, seed=3, split="test")
    assert math_problems(50, seed=3) != math_problems(50, seed=4)
    assert general_texts(50, seed=3) != general_texts(50, seed=4)
    assert mixed_texts(20, seed=1) == mixed_texts(20, seed=1)
    # a prefix of a longer request is the shorter request (one stream per seed)
    assert math_problems(80, seed=3)[:50] == math_problems(50, seed=3)


def test_answers_are_correct_worked_steps_ending_in_gsm8k_line() -> None:
    for p in math_problems(300, seed=0) + math_problems(100, seed=0, split="test"):
        assert set(p) == {"question", "answer"}
        *steps, last = p["answer"].split("\n")
        assert 1 <= len(steps) <= 3 and re.fullmatch(r"#### \d+", last)
        numbers = _key(p)
        value = numbers[0]  # the question states the start value, then one operand per operation
        assert len(numbers) == len(steps) + 1
        for line, operand in zip(steps, numbers[1:]):
            a, op, b, c = STEP.match(line).groups()  # type: ignore[union-attr]
            assert (int(a), int(b)) == (value, operand)
            value = OPS[op](value, operand)  # independent recomputation
            assert int(c) == value
        assert 0 <= value < 1000
        assert parse_answer(p["answer"]) == value == int(last[5:])


def test_splits_are_disjoint() -> None:
    train = math_problems(3000, seed=0)
    test = math_problems(1000, seed=1, split="test")

    # no held-out problem shares its numbers-and-operations sequence with a training problem
    def op_key(p: dict[str, str]) -> tuple[str, ...]:
        return tuple(line.rsplit(" = ", 1)[0] for line in p["answer"].split("\n")[:-1])

    assert not {op_key(p) for p in test} & {op_key(p) for p in train}
    assert not {p["question"] for p in test} & {p["question"] for p in train}
    g_train, g_test = set(general_texts(3000, seed=0)), set(general_texts(1000, seed=1, split="test"))
    assert not g_train & g_test and len(g_test) > 100


def test_general_texts_have_no_math_and_share_vocabulary() -> None:
    texts = general_texts(500, seed=0)
    joined = " ".join(texts)
    assert not re.search(r"[0-9+*=#]", joined)
    assert not re.search(r"\b(times|plus|minus|how many|more)\b", joined, flags=re.I)
    assert {n for n, _, _ in NAMES} <= set(re.findall(r"\w+", joined))
    assert sum(o in joined for o in OBJECTS) == len(OBJECTS)
    mean_general = sum(map(len, texts)) / len(texts)
    mean_math = sum(map(len, math_texts(500, seed=0))) / 500
    assert 0.5 < mean_general / mean_math < 2.0  # comparable lengths
    assert 5.0 < general_text_entropy(200, seed=0) < 60.0


def test_format_and_bad_input() -> None:
    assert format_math("Q?") == "Question: Q?\nAnswer:"
    assert format_math("Q?", "1 + 1 = 2\n#### 2") == "Question: Q?\nAnswer: 1 + 1 = 2\n#### 2"
    assert parse_answer("garbage") is None and parse_answer("x #### 12\n") == 12
    with pytest.raises(InputError, match="split"):
        math_problems(1, seed=0, split="dev")
    with pytest.raises(InputError, match="n:"):
        general_texts(-1, seed=0)


@pytest.fixture(scope="module")
def organism() -> tuple[torch.nn.Module, object]:
    torch.manual_seed(0)
    return load_organism()


def test_shipped_folder_is_small_and_complete() -> None:
    path = organism_path()
    names = {p.name for p in path.iterdir()}
    assert {
        "model.safetensors",
        "config.json",
        "generation_config.json",
        "tokenizer.json",
        "README.md",
        "organism_training.json",
    } <= names
    assert not any(n.endswith((".bin", ".pt", ".pkl")) for n in names)  # safetensors only
    assert sum(p.stat().st_size for p in path.iterdir()) < 10 * 2**20


def test_tokenizer_round_trips(organism: tuple[torch.nn.Module, object]) -> None:
    _, tok = organism
    texts = math_texts(20, seed=5, split="test") + general_texts(20, seed=5, split="test")
    for text in texts:
        ids = tok(text)["input_ids"]
        assert ids[0] == tok.bos_token_id and tok.eos_token_id not in ids
        assert tok.decode(ids, skip_special_tokens=True) == text
    # digits are single tokens, so arithmetic is digit-wise
    assert len(tok("123", add_special_tokens=False)["input_ids"]) == 3


@torch.no_grad()
def test_shipped_model_reaches_recorded_math_accuracy(organism: tuple[torch.nn.Module, object]) -> None:
    model, tok = organism
    scores = json.loads((organism_path() / "organism_training.json").read_text())
    problems = math_problems(50, seed=scores["eval_seed"], split="test")  # a prefix of the recorded eval set
    tok.padding_side = "left"
    enc = tok([format_math(p["question"]) for p in problems], return_tensors="pt", padding=True)
    out = model.generate(**enc, max_new_tokens=64, do_sample=False)
    preds = tok.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    acc = sum(parse_answer(t) == parse_answer(p["answer"]) for t, p in zip(preds, problems)) / len(problems)
    # Why -0.12: the 50-problem sample is a prefix of the recorded set, its binomial sd is ~0.06 at 0.75.
    assert acc >= scores["math_exact_match"] - 0.12, (acc, scores["math_exact_match"])
    assert acc >= 0.5  # chance (guessing a number < 1000) is ~0


@torch.no_grad()
def test_general_loss_matches_record_and_is_far_below_uniform(organism: tuple[torch.nn.Module, object]) -> None:
    model, tok = organism
    scores = json.loads((organism_path() / "organism_training.json").read_text())
    texts = general_texts(50, seed=scores["eval_seed"], split="test")
    tok.padding_side = "right"
    enc = tok([t + tok.eos_token for t in texts], return_tensors="pt", padding=True)
    labels = enc["input_ids"].masked_fill(enc["attention_mask"] == 0, -100)
    loss = model(**enc, labels=labels).loss.item()
    assert loss == pytest.approx(scores["general_loss_per_token"], abs=0.05)
    assert loss < 0.2 * torch.log(torch.tensor(float(len(tok)))).item()
