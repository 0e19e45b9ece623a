"""Seeded synthetic data for the model organism: two separable skills, math and general text.

- :func:`math_problems`: GSM8K-shaped word problems (``{"question", "answer"}``), 1-3 operations of add /
  subtract / multiply-by-a-small-number on small integers, with one worked step per line (``"5 + 7 = 12"``) and
  the GSM8K final line ``"#### <integer>"``.
- :func:`general_texts`: non-math English (stories, descriptions, dialogues) built from the same names and
  objects but with no digits, number words or arithmetic.
- :func:`format_math`: THE prompt format shared by training and evaluation.

Every generator takes its own ``random.Random(seed)`` (no global state), so the same seed gives the same data.
The ``"train"`` and ``"test"`` splits are disjoint by construction: each sample has a *key* (the numbers and
operations of a math problem; the full text of a general text) and a sha256 hash of the key puts it in exactly
one split (~10% of the space is held out). Held-out math problems therefore never share their number/operation
sequence with a training problem, only the vocabulary and single arithmetic facts.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Sequence
from typing import TypeVar

from ..errors import InputError

__all__ = [
    "SPLITS",
    "format_math",
    "math_problems",
    "math_texts",
    "general_texts",
    "general_text_entropy",
    "mixed_texts",
    "parse_answer",
]

T = TypeVar("T")

SPLITS = ("train", "test")
# Why 10: a tenth of the problem space is enough held-out problems (tens of thousands) while training keeps 90%.
_TEST_BUCKETS = 10
# Why these limits: one-digit addends/subtrahends and small factors keep every arithmetic fact learnable by a
# ~1M-parameter model in minutes of CPU training (a first try with operands up to 30 reached only 20%); answers
# stay < 1000.
_START = (2, 20)
_ADD = (1, 9)
_MUL = (2, 4)
_MAX_VALUE = 999

# Boys and girls alternate in NAMES: (name, subject pronoun, possessive).
_BOYS = ("Tom", "Sam", "Ben", "Leo", "Jack", "Noah")
_GIRLS = ("Mia", "Lily", "Emma", "Anna", "Sara", "Zoe")
NAMES = [person for boy, girl in zip(_BOYS, _GIRLS) for person in ((boy, "he", "his"), (girl, "she", "her"))]
OBJECTS = (
    "apples books cookies marbles pencils stickers shells cards flowers coins eggs toys stamps candies balloons cupcakes"
).split()
PLACES = ["park", "market", "school", "garden", "library", "kitchen", "beach", "forest", "farm", "shop"]
ADJECTIVES = ["red", "small", "old", "shiny", "green", "soft", "big", "bright", "quiet", "warm"]


def _check_args(n: int, seed: int, split: str) -> None:
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise InputError(f"n: must be a non-negative int, got {n!r}; pass e.g. n=100")
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise InputError(f"seed: must be an int, got {seed!r}; pass e.g. seed=0")
    if split not in SPLITS:
        raise InputError(f"split: must be one of {SPLITS}, got {split!r}; pass split='train' or split='test'")


def _split_of(key: str) -> str:
    """The split a sample key belongs to (stable across runs and platforms: sha256, not ``hash``)."""
    bucket = int(hashlib.sha256(key.encode("utf-8")).hexdigest()[:8], 16) % _TEST_BUCKETS
    return "test" if bucket == 0 else "train"


class _Picker:
    """``random.Random`` wrapper that also sums the log-probability (nats) of the choices it makes.

    The sum over one text is the generator's surprisal of the path that made it; its mean over texts upper-bounds
    the data's entropy per text, the floor for a model's loss. The bound is loose: some draws are made but not
    used by the chosen template (e.g. a second place), so different paths give the same text.
    """

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.nats = 0.0

    def choice(self, seq: Sequence[T]) -> T:
        self.nats += math.log(len(seq))
        return self.rng.choice(seq)

    def randint(self, lo: int, hi: int) -> int:
        self.nats += math.log(hi - lo + 1)
        return self.rng.randint(lo, hi)


def format_math(question: str, answer: str | None = None) -> str:
    """The prompt format shared by training and evaluation: ``"Question: {question}\\nAnswer:"``, the prompt the
    model completes, or ``"Question: {question}\\nAnswer: {answer}"`` with a worked answer.

    Example:
        >>> format_math("Tom has 2 apples. How many apples does Tom have now?")
        'Question: Tom has 2 apples. How many apples does Tom have now?\\nAnswer:'
    """
    prompt = f"Question: {question}\nAnswer:"
    return prompt if answer is None else f"{prompt} {answer}"


def parse_answer(text: str) -> int | None:
    """The integer after the first ``"#### "`` in ``text`` (a gold answer or a model's generation; GSM8K
    convention), or ``None`` if there is none.

    Example:
        >>> parse_answer("2 + 3 = 5\\n#### 5")
        5
    """
    head, sep, tail = text.partition("#### ")
    if not sep:
        return None
    digits = ""
    for ch in tail.lstrip():
        if ch.isdigit() or (ch == "-" and not digits):
            digits += ch
        else:
            break
    try:
        return int(digits)
    except ValueError:
        return None


# the sentence of each operation: ``str.format`` templates over the problem's words and the operand ``num``
_STEP_TEXTS = {
    "+": ("{He} buys {num} more.", "{friend} gives {him} {num} more.", "{He} finds {num} more."),
    "-": ("{He} gives {num} to {friend}.", "{He} loses {num}.", "{He} sells {num} of them."),
    "*": ("Then {he} has {num} times as many.", "{His} {obj} multiply by {num}."),
}


def _math_problem(pick: _Picker) -> tuple[str, dict[str, str]]:
    """One problem from the problem space: returns (split key, GSM8K dict)."""
    name, he, his = pick.choice(NAMES)
    friend = pick.choice([f for f in NAMES if f[0] != name])[0]
    obj = pick.choice(OBJECTS)
    value = pick.randint(*_START)
    words = {"He": he.capitalize(), "he": he, "him": _him(he), "His": his.capitalize(), "friend": friend, "obj": obj}
    sentences = [
        pick.choice(
            [f"{name} has {value} {obj}.", f"{name} starts with {value} {obj}.", f"{name} collects {value} {obj}."]
        )
    ]
    steps: list[str] = []
    key = [str(value)]
    n_ops = pick.randint(1, 3)
    used_mul = False
    for _ in range(n_ops):
        ops = ["+", "-"] if used_mul or value * _MUL[0] > _MAX_VALUE else ["+", "-", "*"]
        op = pick.choice(ops) if value > 1 else pick.choice(["+", "*"] if not used_mul else ["+"])
        if op == "+":
            num = pick.randint(*_ADD)
            new = value + num
        elif op == "-":
            # Why <= _ADD[1]: subtrahends as small as addends keep borrows learnable (no 3-digit minus 3-digit).
            num = pick.randint(1, min(value - 1, _ADD[1]))
            new = value - num
        else:
            num = pick.randint(_MUL[0], min(_MUL[1], _MAX_VALUE // value))
            new, used_mul = value * num, True
        sentences.append(pick.choice(_STEP_TEXTS[op]).format(**words, num=num))
        steps.append(f"{value} {op} {num} = {new}")
        key.append(f"{op}{num}")
        value = new
    sentences.append(
        pick.choice([f"How many {obj} does {name} have now?", f"How many {obj} does {he} have in the end?"])
    )
    answer = "\n".join(steps + [f"#### {value}"])
    return " ".join(key), {"question": " ".join(sentences), "answer": answer}


def _him(he: str) -> str:
    return "him" if he == "he" else "her"


def math_problems(n: int, *, seed: int, split: str = "train") -> list[dict[str, str]]:
    """``n`` GSM8K-style word problems ``{"question": str, "answer": str}`` with worked answers ending in
    ``"#### <integer>"``; the same ``seed`` gives the same problems, and the ``"train"`` and ``"test"`` splits never
    share a problem's numbers-and-operations sequence.

    Example:
        >>> p = math_problems(1, seed=0)[0]
        >>> p["answer"].splitlines()[-1].startswith("#### ")
        True
    """
    _check_args(n, seed, split)
    pick = _Picker(random.Random(f"math/{seed}"))
    out: list[dict[str, str]] = []
    while len(out) < n:
        key, problem = _math_problem(pick)
        if _split_of("math:" + key) == split:
            out.append(problem)
    return out


def math_texts(n: int, *, seed: int, split: str = "train") -> list[str]:
    """``n`` full training texts ``format_math(question, answer)`` of :func:`math_problems` (no EOS; the trainer
    appends it).

    Example:
        >>> math_texts(1, seed=0)[0].startswith("Question: ")
        True
    """
    return [format_math(p["question"], p["answer"]) for p in math_problems(n, seed=seed, split=split)]


# Each general-text kind, one paragraph per sentence, one ``str.format`` template over the text's words per line.
# A ``+name POOL`` line is an extra draw, made (in order) just before the sentence's template is chosen.
_STORY = """
{a} walks to the {place} with {b}.
One morning {a} goes to the {place}.
{a} and {b} spend the day at the {place}.

