"""One small lm-eval run on SmolLM2-135M-Instruct (GGUF, dequantized by transformers) with its chat template.

Runs the shipped local task ``arithmetic_local`` (recipes/lm_eval_tasks) through mathneuro-edit's lm-eval bridge
(the in-memory model, as in a recipe) and prints n, exact match per filter and its Wilson 95% interval.

Example:
    python scripts/lm_eval_smollm2.py --gguf /path/SmolLM2-135M-Instruct.Q4_1.gguf --limit 50 --num-fewshot 3
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from mathneuro_edit.evaluation.significance import wilson_interval

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gguf", required=True, help="the .gguf file (its folder is passed to from_pretrained)")
    ap.add_argument("--task", default="arithmetic_local")
    ap.add_argument("--limit", type=int, default=50)
    ap.add_argument("--num-fewshot", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mathneuro_edit.evaluation.lm_eval_bridge import run_lm_eval
    from mathneuro_edit.evaluation.lm_eval_task import LmEvalTask

    gguf = Path(args.gguf)
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32).eval()
    task = LmEvalTask(
        "lm_eval",
        [args.task],
        limit=args.limit,
        include_path=str(ROOT / "recipes" / "lm_eval_tasks"),
        num_fewshot=args.num_fewshot,
        apply_chat_template=True,
        batch_size=args.batch_size,
    )
    t0 = time.time()
    result, _ = run_lm_eval(model, tok, task)
    n = int(result.values[f"{args.task}/n"])
    out = {
        "task": args.task,
        "n": n,
        "num_fewshot": args.num_fewshot,
        "apply_chat_template": True,
        "fewshot_as_multiturn": task.multiturn,
        "seconds": round(time.time() - t0, 1),
    }
    for flt in ("strict-match", "flexible-extract"):
        acc = result.values[f"{args.task}/exact_match,{flt}"]
        k = round(acc * n)
        lo, hi = wilson_interval(k, n)
        out[flt] = {"correct": k, "accuracy": acc, "wilson95": [round(lo, 4), round(hi, 4)]}
    samples = [s for s in result.samples[args.task] if s["filter"] == "strict-match"][:2]
    out["examples"] = [
        {"prompt_tail": s["arguments"][0][0][-160:], "response": s["resps"][0][0][:200]} for s in samples
    ]
    print(json.dumps(out, indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()
