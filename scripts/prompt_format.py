"""Choose a base model's arithmetic prompt format on problems no sweep or calibration uses.

    python scripts/prompt_format.py --gguf PATH/gemma-3-270m-q4_k_m.gguf [--n 200]

Problems: positions 10,000 .. 10,000 + n of the built-in arithmetic task's seed-0 permutation (a sweep of seed 0
uses the first n_shot + selection + confirmation <= 3,004 of them, the arithmetic calibration file the last 200),
the worked examples the 4 problems before them. Prints, per format, the accuracy with its 95% Wilson interval;
docs/evaluation.md "Prompt formats" records the result and the recipe uses the best format.
"""

from __future__ import annotations

import argparse
import time

import torch

from mathneuro_edit.data.arithmetic import POOL_SIZE, arithmetic_problems
from mathneuro_edit.evaluation.greedy import math_outcomes
from mathneuro_edit.evaluation.significance import wilson_interval
from mathneuro_edit.weights.loading import load_model

START = 10_000
FORMATS = [
    ("equations, 4-shot", "equations", 4),
    ("question-answer, 3-shot", "question-answer", 3),
    ("question-answer, 0-shot", "question-answer", 0),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--n", type=int, default=200)
    a = ap.parse_args()
    pool = arithmetic_problems(POOL_SIZE, seed=0)
    shots, problems = pool[START - 4 : START], pool[START : START + a.n]
    model, tok = load_model(a.gguf, dtype="float32")
    print("| format | correct | accuracy (95% CI) |\n|---|---|---|")
    for name, style, k in FORMATS:
        t = time.process_time()
        with torch.no_grad():
            correct, _ = math_outcomes(
                model, tok, problems, shots=shots[4 - k :], chat_template=False, prompt_style=style, max_new_tokens=8
            )
        lo, hi = wilson_interval(sum(correct), len(correct))
        print(
            f"| {name} | {sum(correct)}/{len(correct)} | {100 * sum(correct) / len(correct):.1f}% "
            f"({100 * lo:.1f}-{100 * hi:.1f}) |  <!-- {time.process_time() - t:.0f} CPU-s -->",
            flush=True,
        )


if __name__ == "__main__":
    main()
