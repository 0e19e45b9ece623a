"""Bad input is one line and exit 2, whatever its form: sizes a config.json cannot mean, YAML 1.1 base-60 numbers, a
NUL in a path, an --out under a dangling link, a tokenizer.json that is not JSON, a Hub repo id that is a path,
a fractional sample count; escape and bidi characters are shown escaped; --json prints JSON even on an error;
MATHNEURO_EDIT_DEBUG=1 adds the traceback and keeps the status; an output folder may never contain an input,
however many files it holds. docs/reliability.md lists what each test promises."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import yaml
from click.testing import CliRunner

from mathneuro_edit.cli.main import main
from tests._models import hash_tree
from tests.test_reliability import _error_line
from tests.test_untrusted_inputs import _data_sets

QUICKSTART = Path(__file__).parent.parent / "recipes" / "quickstart.yaml"


def _cli(*args: object, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = CliRunner(env=env).invoke(main, [str(a) for a in args])
    return result.exit_code, result.stdout, result.output


# ------------------------------------------------------------------------------------------- recipe values


@pytest.mark.parametrize("value", ["1:30", "1:30:00", "-2:05"])
def test_a_yaml_base_60_number_is_not_read_as_an_integer(tmp_path: Path, value: str) -> None:
    code, _, text = _cli("plan", "--set", f"data.samples={value}")
    assert code == 2, text
    assert f"data.samples: input should be a valid integer (got '{value}')" in _error_line(text)
    recipe = yaml.safe_load(QUICKSTART.read_text())
    path = tmp_path / "r.yaml"
    path.write_text(QUICKSTART.read_text().replace("samples: 100", f"samples: {value}", 1))
    assert recipe["data"]["samples"] == 100 and f"samples: {value}" in path.read_text()
    code, _, text = _cli("plan", path)
    assert code == 2 and f"data.samples: input should be a valid integer (got '{value}')" in _error_line(text), text


def test_ordinary_yaml_numbers_still_read_as_numbers() -> None:
    from mathneuro_edit.recipe.safe_yaml import load_yaml

    assert load_yaml("{a: 12, b: 0x1f, c: 1_000, d: 1.5, e: 1.0e+5, f: .5, g: -3}", "r") == {
        "a": 12,
        "b": 31,
        "c": 1000,
        "d": 1.5,
        "e": 1.0e5,
        "f": 0.5,
        "g": -3,
    }


def test_a_nul_character_in_a_path_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "r.yaml"
    path.write_text(QUICKSTART.read_text().replace("path: organism:math", 'path: "/tmp/m\\0ath.txt"', 1))
    assert "\\0" in path.read_text()
    for args in (["plan", path], ["calibrate", path, "--out", tmp_path / "stats", "-q"]):
        code, _, text = _cli(*args)
        assert code == 2, text
        assert "data.math.path: '/tmp/m\\x00ath.txt' holds a NUL character" in _error_line(text), text
    assert not (tmp_path / "stats").exists()


@pytest.mark.parametrize("repo_id", ["../..", "me/..", "./x", "me/x/y", "-me/x", "me--x/y", "me/x.", "me/a..b"])
def test_a_hub_repo_id_that_is_a_path_is_refused_by_plan(repo_id: str) -> None:
    code, _, text = _cli("plan", "--set", f"hub.repo_id={repo_id}")
    assert code == 2, text
    assert "hub.repo_id: must be a Hub repo id like user/name" in _error_line(text), text


def test_a_plain_hub_repo_id_is_taken() -> None:
    for repo_id in ("me/organism-prune", "Org_1/Model.v2", "name"):
        code, _, text = _cli("plan", "--set", f"hub.repo_id={repo_id}")
        assert code == 0, text


@pytest.mark.parametrize("sizes", ["1.5", "0", "-2", "1,4.5"])
def test_consistency_sizes_are_whole_numbers_of_samples(tmp_path: Path, sizes: str) -> None:
    code, _, text = _cli("consistency", "--out", tmp_path / "c", "--sizes", sizes, "-q")
    assert code == 2, text
    assert "--sizes:" in _error_line(text) and "an integer >= 1" in _error_line(text)
    assert not (tmp_path / "c").exists()


# ------------------------------------------------------------------------------------------- what is printed


def test_escape_and_bidi_characters_are_shown_escaped_on_the_terminal(tmp_path: Path) -> None:
    code, _, text = _cli("plan", "--set", "base.model=./no\x1b]0;pwned\x07\x1b[2J\u202efdp.exe")
    assert code == 2, text
    line = _error_line(text)
    assert "\\x1b]0;pwned\\x07\\x1b[2J\\u202efdp.exe" in line, line
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    hostile = tmp_path / "notes\x1b[2J\u202etxt.exe"  # a path the message names as it is (not as a repr)
    hostile.write_text("x")
    code, _, text = _cli("calibrate", "--out", hostile / "stats", "-q")
    assert code == 2, text
    assert "notes\\x1b[2J\\u202etxt.exe is not a folder" in _error_line(text), text
    assert "\x1b" not in text and "\u202e" not in text


def test_json_commands_print_json_on_an_error_too(ws: Path, tmp_path: Path) -> None:
    code, stdout, text = _cli("plan", "--json", "--set", "data.samples=x")
    assert code == 2, text
    doc = json.loads(stdout)
    assert doc["ok"] is False and doc["exit_status"] == 2 and "data.samples" in doc["error"]
    run = tmp_path / "run"
    shutil.copytree(ws / "run", run)
    lock = yaml.safe_load((run / "mathneuro_recipe.lock.yaml").read_text())
    lock["recipe"]["edit"]["scale"] = 5.0  # edited, the hash kept: exit 1 before anything runs
    (run / "mathneuro_recipe.lock.yaml").write_text(yaml.safe_dump(lock, sort_keys=False))
    for args in (
        ["reproduce", run, "--base", ws / "base", "--json", *_data_sets(ws)],
        ["verify", run, "--base", ws / "base", "--json"],
    ):
        code, stdout, text = _cli(*args)
        assert code == 1, text
        doc = json.loads(stdout)  # one JSON document on stdout, nothing else
        assert doc["ok"] is False and doc["exit_status"] == 1 and "field recipe:" in doc["error"], doc


def test_debug_adds_the_traceback_and_keeps_the_exit_status() -> None:
    code, _, text = _cli("plan", "--set", "data.samples=x", env={"MATHNEURO_EDIT_DEBUG": "1"})
    assert code == 2, text
    assert "Traceback (most recent call last)" in text and "InputError" in text
    assert text.strip().splitlines()[-1].startswith("error: quickstart recipe: 1 problem: data.samples")


# ------------------------------------------------------------------------------------------- config.json sizes


@pytest.mark.parametrize(
    "key,value",
    [
        ("num_hidden_layers", 1e9),
        ("num_hidden_layers", 10**9),
        ("hidden_size", 2**40),
        ("vocab_size", -1),
        ("num_attention_heads", True),
    ],
)
def test_sizes_a_config_json_cannot_mean_are_one_line_in_plan_and_export(
    ws: Path, tmp_path: Path, key: str, value
) -> None:
    import time

    base = tmp_path / "base"
    shutil.copytree(ws / "base", base)
    cfg = json.loads((base / "config.json").read_text())
    cfg[key] = value
    (base / "config.json").write_text(json.dumps(cfg))
    before = hash_tree(base)
    start = time.monotonic()
    for args in (
        ["plan", ws / "recipe.yaml", "--set", f"base.model={base}"],
        [
            "export",
            ws / "recipe.yaml",
            "--set",
            f"base.model={base}",
            "--mask",
            ws / "mask.safetensors",
            "--out",
            tmp_path / "out",
            "--gguf",
            "F32",
        ],
    ):
        code, _, text = _cli(*args)
        assert code == 2, (args[0], text)
        line = _error_line(text)
        assert f"config.json: {key}: {repr(value)[:40]} is not a size a model has" in line, line
    assert time.monotonic() - start < 60
    assert not (tmp_path / "out").exists() and hash_tree(base) == before


# ------------------------------------------------------------------------------------------- outputs


def test_out_under_a_dangling_symlink_or_a_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    (tmp_path / "file").write_text("x")
    for parent, what in (("dangling", "a symbolic link to a missing folder"), ("file", "not a folder")):
        code, _, text = _cli("calibrate", "--out", tmp_path / parent / "stats", "-q")
        assert code == 2, text
        assert f"{tmp_path / parent} is {what}" in _error_line(text), text
    assert not (tmp_path / "nowhere").exists()


def test_an_output_folder_may_not_contain_an_input_however_many_files_it_holds(tmp_path: Path) -> None:
    """The rule is checked on paths, directly: with 20,001 files in the folder (more than the hard-link check
    looks at) the input deep inside is still found, and the message names the rule, not a hard link."""
    folder = tmp_path / "project"
    (folder / "recipes").mkdir(parents=True)
    for i in range(20_001):
        (folder / f"f{i:05d}.txt").touch()
    recipe = folder / "recipes" / "quickstart.yaml"
    shutil.copy(QUICKSTART, recipe)
    before = hash_tree(folder / "recipes")
    for args in (
        ["calibrate", recipe, "--out", folder, "-q"],
        ["run", recipe, "--out", folder, "--overwrite", "-q"],
        ["consistency", recipe, "--out", folder, "--overwrite", "--sizes", "1", "--repeats", "1", "-q"],
    ):
        code, _, text = _cli(*args)
        assert code == 2, (args[0], text)
        line = _error_line(text)
        assert (
            f"--out: {folder} overlaps the recipe {recipe}; the output may not be, contain or lie inside an "
            "input" in line
        ), line
    assert hash_tree(folder / "recipes") == before and len(list(folder.iterdir())) == 20_002


def test_a_tokenizer_json_that_is_not_json_is_one_line(ws: Path, tmp_path: Path) -> None:
    base = tmp_path / "base"
    shutil.copytree(ws / "base", base)
    (base / "tokenizer.json").write_text("{not json")
    code, _, text = _cli(
        "export",
        ws / "recipe.yaml",
        "--set",
        f"base.model={base}",
        "--mask",
        ws / "mask.safetensors",
        "--out",
        tmp_path / "out",
        "--gguf",
        "F32",
    )
    assert code == 2, text
    assert f"{base / 'tokenizer.json'}: not a readable tokenizer.json (JSONDecodeError" in _error_line(text), text
    assert not (tmp_path / "out").exists()


def test_an_output_folder_holding_a_hard_link_of_an_input_is_refused(ws: Path, tmp_path: Path) -> None:
    data = tmp_path / "math.txt"
    shutil.copy(ws / "math.txt", data)
    r = yaml.safe_load((ws / "recipe.yaml").read_text())
    r["data"]["math"]["path"] = str(data)
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(r))
    out = tmp_path / "o"
    (out / "sub").mkdir(parents=True)
    (out / "sub" / "copy.txt").hardlink_to(data)  # the old output folder holds the input's inode
    before = data.read_bytes()
    code, _, text = _cli(
        "export", tmp_path / "r.yaml", "--mask", ws / "mask.safetensors", "--out", out, "--overwrite", "-q"
    )
    assert code == 2, text
    assert f"--out: {out} is a hard link of a file of the" in _error_line(text), text
    assert data.read_bytes() == before and (out / "sub" / "copy.txt").exists()


@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
def test_a_data_file_nested_100000_deep_is_one_line(tmp_path: Path, suffix: str) -> None:
    """Issue 48, item 4: a ``.jsonl`` line (or a ``.json`` file) nested 100,000 deep ended in "internal error:
    RecursionError"; Python's parser stops near 1,000 levels."""
    from mathneuro_edit.data.sources import load_math_problems, load_texts
    from mathneuro_edit.errors import InputError

    path = tmp_path / f"math{suffix}"
    deep = "[" * 100_000 + "]" * 100_000
    path.write_text(json.dumps({"text": "1 + 1 = 2"}) + "\n" + deep + "\n" if suffix == ".jsonl" else deep)
    where = "line 2: nested too deep to be a record" if suffix == ".jsonl" else "nested too deep to be a list"
    for load in (load_texts, load_math_problems):
        with pytest.raises(InputError, match=rf"^{tmp_path}/math\{suffix}: {where}") as caught:
            load({"path": str(path)}, 1, 0)
        assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("key", "value", "said"),
    [
        ("calibration.batch_size", 10**18, "must be at most 65,536 (texts in one forward pass)"),
        ("calibration.max_length", 10**12, "must be at most 16,777,216 tokens"),
        ("evaluation.max_new_tokens", 10**12, "must be at most 16,777,216 tokens"),
    ],
)
def test_sizes_no_machine_runs_are_refused_by_plan(key: str, value: int, said: str) -> None:
    """Issue 48: `plan --set calibration.batch_size=10^18` estimated 180 billion TB with exit 0."""
    code, _, text = _cli("plan", "--set", f"{key}={value}")
    assert code == 2, text
    assert f"{key}: {said}" in _error_line(text), text
    code, _, text = _cli("plan", "--set", f"{key}={65536 if 'batch' in key else 16 << 20}")  # the bound itself
    assert code == 0, text


