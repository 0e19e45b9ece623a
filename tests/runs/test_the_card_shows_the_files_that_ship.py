"""A release's numbers are the numbers of the files that ship (issue 38, item 4).

The release stores ``outputs.dtype`` (here bfloat16; a GGUF base's default) while the model in memory is float32.
``run`` evaluates base and edit on the weights as stored (:func:`~mathneuro_edit.engine.apply.round_weights_` and
the edit's stored values), so a user who loads the published checkpoint, and the base cast to the same dtype, and
evaluates them with the same tasks gets exactly the eval.json and the card's figures: every prediction, the
accuracy and the general loss, bit for bit.
"""

from __future__ import annotations

import json

import torch
from transformers import AutoModelForCausalLM

from mathneuro_edit.evaluation.runner import evaluate
from mathneuro_edit.recipe.io import quickstart_recipe
from mathneuro_edit.runs.pipeline import run_recipe
from mathneuro_edit.runs.steps.evaluate import eval_tasks
from mathneuro_edit.weights.loading import load_model

SETS = [
    "outputs.dtype=bfloat16",
    "outputs.adapter=false",
    "data.samples=8",
    "evaluation.samples=24",
    "evaluation.math=arithmetic",
    "evaluation.max_new_tokens=4",
    "edit.scale=1.5",
]


def test_the_card_numbers_are_those_of_the_published_bf16_files(tmp_path):
    recipe = quickstart_recipe(SETS)
    run_recipe(recipe, tmp_path / "run", progress=False)
    ckpt = tmp_path / "run" / "checkpoint"
    saved = json.loads((ckpt / "eval.json").read_text())
    assert json.loads((ckpt / "config.json").read_text())["dtype"] == "bfloat16"
    tasks = eval_tasks(recipe)

    # as a user: the published files, read into float32, evaluated with no edit
    release = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32)
    _, tok = load_model("organism", dtype="float32")
    edited = evaluate(release, tok, tasks, progress=False).to_dict(predictions=True)
    # and the base as a checkpoint of the same dtype stores it: its parameters (buffers such as RoPE's inv_freq are
    # not in a checkpoint: a loaded model computes them in float32)
    base, _ = load_model("organism", dtype="float32")
    for p in base.parameters():
        p.data.copy_(p.data.to(torch.bfloat16))
    base_now = evaluate(base, tok, tasks, progress=False).to_dict(predictions=True)

    for label, got in (("edited", edited), ("base", base_now)):
        assert got["math"]["base"]["predictions"] == saved["math"][label]["predictions"], label
        assert got["math"]["base"]["math_accuracy"] == saved["math"][label]["math_accuracy"], label
        assert got["general"]["base"]["general_loss"] == saved["general"][label]["general_loss"], label
    # the edit moved the answers at all (else this test could not tell the float32 numbers from the bf16 ones)
    assert saved["general"]["edited"]["general_loss"] != saved["general"]["base"]["general_loss"]
    card = (ckpt / "README.md").read_text()
    k, n = (sum(p["correct"] for p in saved["math"]["edited"]["predictions"]), 24)
    assert f"{k}/{n}" in card
    assert "float32, before that cast" not in card
