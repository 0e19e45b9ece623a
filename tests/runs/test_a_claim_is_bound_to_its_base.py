"""A release from a sweep claims the sweep's confirmed gain, so it must be the sweep's model and recipe (issue 46 item 1).

`run RECIPE --from-sweep SWEEP --set base.model=<another local model>` exited 0 and its card claimed the sweep's gain
for a model never measured: recipes were compared in their public form, where every local base is ``<local>``.
``mask.reference=official`` and another ``calibration`` section passed the same way. Now a sweep.json records the
base by content (``base_identity``) and a release is refused, in one line naming the key and both values, when its
base or any key that decides the weights differs. Which keys decide is the recipe schema's
(:data:`~mathneuro_edit.recipe.schema.RELEASE_KEYS`): the first tests walk every key of the schema.
"""

from __future__ import annotations

import json
import re
import shutil
import typing
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from pydantic import BaseModel

from mathneuro_edit.cli.main import main
from mathneuro_edit.errors import InputError
from mathneuro_edit.recipe.io import load_recipe, quickstart_recipe
from mathneuro_edit.recipe.schema import RELEASE_KEYS, Recipe, release_rule
from mathneuro_edit.runs.steps.export import base_identity
from mathneuro_edit.runs.sweep.evidence import (
    base_difference,
    mask_refusal,
    read_sweep,
    recipe_from_sweep,
    release_difference,
)
from tests._fakehub import fake_hub  # noqa: F401 - the fixture
from tests._models import save_tiny
from tests._tiny import arithmetic_problems, write_workspace

from ._sweep_json import release_mask_sha256, valid_sweep

CLASSES = {"same", "base", "sweep", "free"}


