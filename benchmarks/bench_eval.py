"""Evaluation throughput (issue 21, part 6): ``math_accuracy`` vs a bare batched greedy ``generate``, and the share of
the general-text loss/KL pass in one sweep point. Everything in one process, one run, as ratios of CPU time.

Routes, on the same model and the same prompts (the built-in arithmetic task, seed 0, rendered exactly as the
evaluation renders them: chat template when the tokenizer has one, the prefill after it):

- ``generate``: the floor: the prompts sorted longest first, batches of ``--batch``, left padded,
  ``model.generate(do_sample=False, max_new_tokens=N)``, no stopping criterion, nothing decoded;
- ``math_accuracy``: :func:`mathneuro_edit.evaluation.runner.math_accuracy` (the same batches plus its early stop,
  decoding and answer reading);
- a sweep point (``evaluate`` with a ``ReversibleEdit`` and the base results cached, as ``sweep`` runs it): the
  edited math pass and the general pass (loss and KL of every text) timed apart, the general pass twice: reusing
  the base's kept log-probabilities (``keep_base_logprobs``, what ``sweep`` does: only the edited forward runs) and
  recomputing the base forward (before issue 21); the edit is a random 1% of every targeted matrix scaled by 1.1
  (its content does not change the cost).

The two generation routes alternate for ``--rounds`` rounds (after one warm-up batch); the ratio is the sum of the
CPU times. Torch uses ``--threads`` threads.

Usage:
    python benchmarks/bench_eval.py [--gguf PATH.gguf] [--n 96] [--general 40] [--max-new-tokens 8] [--batch 16]
        [--rounds 1] [--threads 1] [--json OUT.json]

Without ``--gguf`` (or ``MATHNEURO_EDIT_SMOLLM2_GGUF``) the shipped organism is used (seconds; its numbers say little
about a real vocabulary).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from datetime import datetime, timezone
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gguf", default=os.environ.get("MATHNEURO_EDIT_SMOLLM2_GGUF"))
    ap.add_argument("--n", type=int, default=96, help="arithmetic problems")
    ap.add_argument("--general", type=int, default=40, help="general texts of the sweep point")
    ap.add_argument("--general-file", default="recipes/data/wikitext2_valid_eval.txt")
    ap.add_argument("--max-length", type=int, default=128, help="tokens per general text")
    ap.add_argument("--max-new-tokens", type=int, default=8)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    import torch
    from transformers import StoppingCriteriaList  # noqa: F401 - imported by the runner too (same import cost)

    torch.set_num_threads(args.threads)
    from mathneuro_edit.data.sources import load_math_problems, load_texts
    from mathneuro_edit.engine.apply import ReversibleEdit
    from mathneuro_edit.engine.mask import Mask
    from mathneuro_edit.engine.targets import find_targets
    from mathneuro_edit.evaluation.prompts import encode_prompts
    from mathneuro_edit.evaluation.runner import evaluate, math_accuracy
    from mathneuro_edit.evaluation.runtime import pad_rows, special_ids
    from mathneuro_edit.evaluation.tasks import GeneralTask, MathTask
    from mathneuro_edit.recipe.io import quickstart_recipe
    from mathneuro_edit.runs.steps import load_recipe_model

    sets = ["base.dtype=float32", "base.device=cpu"]
    if args.gguf:
        sets.append(f"base.model={args.gguf}")
    recipe = quickstart_recipe(sets)
    model, tok = load_recipe_model(recipe)
    model.eval()
    problems = [
        {k: p[k] for k in ("question", "answer", "prefill") if k in p}
        for p in load_math_problems("arithmetic", args.n, 0)
    ]

    def bare_generate() -> float:
        pad_id, eos_ids = special_ids(model, tok)
        encoded = encode_prompts(tok, problems, [], "auto")
        order = sorted(range(len(encoded)), key=lambda i: -len(encoded[i]))
        t0 = time.process_time()
        with torch.no_grad():
            for s in range(0, len(order), args.batch):
                ids, attn = pad_rows(
                    [encoded[i] for i in order[s : s + args.batch]], pad_id, "left", torch.device("cpu")
                )
                model.generate(
                    input_ids=ids,
                    attention_mask=attn,
                    do_sample=False,
                    max_new_tokens=args.max_new_tokens,
                    pad_token_id=pad_id,
                    eos_token_id=eos_ids or None,
                )
        return time.process_time() - t0

    def ours() -> tuple[float, int]:
        t0 = time.process_time()
        res = math_accuracy(
            model, tok, problems, max_new_tokens=args.max_new_tokens, batch_size=args.batch, progress=False
        )
        return time.process_time() - t0, res.correct

    with torch.no_grad():  # warm-up: one batch through both paths
        math_accuracy(
            model,
            tok,
            problems[: args.batch],
            max_new_tokens=args.max_new_tokens,
            batch_size=args.batch,
            progress=False,
        )
    t_gen = t_ours = 0.0
    correct = 0
    for _ in range(args.rounds):
        t_gen += bare_generate()
        t, correct = ours()
        t_ours += t

    # one sweep point: the edited math pass and the general pass (base + edited forward, loss, KL)
    texts_file = Path(args.general_file)
    texts = load_texts(str(texts_file) if texts_file.is_file() else "organism:general", args.general, 0).texts
    g = torch.Generator().manual_seed(0)
    mask = Mask(
        {name: torch.rand(tuple(t.shape), generator=g) < 0.01 for name, t in find_targets(model).items()},
        {"method": "random", "top_k": 0.01},
    )
    math_task = MathTask("math", problems, max_new_tokens=args.max_new_tokens)
    gen_task = GeneralTask("general", texts, max_length=args.max_length)
    base = evaluate(
        model, tok, [math_task, gen_task], batch_size=args.batch, progress=False, keep_base_logprobs=True
    )  # what sweep does
    edit = ReversibleEdit(model, mask, 1.1)
    t0 = time.process_time()
    evaluate(model, tok, [math_task], edit=edit, base_results=base, batch_size=args.batch, progress=False)
    t_point_math = time.process_time() - t0
    t0 = time.process_time()
    evaluate(model, tok, [gen_task], edit=edit, base_results=base, batch_size=args.batch, progress=False)
    t_point_general = time.process_time() - t0  # the edited forward only: the base log-probabilities are reused
    plain = {k: v for k, v in base.base.items() if k != "general"}  # the same base without the kept log-probs
    t0 = time.process_time()
    evaluate(model, tok, [gen_task], edit=edit, base_results=plain, batch_size=args.batch, progress=False)
    t_point_general_recomputed = time.process_time() - t0  # base and edited forward (before issue 21)

    out = {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        "model": Path(args.gguf).name if args.gguf else "organism",
        "n": args.n,
        "max_new_tokens": args.max_new_tokens,
        "batch": args.batch,
        "rounds": args.rounds,
        "threads": args.threads,
        "correct": correct,
        "cpu_s_generate": round(t_gen, 2),
        "cpu_s_math_accuracy": round(t_ours, 2),
        "ratio_math_accuracy_to_generate": round(t_ours / t_gen, 3),
        "general_texts": len(texts),
        "general_max_length": args.max_length,
        "cpu_s_point_math": round(t_point_math, 2),
        "cpu_s_point_general": round(t_point_general, 2),
        "general_share_of_point": round(t_point_general / (t_point_math + t_point_general), 3),
        "cpu_s_point_general_base_recomputed": round(t_point_general_recomputed, 2),
        "general_share_of_point_base_recomputed": round(
            t_point_general_recomputed / (t_point_math + t_point_general_recomputed), 3
        ),
        "load_average": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        "python": platform.python_version(),
        "torch": torch.__version__,
    }
    print(json.dumps(out, indent=2))
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
