"""Re-compute a release's evaluation from the files it publishes, as a user would, and compare with its eval.json.

    python scripts/check_release_numbers.py RUN_DIR [--base PATH] [--set key=value ...]

Loads ``RUN_DIR/checkpoint`` with transformers (as published: ``outputs.dtype``, read into float32) and the base
cast to the same dtype, evaluates both with the run's own tasks (the lock's recipe) and compares every prediction,
the accuracy and the general loss with ``RUN_DIR/eval.json``: the card's numbers are those of the files that ship
only when they are equal (exit 0; exit 1 naming the first difference). ``--base`` gives back a redacted local
base (a ``.gguf`` file or a folder), ``--set`` redacted data paths, as ``reproduce`` takes them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from mathneuro_edit.engine.apply import round_weights_
from mathneuro_edit.evaluation.runner import evaluate
from mathneuro_edit.publish.lock import read_lock, recipe_from_lock
from mathneuro_edit.runs.steps.evaluate import eval_tasks
from mathneuro_edit.runs.steps.export import release_dtype
from mathneuro_edit.runs.steps.mask import load_recipe_model


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir")
    ap.add_argument("--base", default=None, help="the base model (a redacted local path given back)")
    ap.add_argument("--set", action="append", default=[], dest="sets")
    a = ap.parse_args()
    run = Path(a.run_dir)
    overrides = [*a.sets, *([f"base.model={a.base}"] if a.base else [])]
    recipe = recipe_from_lock(read_lock(run), overrides)
    saved = json.loads((run / "eval.json").read_text())
    tasks = [t for t in eval_tasks(recipe) if t.name in ("math", "general")]
    store = release_dtype(recipe)
    base, tok = load_recipe_model(recipe)
    round_weights_(base, store)  # the base as a checkpoint of the release's dtype holds it
    with torch.no_grad():
        got_base = evaluate(base, tok, tasks, progress=False).to_dict(predictions=True)
    del base
    release = AutoModelForCausalLM.from_pretrained(run / "checkpoint", dtype=torch.float32)
    with torch.no_grad():
        got_edit = evaluate(release, tok, tasks, progress=False).to_dict(predictions=True)
    bad = 0
    for label, got in (("base", got_base), ("edited", got_edit)):
        for task, keys in (("math", ("predictions", "math_accuracy")), ("general", ("general_loss",))):
            for k in keys:
                same = got[task]["base"][k] == saved[task][label][k]
                bad += not same
                shown = "" if k == "predictions" else f": {got[task]['base'][k]} vs eval.json {saved[task][label][k]}"
                print(f"{label:6} {task}.{k}: {'equal' if same else 'DIFFERENT'}{shown}")
    print(f"stored dtype: {store}; {'the card shows the published files' if not bad else 'MISMATCH'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
