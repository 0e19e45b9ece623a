"""The one run record (issue 42 item 2): every step reads and extends one RunRecord, and an output's step reads
nothing of the run but what RunView names."""

from __future__ import annotations

import dataclasses
import typing

import torch

from mathneuro_edit.engine.mask import find_math_params
from mathneuro_edit.outputs.registry import RunView
from mathneuro_edit.recipe.io import quickstart_recipe
from mathneuro_edit.runs.steps.mask import calibrate_step, load_step, mask_step
from mathneuro_edit.runs.steps.record import RunRecord
from mathneuro_edit.util.console import Stages


def test_the_run_record_holds_every_field_an_output_step_reads() -> None:
    view = set(typing.get_type_hints(RunView)) | {n for n in vars(RunView) if not n.startswith("_")}
    record = {f.name for f in dataclasses.fields(RunRecord)}
    assert view - record == set(), "RunView names a field RunRecord does not have"


def test_the_steps_fill_the_record_in_order_and_announce_each_stage() -> None:
    recipe = quickstart_recipe(["data.samples=4", "mask.top_k=0.05"])
    lines: list[str] = []
    run = RunRecord(recipe, Stages(4, lines.append), progress=False)
    assert (run.model, run.stats, run.mask) == (None, None, None)
    load_step(run)
    assert run.model is not None and run.tokenizer is not None
    calibrate_step(run)
    assert run.stats is not None and len(run.stats.general) == len(recipe.data.general)
    assert run.stats.records is not None and run.stats.device is not None
    mask_step(run)
    # independently: the engine's selection on the same statistics and the model's own weights
    weights = {n: p.detach() for n, p in run.model.named_parameters()}
    expected = find_math_params(
        weights,
        run.stats.math,
        run.stats.general,
        top_k=recipe.mask.top_k,
        method=recipe.mask.method,
        granularity=recipe.mask.granularity,
        seed=recipe.mask.seed,
    )
    assert run.mask.sha256 == expected.sha256
    assert list(run.mask) == list(expected)
    for name in expected:
        assert torch.equal(run.mask[name], expected[name]), name
    starts = [line for line in lines if line.startswith("[")]
    assert [s.split("]")[0] for s in starts] == ["[1/4", "[2/4", "[3/4", "[4/4"], lines
    assert starts[0].endswith("load organism") and starts[-1].startswith("[4/4] mask (")