{He} sees some {adj} {obj} near the gate.
There {he} finds a box of {adj} {obj}.
{b} shows {him} the {adj} {obj}.

+other_place PLACES
{b} smiles and says that the {obj} are lovely.
They talk about the weather and the {other_place}.
{a} puts the {obj} in {his} bag and sings a song.

Later they go home for dinner.
{a} is happy.
The sun sets behind the hills.
{b} waves goodbye.
"""
_DESCRIPTION = """
The {place} is {adj} in the morning.
The {place} near the river is very {adj}.
Everyone likes the {adj} {place}.

+other_adj ADJECTIVES
Its paths are lined with {obj} and tall trees.
People come here to look at the {obj}.
Birds sing above the {other_adj} {obj}.

{a} visits it when {he} wants to rest.
{a} often reads there after school.
{a} says it is the best place in town.
"""
_DIALOGUE = """
Where are the {obj}?
Do you like the {obj}?
Shall we go to the {place}?

+other_obj OBJECTS
+other_adj ADJECTIVES
They are in the {place}, next to the {other_obj}.
Yes, they are {other_adj} and nice.
Not today, it is raining.

Thank you!
Let us go then.
Oh, I see.
"""
_POOLS = {"PLACES": PLACES, "ADJECTIVES": ADJECTIVES, "OBJECTS": OBJECTS}


def _sentences(pick: _Picker, kind: str, words: dict[str, str]) -> list[str]:
    """One sentence per paragraph of ``kind``: its extra draws (added to ``words``), then a template filled in."""
    out = []
    for paragraph in kind.strip().split("\n\n"):
        lines = paragraph.splitlines()
        words.update((name, pick.choice(_POOLS[pool])) for name, pool in (x[1:].split() for x in lines if x[0] == "+"))
        out.append(pick.choice([x for x in lines if x[0] != "+"]).format(**words))
    return out


def _story(pick: _Picker) -> str:
    a, he, his = pick.choice(NAMES)
    b = pick.choice([f for f in NAMES if f[0] != a])
    obj, place, adj = pick.choice(OBJECTS), pick.choice(PLACES), pick.choice(ADJECTIVES)
    words = {"a": a, "b": b[0], "he": he, "He": he.capitalize(), "him": _him(he), "his": his, "obj": obj}
    return " ".join(_sentences(pick, _STORY, {**words, "place": place, "adj": adj}))


def _description(pick: _Picker) -> str:
    place, adj, obj = pick.choice(PLACES), pick.choice(ADJECTIVES), pick.choice(OBJECTS)
    a, he, _ = pick.choice(NAMES)
    return " ".join(_sentences(pick, _DESCRIPTION, {"a": a, "he": he, "obj": obj, "place": place, "adj": adj}))


def _dialogue(pick: _Picker) -> str:
    (a, _, _), obj, place = pick.choice(NAMES), pick.choice(OBJECTS), pick.choice(PLACES)
    b = pick.choice([f for f in NAMES if f[0] != a])[0]
    q, r, e = _sentences(pick, _DIALOGUE, {"obj": obj, "place": place})
    return f"{a}: {q}\n{b}: {r}\n{a}: {e}"


_GENERAL_KINDS = (_story, _description, _dialogue)


def _general_texts(n: int, seed: int, split: str) -> tuple[list[str], float]:
    _check_args(n, seed, split)
    pick = _Picker(random.Random(f"general/{seed}"))
    out: list[str] = []
    kept_nats = 0.0
    while len(out) < n:
        start = pick.nats
        text = pick.choice(_GENERAL_KINDS)(pick)
        if _split_of("general:" + text) == split:
            out.append(text)
            kept_nats += pick.nats - start
    return out, kept_nats / max(n, 1)


def general_texts(n: int, *, seed: int, split: str = "train") -> list[str]:
    """``n`` non-math English texts (stories, descriptions, dialogues) with no digits and no arithmetic; the same
    ``seed`` gives the same texts, and no text is in both splits.

    Example:
        >>> any(ch.isdigit() for ch in general_texts(5, seed=0)[0])
        False
    """
    return _general_texts(n, seed, split)[0]


def general_text_entropy(n: int, *, seed: int, split: str = "test") -> float:
    """Mean generator surprisal (nats per text) of ``general_texts(n, seed=seed, split=split)``.

    It upper-bounds the data's entropy per text, loosely: draws that the chosen template does not use are counted
    too (and the split filter, a <= 0.11-nat effect, is ignored). A model at the entropy floor can score a little
    below it: the shipped organism scores 18.73 nats per text against 18.81 on 500 held-out texts.

    Example:
        >>> general_text_entropy(10, seed=0) > 0
        True
    """
    return _general_texts(n, seed, split)[1]


def mixed_texts(n: int, *, seed: int, split: str = "train", math_fraction: float = 0.5) -> list[str]:
    """``n`` texts, a shuffled mix of :func:`math_texts` and :func:`general_texts` with ``math_fraction`` (in
    [0, 1]) of math; ``seed`` seeds both generators and the shuffle.

    Example:
        >>> len(mixed_texts(10, seed=0))
        10
    """
    if not 0.0 <= math_fraction <= 1.0:
        raise InputError(f"math_fraction: must be in [0, 1], got {math_fraction!r}; pass e.g. 0.5")
    n_math = round(n * math_fraction)
    texts = math_texts(n_math, seed=seed, split=split) + general_texts(n - n_math, seed=seed, split=split)
    random.Random(f"mix/{seed}").shuffle(texts)
    return texts
