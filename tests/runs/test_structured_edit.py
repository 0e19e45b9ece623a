"""A recipe with a scale map and a top_k map (edits with structure, docs/recipes.md) on the shipped organism: every
output (checkpoint, SHiRA adapter, GGUF) holds exactly the edit an independent computation gives, and a second run
writes the same files byte for byte.

The independent computation: the scale of each organism matrix written out by hand below (not through
engine.edit_map), the base's float32 weights multiplied in float32 where the run's mask selects; the mask itself
against two uniform masks (top_k 0.05 for attention, 0.02 for the MLP) from the run's own statistics.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from mathneuro_edit.engine.mask import Mask, find_math_params
from mathneuro_edit.engine.stats import ActivationStats
from mathneuro_edit.errors import InputError
from mathneuro_edit.organism.shipped import organism_path
from mathneuro_edit.recipe.io import quickstart_recipe, recipe_from_dict
from mathneuro_edit.runs.pipeline import run_recipe

SETS = [
    'edit.scale={default: 1.05, mlp: 1.1, q_proj: 1.3, "layers 0-1": 1.0, "layers 3 down_proj": 0.5}',
    "mask.top_k={default: 0.05, mlp: 0.02}",
    "outputs.adapter=true",
    "outputs.gguf=F32",
    "evaluation.samples=8",
]


def _expected_scale(name: str) -> float:
    """The map above, resolved by hand for the organism's names (model.layers.<i>.<self_attn|mlp>.<proj>.weight)."""
    parts = name.split(".")
    if parts[:2] != ["model", "layers"]:
        return 1.05
    layer, block, proj = int(parts[2]), parts[3], parts[4]
    if layer == 3 and proj == "down_proj":
        return 0.5
    if layer in (0, 1):
        return 1.0
    if proj == "q_proj":
        return 1.3
    return 1.1 if block == "mlp" else 1.05


def _recipe():
    return recipe_from_dict(quickstart_recipe().resolved_dict(), SETS)


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory) -> tuple[Path, Path]:
    pytest.importorskip("gguf")
    root = tmp_path_factory.mktemp("structured")
    for name in ("one", "two"):
        run_recipe(_recipe(), root / name, progress=False)
    return root / "one", root / "two"


def _expected_weights(run: Path) -> dict[str, torch.Tensor]:
    base = load_file(str(organism_path() / "model.safetensors"))
    mask = Mask.load(run / "mask.safetensors")
    out = dict(base)
    for name in mask:
        w = base[name]
        out[name] = torch.where(mask[name], w * torch.tensor(_expected_scale(name), dtype=torch.float32), w)
    return out


def test_the_mask_takes_each_matrix_s_own_top_k(two_runs) -> None:
    run = two_runs[0]
    stats = [ActivationStats.load(run / "stats" / f) for f in ("math.stats.safetensors", "general-0.stats.safetensors")]
    weights = load_file(str(organism_path() / "model.safetensors"))
    wide, narrow = find_math_params(weights, stats[0], stats[1:], top_k=[0.05, 0.02])
    mask = Mask.load(run / "mask.safetensors")
    assert mask.meta["top_k"] == {"default": 0.05, "mlp": 0.02}
    for name in mask:
        want = narrow if ".mlp." in name else wide
        assert torch.equal(mask[name], want[name]), name
    assert any(".mlp." in n for n in mask) and any(".self_attn." in n for n in mask)


def test_the_checkpoint_holds_the_independent_edit(two_runs) -> None:
    expected = _expected_weights(two_runs[0])
    got = load_file(str(two_runs[0] / "checkpoint" / "model.safetensors"))
    scales = {_expected_scale(n) for n in Mask.load(two_runs[0] / "mask.safetensors")}
    assert scales == {1.0, 1.05, 1.1, 1.3, 0.5}  # every key of the map edits something
    for name, w in got.items():
        assert torch.equal(w, expected[name]), name


