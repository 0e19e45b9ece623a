"""A data file's name is text from the user's disk (or a shared recipe): a right-to-left override, a bidi isolate
or an ESC sequence in it is shown escaped everywhere the model card shows it (the data table, the reproduce
command, the recipe block, the model-index dataset name), never raw, so the card cannot read as another file
name than the one it is. docs/reliability.md lists what each test promises."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import yaml
from click.testing import CliRunner
from huggingface_hub import ModelCard

from mathneuro_edit.cli.main import main

RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def test_run_writes_a_card_that_shows_a_hostile_data_file_name_escaped(ws: Path, tmp_path: Path) -> None:
    math_name, general_name, eval_name = "math\u202etxt.exe.txt", "gen\u2066eral\u2069\x1b[31m.txt", "ev\u200fal.jsonl"
    shutil.copy(ws / "math.txt", tmp_path / math_name)
    shutil.copy(ws / "general.txt", tmp_path / general_name)
    shutil.copy(ws / "eval.jsonl", tmp_path / eval_name)
    r = yaml.safe_load((ws / "recipe.yaml").read_text())
    r["data"]["math"]["path"] = str(tmp_path / math_name)
    r["data"]["general"][0]["path"] = str(tmp_path / general_name)
    r["evaluation"]["math"]["path"] = str(tmp_path / eval_name)
    r["evaluation"]["general"][0]["path"] = str(tmp_path / general_name)
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(r))
    result = CliRunner().invoke(main, ["run", str(tmp_path / "r.yaml"), "--out", str(tmp_path / "o"), "-q"])
    assert result.exit_code == 0, result.output
    for kind in ("checkpoint", "adapter"):
        card = (tmp_path / "o" / kind / "README.md").read_text(encoding="utf-8")
        assert not RAW.search(card), (kind, sorted({hex(ord(c)) for c in RAW.findall(card)}))
        assert "math\\u202etxt.exe.txt" in card and "gen\\u2066eral\\u2069\\x1b[31m.txt" in card, card
        assert "ev\\u200fal.jsonl" in card
        data = ModelCard.load(tmp_path / "o" / kind / "README.md").data.to_dict()  # the metadata still parses
        names = [r["dataset"]["name"] for m in data["model-index"] for r in m["results"]]
        assert any(n.startswith("ev\\u200fal.jsonl (a local file") for n in names), names
