"""Measure the base SmolLM2-135M-Instruct (GGUF) with the chat-template evaluation: arithmetic and GSM8K.

Usage:

    python scripts/eval_smollm2.py --gguf PATH/SmolLM2-135M-Instruct.Q4_1.gguf --arithmetic 300 --gsm8k 50 \
        --out smollm2-eval.json

Loads the GGUF straight through transformers (dequantized), evaluates greedy completions with
mathneuro_edit.evaluation.runner (chat template; prefill for arithmetic; the plain prompt for contrast) and prints every
accuracy with n and its 95% Wilson interval. The GSM8K problems are recipes/data/gsm8k_test_300.jsonl, sampled
with the evaluation's own sampler (seed 0).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from mathneuro_edit.data.arithmetic import arithmetic_problems
from mathneuro_edit.data.sources import load_math_problems
from mathneuro_edit.evaluation.report import format_accuracy
from mathneuro_edit.evaluation.runner import evaluate
from mathneuro_edit.evaluation.tasks import MathTask

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gguf", type=Path, required=True)
    ap.add_argument("--arithmetic", type=int, default=300, help="arithmetic problems (0: skip)")
    ap.add_argument("--gsm8k", type=int, default=50, help="GSM8K test problems (0: skip)")
    ap.add_argument("--gsm8k-tokens", type=int, default=256)
    ap.add_argument("--plain", action="store_true", help="also the plain Question:/Answer: prompt on arithmetic")
    ap.add_argument(
        "--no-prefill",
        type=int,
        default=0,
        metavar="N",
        help="also N arithmetic problems without the prefill (chat and plain; 48 new tokens)",
    )
    # why 1: on a shared or small CPU, 2+ OpenMP threads can spin-wait and run several times slower
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, help="write every task's rows (eval.json format)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    t0 = time.time()
    tok = AutoTokenizer.from_pretrained(args.gguf.parent, gguf_file=args.gguf.name)
    model = AutoModelForCausalLM.from_pretrained(args.gguf.parent, gguf_file=args.gguf.name).eval()
    print(f"loaded in {time.time() - t0:.0f} s", flush=True)
    keys = ("question", "answer", "prefill")
    tasks = []
    if args.arithmetic:
        items = [{k: p[k] for k in keys} for p in arithmetic_problems(args.arithmetic, seed=0)]
        tasks.append(MathTask("arithmetic (chat, prefill)", items, max_new_tokens=8))
        if args.plain:
            tasks.append(MathTask("arithmetic (plain prompt)", items, max_new_tokens=8, chat_template=False))
    if args.no_prefill:
        bare = [{k: p[k] for k in ("question", "answer")} for p in arithmetic_problems(args.no_prefill, seed=0)]
        tasks.append(MathTask("arithmetic (chat, no prefill)", bare, max_new_tokens=48))
        tasks.append(MathTask("arithmetic (plain prompt, no prefill)", bare, max_new_tokens=48, chat_template=False))
    if args.gsm8k:
        gsm = load_math_problems(str(ROOT / "recipes/data/gsm8k_test_300.jsonl"), args.gsm8k, seed=0)
        tasks.append(
            MathTask(
                "gsm8k (chat, 0-shot)",
                [{k: p[k] for k in keys if k in p} for p in gsm],
                max_new_tokens=args.gsm8k_tokens,
            )
        )
    out = {}
    for task in tasks:
        t = time.time()
        res = evaluate(model, tok, [task], batch_size=32 if "arith" in task.name else 16, progress=False)
        row = res.to_dict(predictions=True)[task.name]
        out[task.name] = row
        print(f"{task.name}: {format_accuracy(row['base'])}  [{time.time() - t:.0f} s]", flush=True)
    if args.out:
        args.out.write_text(json.dumps(out, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