def _models(annotation: typing.Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation holds (``list[Source]``, ``LmEvalConfig | None``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for a in typing.get_args(annotation) for m in _models(a)]


def schema_keys(model: type[BaseModel] = Recipe, prefix: str = "") -> list[str]:
    """Every key of the recipe schema, dotted, list items without their index (``data.general.path``)."""
    keys = []
    for name, info in model.model_fields.items():
        subs = _models(info.annotation)
        keys += [k for sub in subs for k in schema_keys(sub, f"{prefix}{name}.")] if subs else [prefix + name]
    return keys


def test_every_key_of_the_recipe_schema_is_classified_for_a_release() -> None:
    keys = schema_keys()
    assert len(keys) > 60 and "data.general.template" in keys and "evaluation.lm_eval.tasks" in keys
    unclassified = [k for k in keys if release_rule(k, default=None) is None]
    assert not unclassified, f"classify these in recipe/schema.py RELEASE_KEYS: {unclassified}"
    assert {release_rule(k) for k in keys} == CLASSES
    sections = {k.rsplit(".", i)[0] for k in keys for i in range(k.count(".") + 1)}
    stale = [entry for entry in RELEASE_KEYS if entry not in sections]
    assert not stale, f"RELEASE_KEYS names keys the schema does not have: {stale}"


def test_a_key_nobody_classified_is_compared() -> None:
    assert release_rule("newsection.key") == "same" and release_rule("calibration.new_key") == "same"
    assert release_rule("outputs.new_key") == "free"  # a section that writes files, not weights


# two recipes to change keys in: local data files, and a Hub data set (its config, split and revision)
LOCAL = ["data.math=m.jsonl", "data.general=[g.txt]"]
HUB = ["data.math=hf://datasets/openai/gsm8k", "data.general=[hf://datasets/Salesforce/wikitext]"]
# one change of every key that decides the weights: (the recipe it is made in, the override)
CHANGES = {
    "base.dtype": (LOCAL, "base.dtype=bfloat16"),
    "data.samples": (LOCAL, "data.samples=7"),
    "data.seed": (LOCAL, "data.seed=1"),
    "calibration.max_length": (LOCAL, "calibration.max_length=64"),
    "calibration.batch_size": (LOCAL, "calibration.batch_size=2"),
    "targets.include": (LOCAL, "targets.include=[mlp]"),
    "targets.exclude": (LOCAL, "targets.exclude=[lm_head]"),
    "mask.method": (LOCAL, "mask.method=wanda"),
    "mask.granularity": (LOCAL, "mask.granularity=row"),
    "mask.seed": (LOCAL, "mask.seed=3"),
    "mask.reference": (LOCAL, "mask.reference=official"),
    "outputs.dtype": (LOCAL, "outputs.dtype=float32"),
    **{
        f"data.{which}.{key}": (recipe, f"data.{which}{'.0' if which == 'general' else ''}.{key}={value}")
        for which in ("math", "general")
        for recipe, key, value in [
            (LOCAL, "path", "other.jsonl"),
            (LOCAL, "field", "body"),
            (LOCAL, "template", '"{question}"'),
            (LOCAL, "format", "json"),
            (HUB, "config", "main"),
            (HUB, "split", "test"),
            (HUB, "revision", "v2"),
        ]
    },
}


def test_changing_any_key_that_decides_the_weights_is_refused_naming_it() -> None:
    deciding = [k for k in schema_keys() if release_rule(k) == "same"]
    assert sorted(deciding) == sorted(CHANGES), "give every key that decides the weights a change in CHANGES"
    for key, (sets, change) in CHANGES.items():
        sweep = quickstart_recipe(sets).public_dict()
        found = release_difference(quickstart_recipe([*sets, change]).public_dict(), sweep)
        assert found is not None and found[0] == change.split("=")[0], (key, found)
        assert found[1] != found[2] and repr(found[1]) != repr(found[2])


def test_keys_that_do_not_decide_the_weights_pass() -> None:
    sweep = quickstart_recipe(LOCAL).public_dict()
    free = [
        "evaluation.samples=7",
        "base.device=cpu",
        "base.use_kernels=true",
        "data.math.hub_dataset=openai/gsm8k",
        "outputs.gguf=Q8_0",
        "hub.repo_id=me/x",
        "mask.top_k=0.2",  # the sweep's setting replaces these two
        "edit.scale=3",
    ]
    assert release_difference(quickstart_recipe([*LOCAL, *free]).public_dict(), sweep) is None
    # the base's name is not compared: its content is (a path of another machine, the same file)
    moved = quickstart_recipe([*LOCAL, "base.model=/elsewhere/the-same.gguf", "base.hub_id=org/m"]).public_dict()
    assert release_difference(moved, sweep) is None


A, B = {"gguf_sha256": "a" * 64}, {"gguf_sha256": "b" * 64}


def test_base_difference_names_base_model_and_both_identities_whole() -> None:
    assert base_difference(A, dict(A), "/x/m.gguf") is None
    line = base_difference(B, A, "/x/other.gguf")
    assert line == (
        f"the recipe's base.model ('/x/other.gguf': GGUF sha256 {'b' * 64}) is not the model the sweep measured "
        f"(GGUF sha256 {'a' * 64})"
    )
    folder = {"weights_sha256": {"model.safetensors": "c" * 64}}
    hub = {"hub_id": "org/m", "revision": "d" * 40}
    assert f"safetensors model.safetensors sha256 {'c' * 64}" in base_difference(folder, hub, "m")
    assert f"Hub model org/m at commit {'d' * 40}" in base_difference(folder, hub, "m")


def test_a_sweep_without_a_base_identity_is_refused_saying_how_to_add_it(tmp_path: Path) -> None:
    data = valid_sweep()
    del data["base_identity"]
    (tmp_path / "sweep.json").write_text(json.dumps(data))
    with pytest.raises(InputError) as e:
        read_sweep(tmp_path)
    line = str(e.value)
    assert "records no base_identity" in line and '"base_identity": {"gguf_sha256": "<sha256sum of the .gguf>"}' in line
    for bad in ({}, {"gguf_sha256": "x"}, {"gguf_sha256": "a" * 64, "extra": 1}, {"hub_id": "o/m", "revision": "main"}):
        data["base_identity"] = bad
        (tmp_path / "sweep.json").write_text(json.dumps(data))
        with pytest.raises(InputError, match="base_identity: must be .*; the file was edited: re-run the sweep"):
            read_sweep(tmp_path)


def test_the_lock_records_the_sweep_s_base(tmp_path: Path) -> None:
    data = valid_sweep()
    (tmp_path / "sweep.json").write_text(json.dumps(data))
    assert read_sweep(tmp_path).lock_entry()["base_identity"] == data["base_identity"]


def test_the_committed_searches_name_their_gguf() -> None:
    root = Path(__file__).resolve().parents[2] / "docs" / "data"
    for name, sha in [
        ("search-smollm2", "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"),
        ("search-gemma3", "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"),
    ]:
        assert json.loads((root / name / "sweep.json").read_text())["base_identity"] == {"gguf_sha256": sha}
    assert read_sweep(root / "search-smollm2").base_identity["gguf_sha256"].startswith("b179c952")


# the CLI, on the tiny llama of the CLI tests' workspace


@pytest.fixture
def released(tmp_path: Path) -> tuple[Path, Path]:
    """``(recipe.yaml, sweep folder)``: a confirmed sweep of the workspace's recipe, measured on its base."""
    recipe_path = write_workspace(tmp_path)
    recipe = load_recipe(str(recipe_path))
    data = {**valid_sweep(), "recipe": recipe.public_dict(), "base_identity": base_identity(recipe.base)}
    (tmp_path / "sw").mkdir()
    (tmp_path / "sw" / "sweep.json").write_text(json.dumps(data))
    return recipe_path, tmp_path / "sw"


def _release(
    recipe: Path, sweep: Path, *sets: str, out: Path | None = None, overwrite: bool = False
) -> tuple[int, str]:
    args = ["run", str(recipe), "--from-sweep", str(sweep), *[a for s in sets for a in ("--set", s)]]
    args += ["--out", str(out), "-q"] if out is not None else ["--dry-run"]
    args += ["--overwrite"] if overwrite else []
    result = CliRunner().invoke(main, args)
    return result.exit_code, result.output


def _error_line(text: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in text, text
    return lines[0]


def test_a_release_on_another_base_is_refused_naming_both_models(released, tmp_path: Path) -> None:
    recipe, sweep = released
    other = save_tiny(tmp_path / "other", "llama", seed=1)  # the same architecture, other weights
    out = tmp_path / "release"
    code, text = _release(recipe, sweep, f"base.model={other}", out=out)
    assert code == 2 and not out.exists(), text
    line = _error_line(text)
    mine, theirs = (
        base_identity(load_recipe(str(recipe), [f"base.model={other}"]).base),
        json.loads((sweep / "sweep.json").read_text())["base_identity"],
    )
    assert f"the recipe's base.model ('{other}': safetensors " in line and "is not the model the sweep measured" in line
    assert all(sha in line for sha in [*mine["weights_sha256"].values(), *theirs["weights_sha256"].values()])


def test_the_same_base_in_another_folder_is_accepted(released, tmp_path: Path) -> None:
    recipe, sweep = released
    copy = shutil.copytree(tmp_path / "base", tmp_path / "elsewhere" / "base")
    code, text = _release(recipe, sweep, f"base.model={copy}")
    assert code == 0, text
    code, text = _release(recipe, sweep)
    assert code == 0, text


@pytest.mark.parametrize(
    "change",
    ["mask.reference=official", "calibration.max_length=32", "calibration.batch_size=2", "targets.include=[mlp]"],
)
def test_a_release_with_a_deciding_key_changed_is_refused_naming_it(released, change: str) -> None:
    recipe, sweep = released
    code, text = _release(recipe, sweep, change)
    assert code == 2, text
    key, value = change.split("=")
    assert f"--from-sweep: the recipe's {key} differs from the sweep's (" in _error_line(text)


def test_recipe_from_sweep_checks_the_base_it_is_given(released) -> None:
    recipe, sweep = released
    ev = read_sweep(sweep)
    with pytest.raises(InputError, match="is not the model the sweep measured"):
        recipe_from_sweep(load_recipe(str(recipe)), ev, base=B)
    assert recipe_from_sweep(load_recipe(str(recipe)), ev, base=ev.base_identity).edit.scale == 1.1


def test_a_hub_base_is_its_id_and_commit_read_from_config_json_alone(fake_hub, tmp_path: Path) -> None:  # noqa: F811
    """A Hub base's identity is its id and the commit its revision resolves to; finding it downloads config.json
    only (``run --from-sweep --dry-run`` on an 8B base fetched no weights)."""
    from mathneuro_edit.recipe.input_sections import BaseConfig

    folder = save_tiny(tmp_path / "tiny", "llama")
    repo = fake_hub.create("org/tiny")
    commit = fake_hub._commit(repo, "main", {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()})
    assert base_identity(BaseConfig(model="org/tiny")) == {"hub_id": "org/tiny", "revision": commit}
    fetched = [r["path"] for r in fake_hub.requests if r["method"] == "GET" and "/resolve/" in r["path"]]
    assert fetched and all(p.endswith("/config.json") for p in fetched), fetched
    older = commit
    fake_hub._commit(repo, "main", {**repo.refs["main"], "notes.txt": b"a newer commit"})
    assert base_identity(BaseConfig(model="org/tiny", revision=older))["revision"] == older
    assert base_identity(BaseConfig(model="org/tiny"))["revision"] != older


# the mask (issue 46 item 1's last gap): the keys and the base are compared before the model loads, but not the
# contents of local data files nor a device's ties near a threshold; the mask the release computes is compared with
# the one the confirmation tested, and another one is refused before any output exists


def test_a_mask_the_confirmation_did_not_test_is_refused_with_both_sha256_whole() -> None:
    assert mask_refusal("a" * 64, "a" * 64) is None
    assert mask_refusal("a" * 64, None) is None and mask_refusal("a" * 64, "") is None  # the sweep recorded none
    line = mask_refusal("b" * 64, "a" * 64)
    assert line is not None and "\n" not in line
    assert (
        f"this run's mask (sha256 {'b' * 64}) is not the mask the sweep's confirmation tested (sha256 {'a' * 64})"
        in line
    )
    for words in (
        "local data files with other contents",
        "another device's float ties",
        "re-run the sweep",
        "without --from-sweep",
    ):
        assert words in line, words


def test_a_data_file_of_the_same_name_with_other_contents_is_refused_and_nothing_is_written(
    released, tmp_path: Path
) -> None:
    recipe, sweep = released
    data = json.loads((sweep / "sweep.json").read_text())
    confirmed = release_mask_sha256(load_recipe(str(recipe)))  # the mask the sweep's data gives
    data["confirmation"]["mask_sha256"] = confirmed
    (sweep / "sweep.json").write_text(json.dumps(data))
    math = tmp_path / "math.jsonl"  # the recipe's local math file: compared by name before the model loads
    original = math.read_text()
    math.write_text("".join(json.dumps(p) + "\n" for p in arithmetic_problems(12, offset=40)))
    out = tmp_path / "release"
    out.mkdir()
    (out / "kept.txt").write_text("an earlier release")
    code, text = _release(recipe, sweep, out=out, overwrite=True)
    assert code == 2, text
    line = _error_line(text)
    found = re.search(
        r"this run's mask \(sha256 ([0-9a-f]{64})\) is not the mask the sweep's confirmation tested", line
    )
    assert found and found.group(1) != confirmed and f"tested (sha256 {confirmed})" in line, line
    assert "local data files with other contents" in line and "without --from-sweep" in line
    assert sorted(p.name for p in out.iterdir()) == ["kept.txt"]  # the earlier folder as it was
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".release")]  # no temporary folder left
    math.write_text(original)  # the sweep's data again: the mask the confirmation tested, released
    code, text = _release(recipe, sweep, out=out, overwrite=True)
    assert code == 0, text
    lock = yaml.safe_load((out / "mathneuro_recipe.lock.yaml").read_text())
    assert lock["mask_sha256"] == confirmed and lock["sweep"]["mask_matches_confirmation"] is True
