"""What the boost search costs, measured side by side in one run (docs/performance.md "The boost search").

    python benchmarks/bench_search.py --gguf PATH/SmolLM2-135M-Instruct.Q4_1.gguf [--recipe R] [--n 64]
        [--search docs/data/search-smollm2]

1. Generation engines (one torch thread each) on the same ``n`` arithmetic problems (the recipe's prompt format, problems apart from the
   sweep's): transformers' batched ``generate`` as a release's evaluation runs it (batch 64), and the sweep's
   shared-prefix greedy loop (batch 64). CPU seconds per problem in this process, and their ratio; the
   predictions must be identical (the script exits 1 otherwise).
2. Both cores: the shared-prefix engine with 1 thread, with 2 threads, and as 2 processes of 1 thread each on half
   the problems each (wall time for the same ``n`` problems): problems per wall second.
3. The full search (``--search``): its CPU time summed over every invocation (``runs.jsonl``, written by
   scripts/boost_search.py: a killed and resumed search adds its parts) and over its evaluated blocks (each cache
   entry records its CPU seconds), the problem-evaluations it made (from ``sweep.json``: base, every round,
   confirmation), and what the non-adaptive search of the same grid would make.

Prints a markdown table; nothing is timed inside a test.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent


def _problems(recipe, n):
    from mathneuro_edit.data.arithmetic import POOL_SIZE, arithmetic_problems

    pool = arithmetic_problems(POOL_SIZE, seed=0)
    ev = recipe.evaluation
    return pool[10_000 - ev.n_shot : 10_000], pool[10_000 : 10_000 + n]


def _engine_child(args) -> None:
    """Run the shared-prefix engine on problems [a, b) with the given threads; print CPU and wall seconds."""
    from mathneuro_edit.evaluation.greedy import math_outcomes
    from mathneuro_edit.recipe.io import load_recipe
    from mathneuro_edit.weights.loading import load_model

    torch.set_num_threads(args.threads)
    recipe = load_recipe(args.recipe, [f"base.model={args.gguf}"])
    shots, problems = _problems(recipe, args.n)
    model, tok = load_model(args.gguf, dtype="float32")
    ev = recipe.evaluation
    t, c = time.time(), time.process_time()
    math_outcomes(
        model,
        tok,
        problems[args.a : args.b],
        shots=shots,
        chat_template=ev.chat_template,
        prompt_style=ev.prompt_style,
        max_new_tokens=ev.max_new_tokens,
        batch_size=64,
    )
    print(json.dumps({"wall": time.time() - t, "cpu": time.process_time() - c}))


def _child(args, threads: int, a: int, b: int) -> subprocess.Popen:
    cmd = [
        sys.executable,
        __file__,
        "--child",
        "--gguf",
        args.gguf,
        "--recipe",
        args.recipe,
        "--n",
        str(args.n),
        "--threads",
        str(threads),
        "--a",
        str(a),
        "--b",
        str(b),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)


def _result(p: subprocess.Popen) -> dict:
    out, _ = p.communicate()
    return json.loads(out.strip().splitlines()[-1])


def search_cost(folder: Path) -> dict | None:
    runs = folder / "runs.jsonl"
    sweep = folder / "sweep.json"
    if not runs.is_file() or not sweep.is_file():
        return None
    cpu = sum(json.loads(line)["cpu_s"] for line in runs.read_text().splitlines() if line.strip())
    data = json.loads(sweep.read_text())
    rounds = data.get("rounds") or []
    evals = data["selection"]["n"]  # the base on every selection problem
    for r in rounds:
        evals += len(r["points"]) * (r["problems"][1] - r["problems"][0])
    conf = data.get("confirmation")
    if conf:
        evals += 2 * conf["n"]
    points = len(data["selection"]["points"])
    # the CPU seconds of every computed block, as the sweep recorded them (survives kills: a killed run's blocks
    # are in the cache with their cost); blocks from before the sweep recorded it are counted apart
    blocks = [json.loads(p.read_text())["result"] for p in sorted((folder / "cache").glob("*.json"))]
    block_cpu = sum(b.get("cpu_s", 0.0) for b in blocks)
    unrecorded = sum(1 for b in blocks if "cpu_s" not in b)
    naive = data["selection"]["n"] * (points + 1) + (2 * conf["n"] if conf else 0)
    return {
        "cpu_s": cpu,
        "evals": evals,
        "naive_evals": naive,
        "points": points,
        "block_cpu_s": block_cpu,
        "unrecorded_blocks": unrecorded,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--recipe", default="recipes/smollm2-arithmetic-boost.yaml")
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--search", default=None, help="a sweep folder written by scripts/boost_search.py")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--a", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--b", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _engine_child(args)
        return 0
    from mathneuro_edit.evaluation.greedy import math_outcomes
    from mathneuro_edit.evaluation.runner import _run_math
    from mathneuro_edit.evaluation.runtime import eval_mode
    from mathneuro_edit.evaluation.tasks import MathTask
    from mathneuro_edit.recipe.io import load_recipe
    from mathneuro_edit.weights.loading import load_model

    recipe = load_recipe(args.recipe, [f"base.model={args.gguf}"])
    ev = recipe.evaluation
    shots, problems = _problems(recipe, args.n)
    torch.set_num_threads(1)  # the engines side by side on one thread (2 threads: part 2)
    model, tok = load_model(args.gguf, dtype="float32")
    task = MathTask(
        "m",
        problems,
        n_shot=len(shots),
        shots=shots,
        max_new_tokens=ev.max_new_tokens,
        chat_template=ev.chat_template,
        prompt_style=ev.prompt_style,
    )
    c = time.process_time()
    with eval_mode(model):
        ref = _run_math(model, tok, task, 64, False, "generate")
    gen_cpu = time.process_time() - c
    c = time.process_time()
    correct, completions = math_outcomes(
        model,
        tok,
        problems,
        shots=shots,
        chat_template=ev.chat_template,
        prompt_style=ev.prompt_style,
        max_new_tokens=ev.max_new_tokens,
        batch_size=64,
    )
    fast_cpu = time.process_time() - c
    same = completions == [p.completion for p in ref.predictions]
    n = len(problems)
    print(f"model: {args.gguf.rsplit('/', 1)[-1]}, {n} problems, torch {torch.__version__}, {os.cpu_count()} CPUs\n")
    print("| engine | CPU s / problem | ratio to generate |\n|---|---|---|")
    print(f"| transformers generate, batch 64 | {gen_cpu / n:.3f} | 1.00 |")
    print(f"| shared-prefix greedy, batch 64 | {fast_cpu / n:.3f} | {fast_cpu / gen_cpu:.2f} |")
    print(f"\nsame predictions: {same} ({ref.correct}/{n} right)\n")
    one, two = _result(_child(args, 1, 0, n)), _result(_child(args, 2, 0, n))
    half = n // 2
    p1, p2 = _child(args, 1, 0, half), _child(args, 1, half, n)
    t0 = time.time()
    r1, r2 = _result(p1), _result(p2)
    procs_wall = max(r1["wall"], r2["wall"])  # the two ran at once; each timed its own engine call
    print("| both cores | wall s | problems / wall s |\n|---|---|---|")
    print(f"| 1 process, 1 thread | {one['wall']:.1f} | {n / one['wall']:.2f} |")
    print(f"| 1 process, 2 threads | {two['wall']:.1f} | {n / two['wall']:.2f} |")
    print(f"| 2 processes, 1 thread each | {procs_wall:.1f} | {n / procs_wall:.2f} |")
    del t0
    if args.search:
        cost = search_cost(Path(args.search))
        if cost is None:
            print(f"\n{args.search}: no complete search yet (runs.jsonl and sweep.json)")
        else:
            per = gen_cpu / n
            print("\n| full search | value |\n|---|---|")
            print(f"| CPU minutes (all logged invocations, runs.jsonl) | {cost['cpu_s'] / 60:.1f} |")
            print(
                f"| CPU minutes of the evaluated blocks (cache) | {cost['block_cpu_s'] / 60:.1f} "
                f"({cost['unrecorded_blocks']} blocks without a recorded cost) |"
            )
            print(f"| problem evaluations (base, rounds, confirmation) | {cost['evals']:,} |")
            print(f"| the same grid without successive halving | {cost['naive_evals']:,} |")
            print(f"| as bare generate would cost (this run's rate) | {cost['evals'] * per / 60:.1f} CPU min |")
            print(f"| the non-adaptive grid with bare generate | {cost['naive_evals'] * per / 60:.1f} CPU min |")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
