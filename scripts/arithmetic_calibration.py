"""Write recipes/data/arithmetic_calib_200.jsonl: calibration texts in the arithmetic evaluation's own format.

The built-in arithmetic task (``evaluation.math: arithmetic``) draws problems from a seeded permutation of its
12,276-problem pool. A calibration set must never be an evaluation set, so this file takes the LAST 200 problems
of the seed-0 permutation: a sweep of seed 0 uses the first ``n_shot + selection + confirmation`` (<= 12,076 of
them), so the two never meet (tests/data/test_arithmetic_calibration.py checks it).

Each record keeps the task's fields plus ``solution`` (``"23 + 45 = 68"``, the line an answer ends with), so a
recipe's ``data.math.template`` can render it in a model's own evaluation format (a chat turn, or a plain
few-shot line); see the boost recipes.

Usage: python scripts/arithmetic_calibration.py [--out recipes/data/arithmetic_calib_200.jsonl]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from mathneuro_edit.data.arithmetic import POOL_SIZE, arithmetic_problems

N = 200


def records(n: int = N) -> list[dict[str, str]]:
    """The last ``n`` problems of the seed-0 permutation, each with its ``solution`` line."""
    tail = arithmetic_problems(POOL_SIZE, seed=0)[-n:]
    return [{**p, "solution": p["answer"].split("\n")[0]} for p in tail]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="recipes/data/arithmetic_calib_200.jsonl")
    out = Path(ap.parse_args().out)
    out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records()), encoding="utf-8")
    print(f"wrote {out} ({N} problems, the last of the seed-0 permutation of {POOL_SIZE})")


if __name__ == "__main__":
    main()
