"""Choose a model's arithmetic prompt format on problems no sweep or calibration uses, before the search.

    python scripts/prompt_format.py --gguf PATH/gemma-3-270m-q4_k_m.gguf [--n 600]            # a pretrained base
    python scripts/prompt_format.py --gguf PATH/SmolLM2-135M-Instruct.Q4_1.gguf --chat         # an instruct model

Problems: positions 10,000 .. 10,000 + n of the built-in arithmetic task's seed-0 permutation (a sweep of seed 0
uses the first n_shot + selection + confirmation + format shots <= 3,010 of them, the arithmetic calibration file
the last 200), the worked examples the 4 problems before them. Prints, per format, the accuracy with its 95%
Wilson interval, the base's answer rate (completions that are a well-formed answer, not a restart of the problem
and not without a number: :func:`~mathneuro_edit.evaluation.prompts.answer_form`) and the accuracy among its
answers; then the paired exact McNemar test of the two most accurate formats on the same problems.

The rule (docs/evaluation.md "Prompt formats"): the recipe's prompt is the most accurate format among those where
the base answers at least 95% of the problems (a format where it does not answer measures the answer format as
much as arithmetic); the others are the sweep's second formats (``sweep.confirmation_formats``).
Why n = 600 by default: two formats of the same model differ on 10-20% of problems; a 3-point difference in
accuracy is then 18 of 600 net discordant pairs of about 60-120, which the paired test shows at p < 0.05.
"""

from __future__ import annotations

import argparse
import time

import torch

from mathneuro_edit.data.arithmetic import POOL_SIZE, arithmetic_problems
from mathneuro_edit.evaluation.greedy import math_outcomes
from mathneuro_edit.evaluation.prompts import answer_form
from mathneuro_edit.evaluation.significance import discordant_pairs, mcnemar_exact, wilson_interval
from mathneuro_edit.weights.loading import load_model

START = 10_000
# (name, chat template, prompt style, worked examples)
BASE_FORMATS = [
    ("equations, 4-shot", False, "equations", 4),
    ("question-answer, 3-shot", False, "question-answer", 3),
    ("question-answer, 0-shot", False, "question-answer", 0),
]
CHAT_FORMATS = [
    ("chat, 0-shot", True, "question-answer", 0),
    ("chat, 4 worked turns", True, "question-answer", 4),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--n", type=int, default=600)
    ap.add_argument("--chat", action="store_true", help="an instruct model: compare chat-template formats")
    a = ap.parse_args()
    pool = arithmetic_problems(POOL_SIZE, seed=0)
    shots, problems = pool[START - 4 : START], pool[START : START + a.n]
    model, tok = load_model(a.gguf, dtype="float32")
    print("| format | correct | accuracy (95% CI) | answer rate | accuracy among answers |\n|---|---|---|---|---|")
    outcomes = []
    for name, chat, style, k in CHAT_FORMATS if a.chat else BASE_FORMATS:
        t = time.process_time()
        with torch.no_grad():
            correct, completions = math_outcomes(
                model,
                tok,
                problems,
                shots=shots[4 - k :],
                chat_template=chat,
                prompt_style=style,
                max_new_tokens=8,
            )
        forms = [answer_form(c, p.get("prefill")) for c, p in zip(completions, problems)]
        answered = sum(f == "answer" for f in forms)
        right_answered = sum(c for c, f in zip(correct, forms) if f == "answer")
        lo, hi = wilson_interval(sum(correct), len(correct))
        outcomes.append((name, correct))
        print(
            f"| {name} | {sum(correct)}/{len(correct)} | {100 * sum(correct) / len(correct):.1f}% "
            f"({100 * lo:.1f}-{100 * hi:.1f}) | {100 * answered / len(forms):.1f}% "
            f"({sum(f == 'restart' for f in forms)} restarts, {sum(f == 'none' for f in forms)} no number) | "
            f"{100 * right_answered / max(answered, 1):.1f}% ({right_answered}/{answered}) |"
            f"  <!-- {time.process_time() - t:.0f} CPU-s -->",
            flush=True,
        )
    (n1, c1), (n2, c2) = sorted(outcomes, key=lambda o: -sum(o[1]))[:2]
    b, c = discordant_pairs(c2, c1)
    print(f"\n{n1} vs {n2}: {c} right only with {n1}, {b} only with {n2}, exact McNemar p = {mcnemar_exact(b, c):.2g}")


if __name__ == "__main__":
    main()