def test_the_adapter_merged_over_the_base_is_the_independent_edit(two_runs) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    expected = _expected_weights(two_runs[0])
    base = AutoModelForCausalLM.from_pretrained(organism_path(), dtype=torch.float32)
    merged = PeftModel.from_pretrained(base, str(two_runs[0] / "adapter")).merge_and_unload().state_dict()
    for name, w in expected.items():  # the base's own names (the tied lm_head is the embedding)
        assert torch.equal(merged[name], w), name


def test_the_gguf_holds_the_independent_edit(two_runs) -> None:
    from transformers import AutoModelForCausalLM

    expected = _expected_weights(two_runs[0])
    model = AutoModelForCausalLM.from_pretrained(two_runs[0] / "checkpoint", gguf_file="model-F32.gguf")
    got = model.state_dict()
    for name, w in expected.items():
        assert torch.equal(got[name].float(), w), name


def test_a_second_run_writes_the_same_files(two_runs) -> None:
    one, two = two_runs
    files = sorted(p.relative_to(one) for p in one.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(two) for p in two.rglob("*") if p.is_file())
    assert len(files) > 10
    for rel in files:
        assert (one / rel).read_bytes() == (two / rel).read_bytes(), rel


def test_the_card_and_lock_show_the_maps(two_runs) -> None:
    card = (two_runs[0] / "checkpoint" / "README.md").read_text()
    assert "| scale | default 1.05, mlp 1.1, q_proj 1.3, layers 0-1 1, layers 3 down_proj 0.5 |" in card
    assert "| top_k | default 0.05, mlp 0.02 (per matrix) |" in card
    lock = (two_runs[0] / "mathneuro_recipe.lock.yaml").read_text()
    assert "layers 3 down_proj: 0.5" in lock


def test_a_key_matching_no_matrix_is_one_line(tmp_path) -> None:
    recipe = recipe_from_dict(quickstart_recipe().resolved_dict(), ["edit.scale={default: 1.1, q_porj: 1.2}"])
    with pytest.raises(InputError, match="'q_porj' matches none of the edited matrices"):
        run_recipe(recipe, tmp_path / "out", progress=False)


def test_reproduce_rebuilds_every_file_from_the_lock(two_runs, tmp_path) -> None:
    from click.testing import CliRunner

    from mathneuro_edit.cli.main import main

    result = CliRunner().invoke(main, ["reproduce", str(two_runs[0]), "--out", str(tmp_path / "again")])
    assert result.exit_code == 0, result.output
    assert "reproduced: yes, bit for bit" in result.output


def test_every_entry_point_refuses_a_key_matching_no_matrix(two_runs, tmp_path) -> None:
    """The export, the adapter, verify and the in-memory edit, given a mask and a scale map, check its keys too
    (the run's own check is test_a_key_matching_no_matrix_is_one_line)."""
    from mathneuro_edit.engine.apply import ReversibleEdit
    from mathneuro_edit.weights.adapter import export_adapter
    from mathneuro_edit.weights.audit import verify
    from mathneuro_edit.weights.checkpoint_writer import export_checkpoint
    from mathneuro_edit.weights.loading import load_model

    mask = Mask.load(two_runs[0] / "mask.safetensors")
    typo = {"default": 1.1, "layers 9 mlp": 1.2}  # the organism has layers 0-3
    base = str(organism_path())
    calls = [
        lambda: export_checkpoint(base, mask, typo, tmp_path / "c"),
        lambda: export_adapter(base, mask, typo, tmp_path / "a"),
        lambda: verify(two_runs[0] / "checkpoint", base, mask, typo),
        lambda: ReversibleEdit(load_model("organism", dtype="float32")[0], mask, typo),
    ]
    for call in calls:
        with pytest.raises(InputError, match="'layers 9 mlp' matches none of the edited matrices"):
            call()
    assert not (tmp_path / "c").exists() and not (tmp_path / "a").exists()
