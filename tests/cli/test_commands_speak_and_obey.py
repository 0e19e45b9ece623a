"""Every command speaks and obeys (issue 39, item 4): ``export`` and ``reproduce`` print stage lines; ``card --set``
applies what a card may show and refuses, in one line with exit 2, a key that decides the weights; ``load_edited``
takes every base ``load_model`` takes (``organism`` was sent to the Hub); ``mask --top-k`` replaces mask.top_k.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
import yaml
from click.testing import CliRunner

from mathneuro_edit.cli.main import main
from mathneuro_edit.errors import InputError
from mathneuro_edit.layout import LOCK_NAME

RUNNER = CliRunner()


def _cli(*args: object) -> tuple[int, str, str]:
    """``(exit code, stdout, stderr)`` of one in-process command."""
    result = RUNNER.invoke(main, [str(a) for a in args])
    return result.exit_code, result.stdout, result.stderr


def _data_sets(ws: Path) -> list[str]:
    """The ``--set`` that give back the local data paths the lock redacted."""
    sets = {
        "data.math.path": ws / "math.txt",
        "data.general.0.path": ws / "general.txt",
        "evaluation.math.path": ws / "eval.jsonl",
        "evaluation.general.0.path": ws / "general.txt",
    }
    return [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]


@pytest.fixture()
def run(ws: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(ws / "run", copy)
    return copy


# ------------------------------------------------------------------------------------------------ stage lines


def test_export_prints_its_stage_lines(ws: Path, tmp_path: Path) -> None:
    code, stdout, stderr = _cli(
        "export", ws / "recipe.yaml", "--mask", ws / "mask.safetensors", "--out", tmp_path / "c"
    )
    assert code == 0, stderr
    assert stdout.strip() == str(tmp_path / "c")
    lines = stderr.splitlines()
    assert lines[0] == "[1/2] export checkpoint/" and lines[-1] == "[2/2] write lock and model card", stderr
    code, _, stderr = _cli(
        "export", ws / "recipe.yaml", "--mask", ws / "mask.safetensors", "--out", tmp_path / "a", "--adapter", "-q"
    )
    assert code == 0 and stderr == "", stderr  # --quiet: none


def test_reproduce_prints_its_stage_lines_and_the_rerun_s_under_them(ws: Path) -> None:
    code, stdout, stderr = _cli("reproduce", ws / "run", "--base", ws / "base", *_data_sets(ws))
    assert code == 0, stdout + stderr
    lines = stderr.splitlines()
    assert lines[0] == f"[1/3] check the files of {ws / 'run'} against the lock", stderr
    assert lines[1].startswith("      files in ") and lines[1].endswith("all match"), stderr
    assert lines[2] == "[2/3] re-run the lock's recipe into a temporary folder", stderr
    assert lines[3].startswith("      [1/") and " load " in lines[3], stderr  # the run's own stages, indented
    assert "      [8/8] write lock and model cards" in lines, stderr
    n = len(_lock(ws / "run")["outputs"])
    assert lines[-1] == f"[3/3] compare the mask and {n} output file(s) with the lock", stderr
    assert "reproduced: yes, bit for bit" in stdout


# ------------------------------------------------------------------------------------------------ card --set


def _lock(folder: Path) -> dict:
    return yaml.safe_load((folder / LOCK_NAME).read_text())


def test_card_set_applies_what_a_card_shows_to_the_lock_and_the_cards(ws: Path, run: Path) -> None:
    from huggingface_hub import ModelCard

    from mathneuro_edit.publish.lock_policy import validate_lock

    weights = {p: p.read_bytes() for p in run.rglob("*.safetensors")}
    code, stdout, stderr = _cli(
        "card",
        run,
        "--set",
        "hub.repo_id=me/tiny-boost",
        "--set",
        "hub.private=true",
        "--set",
        "evaluation.math.hub_dataset=openai/gsm8k",
        "--set",
        "data.general.0.hub_dataset=Salesforce/wikitext",
    )
    assert code == 0, stderr
    for folder in (run, run / "checkpoint", run / "adapter"):
        lock = _lock(folder)
        validate_lock(lock, str(folder))  # the recipe hash follows the recipe
        assert lock["recipe"]["hub"] == {"repo_id": "me/tiny-boost", "private": True, "revision": None}
        assert lock["recipe"]["evaluation"]["math"]["hub_dataset"] == "openai/gsm8k"
        assert lock["data"]["general"][0]["source"]["hub_dataset"] == "Salesforce/wikitext"
    assert _lock(run)["recipe_sha256"] != _lock(ws / "run")["recipe_sha256"]
    card = ModelCard.load(run / "checkpoint" / "README.md")
    assert 'from_pretrained("me/tiny-boost")' in card.text
    assert "Salesforce/wikitext" in card.data.datasets
    assert any(r.dataset_type == "openai/gsm8k" for r in card.data.eval_results)
    assert weights == {p: p.read_bytes() for p in run.rglob("*.safetensors")}
    code, stdout, stderr = _cli("verify", run, "--base", ws / "base", "-q")
    assert code == 0, stdout + stderr  # every output still matches the lock


@pytest.mark.parametrize(
    "item,why",
    [
        ("mask.top_k=0.01", "card --set mask.top_k: would change the weights"),
        ("edit.scale=2", "card --set edit.scale: would change the weights"),
        ("data.samples=3", "card --set data.samples: would change the weights"),
        ("calibration.max_length=8", "card --set calibration.max_length: would change the weights"),
        ("targets.include=[mlp]", "card --set targets.include: would change the weights"),
        ("base.model=organism", "card --set base.model: would change the weights"),
        ("outputs.dtype=float16", "card --set outputs.dtype: would change the weights"),
        ("evaluation.samples=1", "card --set evaluation.samples: not a card setting"),
        ("hub.repoid=me/x", "card --set hub.repoid: not a card setting, did you mean 'hub.repo_id'?"),
        ("base.hub_id=me/base", "card --set base.hub_id: the run's adapter/adapter_config.json records"),
        ("hub.repo_id=not a repo", "hub.repo_id: must be a Hub repo id"),
    ],
)
def test_card_set_refuses_what_the_outputs_were_made_with(run: Path, item: str, why: str) -> None:
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    code, stdout, stderr = _cli("card", run, "--set", item)
    assert code == 2, stdout + stderr
    assert len(stderr.strip().splitlines()) == 1 and why in stderr, stderr
    assert before == {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}  # nothing written


# ------------------------------------------------------------------------------------------------ load_edited


def test_load_edited_takes_the_organism_as_load_model_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mathneuro_edit.organism import organism_path
    from mathneuro_edit.recipe.input_sections import BaseConfig
    from mathneuro_edit.weights.adapter import export_adapter, load_edited
    from mathneuro_edit.weights.checkpoint import open_checkpoint

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # "organism" must never reach the Hub
    shapes = {k: e.shape for k, e in open_checkpoint(organism_path()).tensors.items() if k.endswith("proj.weight")}
    g = torch.Generator().manual_seed(0)
    mask = {k: torch.rand(tuple(s), generator=g) < 0.01 for k, s in sorted(shapes.items())[:3]}
    export_adapter(organism_path(), mask, 1.1, tmp_path / "adapter")
    want = load_edited(str(organism_path()), tmp_path / "adapter").state_dict()
    for base in ("organism", BaseConfig(model="organism")):
        got = load_edited(base, tmp_path / "adapter").state_dict()
        assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want), base


# ------------------------------------------------------------------------------------------------ mask --top-k


def test_mask_top_k_replaces_the_recipe_s_and_is_checked_by_its_rule(ws: Path, tmp_path: Path) -> None:
    from mathneuro_edit import Mask

    recipe = ws / "recipe.yaml"
    assert yaml.safe_load(recipe.read_text())["mask"]["top_k"] == 0.1
    code, stdout, stderr = _cli(
        "mask", recipe, "--stats", ws / "stats", "--out", tmp_path / "m.safetensors", "--top-k", "0.3"
    )
    assert code == 0, stderr
    assert Mask.load(tmp_path / "m.safetensors").meta["top_k"] == 0.3 and "top_k=0.3" in stderr
    for value, why in (("5", "did you mean 0.05?"), ("0", "must be in (0, 1]"), ("nan", "must be in (0, 1]")):
        code, _, stderr = _cli(
            "mask", recipe, "--stats", ws / "stats", "--out", tmp_path / "x.safetensors", "--top-k", value
        )
        assert code == 2 and stderr.startswith("error: --top-k: ") and why in stderr, stderr
        assert len(stderr.strip().splitlines()) == 1 and not (tmp_path / "x.safetensors").exists()


@pytest.mark.parametrize("command", ["run", "calibrate", "mask", "export", "eval", "sweep", "consistency"])
def test_no_recipe_command_writes_over_its_recipe_file(tmp_path: Path, command: str) -> None:
    """Every command that takes RECIPE refuses an ``--out`` that is, or holds, the recipe file itself: exit 2, one
    line naming the recipe, the file untouched (the recipe's path reaches the output check through
    :class:`~mathneuro_edit.cli.options.RecipeJob`).

    Mutation: ``RecipeJob.claim`` checks ``--out`` without the recipe's path (cli/options.py)."""
    shipped = Path(__file__).resolve().parents[2] / "recipes" / "quickstart.yaml"
    folder = tmp_path / "r"
    folder.mkdir()
    recipe = folder / "recipe.yaml"
    shutil.copy(shipped, recipe)
    stats = tmp_path / "stats"
    stats.mkdir()
    args = {
        "run": ["--out", folder],
        "calibrate": ["--out", folder],
        "mask": ["--stats", stats, "--out", recipe],
        "export": ["--mask", recipe, "--out", folder],
        "eval": ["--out", recipe],
        "sweep": ["--out", folder],
        "consistency": ["--out", folder],
    }[command]
    code, out, err = _cli(command, recipe, *args)
    assert code == 2 and f"overlaps the recipe {recipe.resolve()}" in err and len(err.strip().splitlines()) == 1, (
        out,
        err,
    )
    assert recipe.read_text() == shipped.read_text()


def test_card_set_suggests_the_close_key_and_never_repeats_the_typo() -> None:
    from mathneuro_edit.runs.card_sets import check_card_sets

    with pytest.raises(InputError) as typo:
        check_card_sets(["hub.repoid=me/x"])
    assert "did you mean 'hub.repo_id'?" in str(typo.value) and "--set hub.repoid=me/x" not in str(typo.value)
    with pytest.raises(InputError) as other:  # nothing close: what a card may change, and where the key changes
        check_card_sets(["evaluation.samples=1"])
    assert "did you mean" not in str(other.value) and "re-run the recipe with --set evaluation.samples=1" in str(
        other.value
    )
