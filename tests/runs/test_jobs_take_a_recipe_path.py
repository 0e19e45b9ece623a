"""The API takes what the CLI takes: every top-level job that runs a recipe (``run_recipe``, ``run_sweep``,
``run_from_sweep``, ``run_consistency``) accepts a :class:`Recipe` or the path of a recipe file (``str`` or
``Path``), and a path answers as the recipe it names would (before: ``run_recipe("recipes/quickstart.yaml", out)``
ended in ``AttributeError: 'str' object has no attribute 'base'``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

import mathneuro_edit as api
from mathneuro_edit.errors import InputError
from mathneuro_edit.recipe.io import as_recipe, load_recipe
from mathneuro_edit.recipe.safe_yaml import dump_yaml

# the quickstart, shrunk to seconds (organism answers fit in 24 tokens)
SMALL = ["data.samples=8", "evaluation.samples=4", "evaluation.max_new_tokens=24", "outputs.adapter=false"]
QUICKSTART = Path(__file__).resolve().parents[2] / "recipes" / "quickstart.yaml"


def _small_recipe_file(tmp_path: Path, *more: str) -> Path:
    recipe = load_recipe(QUICKSTART, [*SMALL, *more])
    path = tmp_path / "small.yaml"
    path.write_text(dump_yaml(recipe.model_dump(mode="json", exclude_none=True)))
    return path


def test_as_recipe_reads_a_path_and_passes_a_recipe(tmp_path: Path) -> None:
    recipe = load_recipe(QUICKSTART)
    assert as_recipe(QUICKSTART) == as_recipe(str(QUICKSTART)) == as_recipe(recipe) == recipe
    with pytest.raises(InputError, match="recipe file not found"):
        as_recipe(tmp_path / "missing.yaml")
    with pytest.raises(InputError, match=r"^recipe: got dict; pass a Recipe"):
        as_recipe({"base": {"model": "organism"}})


def test_run_recipe_from_a_path_writes_the_same_mask_as_from_the_recipe(tmp_path: Path) -> None:
    path = _small_recipe_file(tmp_path)
    from_path = api.run_recipe(str(path), tmp_path / "a", progress=False)
    from_recipe = api.run_recipe(load_recipe(path), tmp_path / "b", progress=False)
    assert from_path.mask_sha256 == from_recipe.mask_sha256 and from_path.selected > 0
    with pytest.raises(InputError, match=r"overlaps the recipe .*small\.yaml"):  # the recipe file is an input
        api.run_recipe(path, tmp_path, overwrite=True, progress=False)


@pytest.mark.parametrize("as_path", [str, Path, load_recipe])
def test_every_job_reads_a_recipe_path_as_its_recipe(tmp_path: Path, as_path) -> None:
    """Each job answers a path exactly as it answers the recipe it names: here with its first input check (the
    sweep's and consistency's fail before any model is loaded), which reads the recipe."""
    no_eval = _small_recipe_file(tmp_path, "evaluation=null")
    with pytest.raises(InputError, match="sweep needs an evaluation section"):
        api.run_sweep(as_path(no_eval), tmp_path / "sweep", progress=False)
    taken = tmp_path / "taken"
    taken.mkdir()
    with pytest.raises(InputError, match="already exists"):
        api.run_consistency(as_path(_small_recipe_file(tmp_path)), taken, progress=False)
    with pytest.raises(InputError, match=r"no-sweep/sweep\.json: not found"):
        api.run_from_sweep(as_path(_small_recipe_file(tmp_path)), tmp_path / "no-sweep", tmp_path / "out")
    missing = tmp_path / "missing.yaml"
    for job in (api.run_recipe, api.run_sweep, api.run_consistency):
        if as_path is not load_recipe:
            with pytest.raises(InputError, match="recipe file not found"):
                job(as_path(missing), tmp_path / "out")
