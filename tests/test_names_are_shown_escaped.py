"""Names that come from files or a Hub repo are shown escaped on the terminal: an ESC sequence never reaches it raw
and a newline in a name never forges a line of its own (``error: ...``). Issue 41, still open from round 3: Hub
repo file names (``push --dry-run``'s deletes, ``reproduce``'s file check), run-folder file names (``verify``) and
mask / statistics names (``inspect``) were printed raw. One rule: :func:`mathneuro_edit.util.console.terminal_safe`
on every name where a report is composed."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import torch
from click.testing import CliRunner

from mathneuro_edit.cli.main import main
from mathneuro_edit.engine.mask import Mask
from mathneuro_edit.publish.hub import PushResult
from mathneuro_edit.publish.integrity import FileCheck
from mathneuro_edit.runs.inspect import mask_table
from mathneuro_edit.weights.audit import VerifyReport
from tests._fakehub import fake_hub, out_dir  # noqa: F401 - the fixtures

EVIL = "w\x1b]0;pwned\x07\x1b[2J\u202eexe\nerror: forged line"
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f\u202a-\u202e\u2066-\u2069]")


def _clean(text: str) -> None:
    assert not RAW.search(text), repr(text)
    assert not any(line.startswith("error: forged") for line in text.splitlines()), text
    assert "\\x1b]0;pwned\\x07" in text and "\\u202e" in text and "\\x0aerror: forged line" in text, text


def test_every_report_composer_escapes_the_names_it_shows(tmp_path: Path) -> None:
    _clean(FileCheck("me/repo", {EVIL: "extra", "config.json": "match"}).to_text())
    report = VerifyReport(tmp_path, "checkpoint", mismatches=[f"{EVIL}: differs"], extra=[EVIL], missing=[EVIL])
    _clean(report.summary())
    push = PushResult("me/m", "main", None, [("config.json", 2)], "msg", {}, True, deletes=[(EVIL, 3)])
    _clean(push.describe())
    _clean(mask_table(Mask({EVIL: torch.ones(2, 3, dtype=torch.bool)}, {"method": EVIL})))


def test_inspect_of_a_mask_with_a_hostile_name(tmp_path: Path) -> None:
    path = Mask({EVIL: torch.eye(4, dtype=torch.bool)}, {"method": "mathneuro"}).save(tmp_path / "m.safetensors")
    result = CliRunner().invoke(main, ["inspect", str(path)])
    assert result.exit_code == 0, result.output
    _clean(result.output)


def test_verify_of_a_run_folder_with_a_hostile_file_name(ws: Path, tmp_path: Path) -> None:
    run = Path(shutil.copytree(ws / "run", tmp_path / "run"))
    (run / "checkpoint" / EVIL.replace("/", "_")).write_text("not an output")
    result = CliRunner().invoke(main, ["verify", str(run), "--base", str(ws / "base")])
    assert result.exit_code == 1, result.output
    _clean(result.output)


def test_push_dry_run_escapes_the_repo_s_file_names(fake_hub, out_dir: Path) -> None:  # noqa: F811 - fixtures
    repo = fake_hub.create("me/m")
    fake_hub._commit(repo, "main", {**repo.refs["main"], EVIL: b"left by someone with write access"})
    result = CliRunner().invoke(main, ["push", str(out_dir), "--repo-id", "me/m", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "delete" in result.output
    _clean(result.output)
