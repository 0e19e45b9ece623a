"""The built-in arithmetic task (``path: arithmetic``): single-operation problems generated from a seed.

Three kinds of problem, one third each: two-digit addition (``a + b``, ``10 <= a, b <= 99``), two-digit
subtraction (``a - b`` with ``a >= b``, so answers are never negative) and one-digit multiplication
(``a * b``, ``1 <= a, b <= 9``). Every item is ``{"question": "What is 23 + 45?", "answer": "23 + 45 = 68\\n####
68", "prefill": "23 + 45 = "}``: the GSM8K answer format, plus the text that starts the model's answer (with a
chat template the model then only has to write the number; see docs/evaluation.md).

Determinism: ``random.Random(seed)`` picks the kind of each item (uniformly among kinds not yet used up), and
each kind's operand pairs are drawn without replacement by the same lazy Fisher-Yates shuffle as the data
sampler (``randrange`` only, whose output is fixed across Python versions), so a seed gives the same items on
every machine and no item repeats. The pool holds 8,100 + 4,095 + 81 = 12,276 problems; multiplication runs out
first (after 81 items), later items are additions and subtractions.

Example:
    >>> arithmetic_problems(2, seed=0)[0]["question"].startswith("What is ")
    True
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator

from ..errors import InputError

__all__ = ["arithmetic_problems", "shuffled", "POOL_SIZE"]

_TWO_DIGIT = range(10, 100)
_ONE_DIGIT = range(1, 10)
# (symbol, operand pairs in a fixed order, result)
_KINDS: list[tuple[str, list[tuple[int, int]], Callable[[int, int], int]]] = [
    ("+", [(a, b) for a in _TWO_DIGIT for b in _TWO_DIGIT], lambda a, b: a + b),
    ("-", [(a, b) for a in _TWO_DIGIT for b in _TWO_DIGIT if a >= b], lambda a, b: a - b),
    ("*", [(a, b) for a in _ONE_DIGIT for b in _ONE_DIGIT], lambda a, b: a * b),
]
POOL_SIZE = sum(len(pairs) for _, pairs, _ in _KINDS)


def shuffled(rng: random.Random, n_items: int) -> Iterator[int]:
    """Indices ``0..n_items-1`` in the order of a Fisher-Yates shuffle driven by ``rng.randrange``, drawn lazily
    (O(drawn) memory); also the data sampler's (:mod:`mathneuro_edit.data.sources`)."""
    moved: dict[int, int] = {}  # position -> index now there, for positions touched by a swap
    for i in range(n_items):
        j = rng.randrange(i, n_items)
        yield moved.get(j, j)
        moved[j] = moved.get(i, i)


def arithmetic_problems(n: int, seed: int) -> list[dict[str, str]]:
    """``n`` distinct arithmetic problems (``1 <= n <= POOL_SIZE``), the same for the same seed.

    Example:
        >>> p = arithmetic_problems(1, seed=3)[0]
        >>> p["answer"].endswith("#### " + p["answer"].split("= ")[1].split("\\n")[0]), p["prefill"] in p["answer"]
        (True, True)
    """
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= POOL_SIZE:
        raise InputError(f"arithmetic: {n!r} problems requested; the task has 1 to {POOL_SIZE} distinct problems")
    rng = random.Random(seed)
    streams = [shuffled(rng, len(pairs)) for _, pairs, _ in _KINDS]
    left = [len(pairs) for _, pairs, _ in _KINDS]
    out = []
    for _ in range(n):
        open_kinds = [k for k in range(len(_KINDS)) if left[k]]
        k = open_kinds[rng.randrange(len(open_kinds))]
        left[k] -= 1
        symbol, pairs, result = _KINDS[k]
        a, b = pairs[next(streams[k])]
        prefill, c = f"{a} {symbol} {b} = ", result(a, b)
        out.append({"question": f"What is {a} {symbol} {b}?", "answer": f"{prefill}{c}\n#### {c}", "prefill": prefill})
    return out
