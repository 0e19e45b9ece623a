"""Recipe validation: every bad input is reported, all at once, with its dotted path; YAML, overrides, hashing."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
import yaml

from mathneuro_edit.errors import InputError
from mathneuro_edit.recipe.edit_sections import EditConfig
from mathneuro_edit.recipe.io import (
    load_recipe,
    quickstart_recipe,
    recipe_fields,
    recipe_from_dict,
)
from mathneuro_edit.recipe.schema import Recipe, recipe_sha256

ROOT = Path(__file__).resolve().parents[2]
MINIMAL = {
    "base": {"model": "organism"},
    "data": {"math": "organism:math", "general": "organism:general"},
    "edit": {"scale": 1.1},
}


def _problems(data: dict, overrides: tuple[str, ...] = ()) -> str:
    with pytest.raises(InputError) as info:
        recipe_from_dict(data, overrides, where="recipe.yaml")
    return str(info.value)


def _with(path: str, value: object) -> dict:
    """MINIMAL with one dotted key set (creating sections as needed)."""
    data = copy.deepcopy(MINIMAL)
    node = data
    *parents, last = path.split(".")
    for p in parents:
        node = node.setdefault(p, {})
    node[last] = value
    return data


def test_shipped_recipes_are_valid_and_quickstart_matches_code() -> None:
    assert load_recipe(ROOT / "recipes" / "quickstart.yaml") == quickstart_recipe()
    prune = load_recipe(ROOT / "recipes" / "organism-prune.yaml")
    assert prune.edit.prune and prune.edit.effective_scale == 0.0 and prune.mask.top_k == 0.05
    llama = load_recipe(ROOT / "recipes" / "llama-3.2-1b-gsm8k-boost.yaml")
    assert llama.base.model == "meta-llama/Llama-3.2-1B-Instruct" and llama.edit.effective_scale == 1.1
    assert (llama.data.math.hub_id, llama.data.math.config, llama.data.math.split) == ("openai/gsm8k", "main", "train")
    assert llama.hub is None  # the hub section ships commented out


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        ("edit.scale", float("nan"), "edit.scale: must be a finite number >= 0 (got nan)"),
        ("edit.scale", float("inf"), "edit.scale: must be a finite number >= 0 (got inf)"),
        ("edit.scale", -0.5, "edit.scale: must be a finite number >= 0 (got -0.5)"),
        ("edit.scale", "big", "edit.scale: input should be a valid number"),
        ("mask.top_k", 1.5, "mask.top_k: must be in (0, 1] (got 1.5), did you mean 0.015?"),
        ("mask.top_k", 150, "mask.top_k: must be in (0, 1] (got 150.0)"),  # not a percent either: no guess
        ("mask.top_k", 0, "mask.top_k: must be in (0, 1] (got 0.0)"),
        ("mask.method", "magnitude", "mask.method: input should be 'mathneuro', 'wanda' or 'random'"),
        ("mask.granularity", "column", "mask.granularity: input should be 'matrix' or 'row'"),
        ("base.dtype", "fp8", "base.dtype: input should be 'float32', 'bfloat16', 'float16' or 'auto'"),
        ("base.device", "gpu", "base.device: must be cpu, cuda, cuda:N, mps or auto (got 'gpu')"),
        ("data.samples", 0, "data.samples: must be an integer >= 1 (got 0)"),
        ("data.samples", 2.5, "data.samples: input should be a valid integer"),
        ("data.general", [], "data.general: must list at least one source (got [])"),
        ("calibration.max_length", -1, "calibration.max_length: must be an integer >= 1 (got -1)"),
        ("targets.include", ["(unclosed"], "targets.include.0: not a valid regular expression"),
        ("targets.exclude", ["ok", "[bad"], "targets.exclude.1: not a valid regular expression"),
        ("outputs.max_shard_size", "2 gigs", 'outputs.max_shard_size: must be a size such as "2GB"'),
        ("outputs.checkpoint", False, "outputs: at least one of checkpoint or adapter must be true"),
        ("hub.repo_id", "not a repo", "hub.repo_id: must be a Hub repo id like user/name"),
        (
            "data.math",
            {"path": "organism:algebra"},
            "data.math: organism sources are organism:math or organism:general",
        ),
        (
            "data.math",
            {"path": "x.jsonl", "field": "q", "template": "{q}"},
            "data.math: set field or template, not both",
        ),
        ("data.math", {"path": "x.jsonl", "template": "{"}, "data.math: template is not a valid format string"),
        ("data.math", {"path": "x.jsonl", "template": "no field"}, "data.math: template names no field"),
        ("data.math", {"path": "x.jsonl", "split": "train"}, "data.math: split does not apply to a local source"),
        (
            "data.math",
            {"path": "hf://datasets/a/b", "format": "csv"},
            "data.math: format does not apply to a hub source",
        ),
        ("data.math", {"path": "hf://gsm8k"}, "data.math: Hub sources look like hf://datasets/OWNER/NAME"),
        ("data.math", {"path": "organism:math", "split": "dev"}, "data.math: organism split must be train or test"),
        ("base.device_map", "auto", None),  # valid alone: checked below with device
    ],
)
def test_each_bad_value_is_reported_with_its_path(path: str, value: object, expected: str | None) -> None:
    data = _with(path, value)
    if expected is None:  # valid: the value is kept as given
        node = recipe_from_dict(data)
        for part in path.split("."):
            node = getattr(node, part)
        assert node == value
        return
    message = _problems(data)
    assert message.startswith("recipe.yaml: 1 problem: "), message
    assert expected in message, message


def test_all_problems_are_listed_at_once() -> None:
    data = _with("edit.scale", float("nan"))
    data["mask"] = {"top_k": 1.5, "granularity": "col"}
    data["base"]["revison"] = "main"
    data["data"]["general"] = {"path": "organism:general", "colour": "red"}
    data["evaluation"] = {"math": "organism:math"}
    message = _problems(data)
    assert message.startswith("recipe.yaml: 6 problems: "), message
    for part in [
        "edit.scale: must be a finite number >= 0 (got nan)",
        "mask.top_k: must be in (0, 1] (got 1.5)",
        "mask.granularity: input should be 'matrix' or 'row'",
        "base.revison: unknown key, did you mean 'revision'?",
        "data.general.0.colour: unknown key",
        "evaluation.general: required key is missing",
    ]:
        assert part in message, (part, message)
    assert "\n" not in message


def test_unknown_keys_name_their_path_and_the_allowed_keys() -> None:
    message = _problems({**MINIMAL, "output": {"checkpoint": True}})
    assert "output: unknown key, did you mean 'outputs'?" in message
    assert "(allowed: base calibration consistency data edit evaluation hub mask outputs sweep targets)" in message
    message = _problems(_with("data.math", {"path": "a.jsonl", "feild": "x"}))
    assert "data.math.feild: unknown key, did you mean 'field'?" in message


def test_missing_required_sections() -> None:
    message = _problems({"base": {}})
    for part in [
        "base.model: required key is missing",
        "data: required key is missing",
        "edit: required key is missing",
    ]:
        assert part in message


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        ({}, "edit: set exactly one of scale (a number >= 0) or prune: true (got neither)"),
        ({"scale": 1.1, "prune": True}, "edit: set exactly one of scale (a number >= 0) or prune: true (got both)"),
    ],
)
def test_edit_needs_exactly_one_of_scale_or_prune(edit: dict, expected: str) -> None:
    assert expected in _problems({**MINIMAL, "edit": edit})


def test_effective_scale() -> None:
    assert EditConfig(scale=1.1).effective_scale == 1.1
    assert EditConfig(scale=0).effective_scale == 0.0
    assert EditConfig(prune=True).effective_scale == 0.0


def test_device_and_device_map_conflict() -> None:
    message = _problems(_with("base", {"model": "m", "device": "cpu", "device_map": "auto", "max_memory": {0: "1GB"}}))
    assert "base: set device or device_map, not both (got device='cpu')" in message
    message = _problems(_with("base", {"model": "m", "offload_folder": "off"}))
    assert "max_memory and offload_folder need device_map" in message


def test_file_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"missing\.yaml: recipe file not found"):
        load_recipe(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("base:\n  model: [organism\n")
    with pytest.raises(InputError, match=r"bad\.yaml: invalid YAML at line 3, column 1"):
        load_recipe(bad)
    dup = tmp_path / "dup.yaml"
    dup.write_text("edit:\n  scale: 1.1\nedit:\n  prune: true\n")
    with pytest.raises(InputError, match=r"dup\.yaml: invalid YAML at line 3, column 1: duplicate key 'edit'"):
        load_recipe(dup)
    empty = tmp_path / "empty.yaml"
    empty.write_text("# only a comment\n")
    with pytest.raises(InputError, match="the recipe is empty"):
        load_recipe(empty)
    listed = tmp_path / "list.yaml"
    listed.write_text("- base\n")
    with pytest.raises(InputError, match="must be a mapping of sections"):
        load_recipe(listed)
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(InputError, match="cannot read the recipe"):
        load_recipe(binary)


def test_validation_errors_from_a_file_name_the_file(tmp_path: Path) -> None:
    p = tmp_path / "recipe.yaml"
    p.write_text(yaml.safe_dump({**MINIMAL, "edit": {"scale": float("nan")}, "mask": {"top_k": 1.5}}))
    with pytest.raises(InputError) as info:
        load_recipe(p)
    assert str(info.value) == (
        f"{p}: 2 problems: mask.top_k: must be in (0, 1] (got 1.5), did you mean 0.015?; "
        "edit.scale: must be a finite number >= 0 (got nan)"
    )


def test_overrides_are_yaml_scalars_and_reach_nested_keys(tmp_path: Path) -> None:
    p = tmp_path / "r.yaml"
    p.write_text(yaml.safe_dump(MINIMAL))
    r = load_recipe(
        p,
        [
            "edit.scale=1.2",
            "outputs.adapter=true",
            "targets.exclude=[lm_head, 'embed.*']",
            "data.math.split=test",
            "data.general.0.split=test",
            "base.revision=1234",
            "hub.repo_id=me/x",
            "base.max_memory={0: 20GiB, cpu: 60GiB}",
            "base.device_map=auto",
        ],
    )
    assert r.edit.scale == 1.2 and r.outputs.adapter is True
    assert r.targets.exclude == ["lm_head", "embed.*"]
    assert r.data.math.split == "test" and r.data.general[0].split == "test"
    assert r.base.revision == "1234"  # YAML reads it as an int; recipes keep strings
    assert r.hub is not None and r.hub.repo_id == "me/x"
    assert r.base.max_memory == {0: "20GiB", "cpu": "60GiB"}


def test_override_errors() -> None:
    with pytest.raises(InputError, match="override 'edit.scale' is not key.path=value"):
        recipe_from_dict(MINIMAL, ["edit.scale"])
    with pytest.raises(InputError, match=r"data\.general\.3 is not an item of the list"):
        recipe_from_dict(MINIMAL, ["data.general.3.split=test"])
    message = _problems(MINIMAL, ("mask.topk=0.1",))
    assert "mask.topk: unknown key, did you mean 'top_k'?" in message


def test_input_is_never_modified() -> None:
    data = copy.deepcopy(MINIMAL)
    recipe_from_dict(data, ["data.math.split=test", "edit.scale=2"])
    assert data == MINIMAL


def test_resolved_dict_makes_every_default_explicit_and_round_trips() -> None:
    r = recipe_from_dict(
        {
            **MINIMAL,
            "hub": {"repo_id": "me/x"},
            "evaluation": {
                "math": "organism:math",
                "general": "organism:general",
                "lm_eval": {"tasks": ["arithmetic_local"]},
            },
        }
    )
    resolved = r.resolved_dict()

    def keys(d: dict, prefix: str = "") -> set[str]:  # sources ("math") are leaves, like in recipe_fields()
        out = set()
        for k, v in d.items():
            out |= keys(v, f"{prefix}{k}.") if isinstance(v, dict) and k != "math" else {prefix + k}
        return out

    # a list of sections (sweep.variants) is one value of the resolved recipe, and its item keys in the docs
    lists = ("sweep.variants", "sweep.confirmation_formats")
    listed = {next((x for x in lists if k.startswith(x + ".")), k) for k, *_ in recipe_fields()}
    assert keys(resolved) == {k for k in listed if not k.startswith("source.")}
    assert resolved["mask"] == {
        "method": "mathneuro",
        "top_k": 0.05,
        "granularity": "matrix",
        "seed": 0,
        "reference": None,
    }
    assert resolved["data"]["general"] == [
        {
            "path": "organism:general",
            "field": None,
            "template": None,
            "config": None,
            "split": None,
            "revision": None,
            "format": None,
            "hub_dataset": None,
        }
    ]
    assert resolved["evaluation"]["max_new_tokens"] == 256 and resolved["hub"]["private"] is False
    assert recipe_from_dict(yaml.safe_load(r.to_yaml())) == r
    assert recipe_from_dict(json.loads(json.dumps(resolved))) == r


def test_recipe_sha256_is_canonical_and_sensitive() -> None:
    a = recipe_from_dict(MINIMAL)
    reordered = {"edit": MINIMAL["edit"], "data": MINIMAL["data"], "base": MINIMAL["base"]}
    assert recipe_sha256(a) == recipe_sha256(recipe_from_dict(reordered))
    assert recipe_sha256(a) == recipe_sha256(recipe_from_dict(a.resolved_dict()))  # defaults explicit or not
    assert recipe_sha256(a) != recipe_sha256(recipe_from_dict(MINIMAL, ["edit.scale=1.2"]))
    assert re.fullmatch(r"[0-9a-f]{64}", recipe_sha256(a))


def test_public_dict_redacts_local_paths(tmp_path: Path) -> None:
    model = tmp_path / "secret-user" / "my-model"
    model.mkdir(parents=True)
    data = tmp_path / "secret-user" / "train.jsonl"
    base = {"model": str(model), "device_map": "auto", "offload_folder": str(tmp_path)}
    r = recipe_from_dict(
        {**MINIMAL, "base": base, "data": {"math": str(data), "general": ["organism:general", "hf://datasets/a/b"]}}
    )
    public = r.public_dict()
    assert public["base"]["model"] == "<local>" and public["base"]["offload_folder"] == "<local>"
    assert public["data"]["math"]["path"] == "<local>/train.jsonl"
    assert [g["path"] for g in public["data"]["general"]] == ["organism:general", "hf://datasets/a/b"]
    assert "secret-user" not in json.dumps(public)
    assert r.resolved_dict()["base"]["model"] == str(model)  # the user's own view keeps the path
    other = tmp_path / "elsewhere"
    other.mkdir()
    moved = recipe_from_dict(r.resolved_dict(), [f"base.model={other}"])
    assert recipe_sha256(moved) == recipe_sha256(r)  # the hash does not depend on where files live
    assert r.base.local_dir() == model
    assert recipe_from_dict(MINIMAL, ["base.model=meta-llama/Llama-3.2-1B"]).base.local_dir() is None


def test_docs_document_every_key_with_its_default() -> None:
    doc = (ROOT / "docs" / "recipes.md").read_text()
    for key, _type, default, _ in recipe_fields():
        shown = "required" if default == "(required)" else f"`{json.dumps(default)}`"
        row = re.search(rf"^\| `{re.escape(key)}` \|[^\n]*\| {re.escape(shown)} \|", doc, re.MULTILINE)
        assert row, f"docs/recipes.md has no row for {key} with default {shown}"


def test_model_is_the_single_schema() -> None:
    assert Recipe.model_config["extra"] == "forbid"
    for _, info in Recipe.model_fields.items():
        sub = info.annotation
        model = next((a for a in getattr(sub, "__args__", (sub,)) if isinstance(a, type)), None)
        if model is not None and hasattr(model, "model_config"):
            assert model.model_config["extra"] == "forbid"


def test_recipe_io_imports_first():
    """Regression: ``from mathneuro_edit.recipe.io import load_recipe`` in a fresh interpreter failed (circular import)."""
    import subprocess
    import sys

    # (recipe/schema.py does not re-export them: the dependency is one-way, recipe_io -> recipe; tests/cli/test_messages.py)
    for stmt in (
        "from mathneuro_edit.recipe.io import load_recipe",
        "import mathneuro_edit.recipe.schema",
        "from mathneuro_edit.recipe.lm_eval_keys import LmEvalConfig",
    ):
        proc = subprocess.run([sys.executable, "-c", stmt], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr[-2000:]


def test_recipe_pieces_never_import_recipe() -> None:
    """recipe/schema.py assembles recipe/types.py and recipe/lm_eval_keys.py; they never import it back."""
    import ast

    for name in ("types", "lm_eval_keys"):
        tree = ast.parse((ROOT / "mathneuro_edit" / "recipe" / f"{name}.py").read_text())
        imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
        assert not imported & {"schema", "io", "mathneuro_edit.recipe.schema", "mathneuro_edit.recipe.io"}, name
