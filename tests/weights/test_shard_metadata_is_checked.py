"""A base shard's ``__metadata__`` is data from another team: the safetensors format allows only an object of
strings there, and the export copies it into its own shards. A number, an object or a list is one line (exit 2)
naming the file, and nothing is written (it was once exported with exit 0 into a file no reader opens).
docs/reliability.md lists what each test promises."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from tests.test_reliability import _cli, _error_line
from tests.test_untrusted_inputs import _rewrite_header


@pytest.mark.parametrize(
    "meta,phrase",
    [
        ({"format": 1}, "__metadata__ 'format' is a JSON number, not a string"),
        ({"format": "pt", "note": {"a": "b"}}, "__metadata__ 'note' is a JSON object, not a string"),
        ({"format": "pt", "flag": True}, "__metadata__ 'flag' is a JSON boolean, not a string"),
        (["format", "pt"], "__metadata__ is a JSON array, not an object of strings"),
        ("pt", "__metadata__ is a JSON string, not an object of strings"),
    ],
)
@pytest.mark.parametrize("cmd", ["export", "calibrate"])
def test_a_shard_whose_metadata_is_not_strings_is_one_line_and_nothing_is_written(
    ws: Path, tmp_path: Path, meta, phrase: str, cmd: str
) -> None:
    base = tmp_path / "base"
    shutil.copytree(ws / "base", base)
    _rewrite_header(base / "model.safetensors", lambda h: h.__setitem__("__metadata__", meta))
    r = yaml.safe_load((ws / "recipe.yaml").read_text())
    r["base"]["model"] = str(base)
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump(r))
    args = (
        ["export", recipe, "--mask", ws / "mask.safetensors", "--out", tmp_path / "o"]
        if cmd == "export"
        else ["calibrate", recipe, "--out", tmp_path / "o"]
    )
    code, text = _cli(*args, "-q")
    assert code == 2, text
    line = _error_line(text)
    assert f"{base / 'model.safetensors'}: {phrase}" in line, line
    assert not (tmp_path / "o").exists()


def test_a_header_that_is_not_a_json_object_is_one_line(ws: Path, tmp_path: Path) -> None:
    base = tmp_path / "base"
    shutil.copytree(ws / "base", base)
    f = base / "model.safetensors"
    body = json.dumps([1, 2]).encode().ljust(8)
    f.write_bytes(len(body).to_bytes(8, "little") + body)
    r = yaml.safe_load((ws / "recipe.yaml").read_text())
    r["base"]["model"] = str(base)
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(r))
    code, text = _cli("export", tmp_path / "r.yaml", "--mask", ws / "mask.safetensors", "--out", tmp_path / "o", "-q")
    assert code == 2 and "the safetensors header is a JSON array, not an object of tensors" in _error_line(text), text
    assert not (tmp_path / "o").exists()


def test_string_metadata_is_carried_into_the_exported_shards(ws: Path, tmp_path: Path) -> None:
    from safetensors import safe_open

    base = tmp_path / "base"
    shutil.copytree(ws / "base", base)
    _rewrite_header(base / "model.safetensors", lambda h: h.__setitem__("__metadata__", {"format": "pt", "note": "x"}))
    r = yaml.safe_load((ws / "recipe.yaml").read_text())
    r["base"]["model"] = str(base)
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(r))
    code, text = _cli("export", tmp_path / "r.yaml", "--mask", ws / "mask.safetensors", "--out", tmp_path / "o", "-q")
    assert code == 0, text
    (shard,) = (tmp_path / "o").glob("*.safetensors")
    with safe_open(str(shard), framework="pt") as f:
        assert f.metadata()["note"] == "x"