@pytest.mark.parametrize("pattern", [r"(.+)+z", r"(\w+\.?)*x", r"(a|b+)*c", r"((mlp)*)+"])
def test_a_catastrophic_targets_regex_is_refused_before_it_runs(pattern: str) -> None:
    """Issue 48: a repeat inside a repeat in the user's own `targets.include` backtracked for minutes over the
    model's parameter names; refused in one line by the recipe (plan) and by find_targets (the Python API)."""
    from mathneuro_edit.engine.targets import find_targets
    from mathneuro_edit.errors import InputError
    from mathneuro_edit.recipe.io import quickstart_recipe

    with pytest.raises(InputError, match=r"targets\.include\.0: a repeat inside a repeat"):  # before any search
        quickstart_recipe([f"targets.include={json.dumps([pattern])}"])
    for key in ("targets.include", "targets.exclude"):
        code, _, text = _cli("plan", "--set", f"{key}={json.dumps([pattern])}")
        assert code == 2, text
        assert f"{key}.0: a repeat inside a repeat, which can search for minutes" in _error_line(text), text
    model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    with pytest.raises(InputError, match=r"include: .*: a repeat inside a repeat"):
        find_targets(model, include=[pattern])


def test_plain_targets_regexes_are_taken() -> None:
    for pattern in (r"mlp\.(up|down)_proj", r"layers\.(1|2)\d*\.", r".*attn.*", r"(ab){2}x", r"(a{3})*"):
        code, _, text = _cli("plan", "--set", f"targets.exclude={json.dumps([pattern + 'z'])}")  # none excluded
        assert code == 0, text


def test_inspect_plot_onto_a_file_that_is_no_image_is_one_line(tmp_path: Path) -> None:
    """Issue 48: `inspect MASK --plot model.safetensors` printed the table, then "internal error: ValueError:
    Format 'safetensors' is not supported" (matplotlib's); refused before anything is printed or written."""
    from mathneuro_edit.engine.mask import Mask
    from mathneuro_edit.runs.inspect import figure_format

    mask = Mask({"model.layers.0.mlp.up_proj.weight": torch.eye(4, dtype=torch.bool)}, {"method": "mathneuro"})
    path = mask.save(tmp_path / "m.safetensors")
    shard = tmp_path / "model.safetensors"
    shard.write_bytes(b"weights")
    code, _, text = _cli("inspect", path, "--plot", shard)
    assert code == 2 and text.strip().splitlines() == [_error_line(text)], text
    assert ".safetensors is not an image format; name the figure with one of .png" in text, text
    assert shard.read_bytes() == b"weights"
    assert [figure_format(n) for n in ("a.png", "a.SVG", "a", "a.pdf")] == ["png", "svg", "png", "pdf"]
