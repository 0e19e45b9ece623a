"""``mask.reference: official`` as a recipe setting: ``run`` makes the released script's mask, the commands that
derive masks from statistics refuse it, and the schema refuses a per-row official mask."""

from __future__ import annotations

import pytest
import torch

from mathneuro_edit.data.sources import load_texts
from mathneuro_edit.engine.mask import Mask
from mathneuro_edit.errors import InputError
from mathneuro_edit.layout import MASK_NAME, STATS_DIR
from mathneuro_edit.recipe.io import recipe_from_dict
from mathneuro_edit.runs.consistency import run_consistency
from mathneuro_edit.runs.pipeline import run_recipe
from mathneuro_edit.runs.single_steps import mask_from_stats
from mathneuro_edit.weights.loading import load_model
from tests._models import save_tiny
from tests.engine.test_official import assert_same, ref_mask


def _recipe(base, **mask):
    return recipe_from_dict(
        {
            "base": {"model": str(base), "dtype": "bfloat16", "device": "cpu"},
            "data": {"math": "organism:math", "general": ["organism:general"], "samples": 6, "seed": 0},
            "calibration": {"max_length": 512, "batch_size": 4},
            "mask": {"top_k": 0.1, **mask},
            "edit": {"scale": 1.5},
            "outputs": {"checkpoint": True},
        }
    )


def test_run_with_reference_official_writes_the_scripts_mask(tmp_path):
    base = save_tiny(tmp_path / "base", "llama", dtype=torch.bfloat16)
    recipe = _recipe(base, reference="official")
    assert recipe.resolved_dict()["mask"]["reference"] == "official"
    lines: list[str] = []
    run_recipe(recipe, tmp_path / "run", progress=False, echo=lines.append)
    mask = Mask.load(tmp_path / "run" / MASK_NAME)
    assert mask.meta["reference"] == "official" and mask.meta["math"]["truncated_samples"] == 0
    assert any("the released script's rule" in line for line in lines)
    model, tok = load_model(str(base), dtype="bfloat16", device="cpu")
    math, general = (load_texts(s, 6, 0).texts for s in ("organism:math", "organism:general"))
    assert_same(mask, ref_mask(model, tok, math, general, 0.1))  # the independent reference of the rule

    default = tmp_path / "default"
    run_recipe(_recipe(base), default, progress=False)
    assert Mask.load(default / MASK_NAME).sha256 != mask.sha256
    with pytest.raises(InputError, match=r"mask\.reference: official: `mask` derives masks from saved float32"):
        mask_from_stats(recipe, tmp_path / "run" / STATS_DIR, tmp_path / "m.safetensors", echo=lambda s: None)
    with pytest.raises(InputError, match=r"mask\.reference: official: `consistency`"):
        run_consistency(recipe, tmp_path / "c", sizes=[2])
    from mathneuro_edit.runs.sweep.search import run_sweep

    with pytest.raises(InputError, match=r"mask\.reference: official: `sweep`"):
        run_sweep(recipe, tmp_path / "s", top_ks=[0.1], scales=[1.1])
    assert not (tmp_path / "s").exists()  # refused before anything is written


def test_official_is_per_matrix_and_defaults_to_null():
    base = {"model": "organism", "dtype": "float32"}
    minimal = {"base": base, "data": {"math": "organism:math", "general": "organism:general"}, "edit": {"scale": 1.1}}
    assert recipe_from_dict(minimal).mask.reference is None
    with pytest.raises(InputError, match="reference official selects per matrix"):
        recipe_from_dict({**minimal, "mask": {"reference": "official", "granularity": "row"}})
    with pytest.raises(InputError, match="mask.reference"):
        recipe_from_dict({**minimal, "mask": {"reference": "paper"}})
