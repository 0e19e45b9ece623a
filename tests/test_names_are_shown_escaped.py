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


def test_a_library_warning_quoting_a_hostile_name_is_shown_escaped(tmp_path: Path) -> None:
    """Issue 48: matplotlib warns "Glyph 27 (\\x1b) missing from font(s)" for a tensor name's ESC, and the
    warning reached the terminal raw. Every warning and log record a library prints during a command is escaped
    as our own lines are (``util/console.py::library_output_safe``). In a fresh process (Python's own warning
    printer, the logging module's own stderr handler), with a stand-in for matplotlib (optional here) that warns
    and logs as it does."""
    import subprocess
    import sys
    import textwrap

    path = Mask({"w": torch.eye(4, dtype=torch.bool)}, {"method": "mathneuro"}).save(tmp_path / "m.safetensors")
    script = textwrap.dedent(
        """
        import logging, sys, warnings
        from pathlib import Path
        import mathneuro_edit.runs.inspect as inspect_module
        from mathneuro_edit.cli.main import main

        EVIL = sys.argv[3]

        def plot(mask, path, **kwargs):
            warnings.warn(f"Glyph 27 ({EVIL}) missing from font(s) DejaVu Sans.", UserWarning, stacklevel=1)
            logging.getLogger("matplotlib.font_manager").warning("findfont: %s", EVIL)
            Path(path).write_bytes(b"png")
            return Path(path)

        inspect_module.plot_layer_distribution = plot
        main(["inspect", sys.argv[1], "--plot", sys.argv[2]])
        """
    )
    proc = subprocess.run(
        [sys.executable, "-W", "always", "-c", script, str(path), str(tmp_path / "p.png"), EVIL],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Glyph 27" in proc.stderr and "findfont: " in proc.stderr, proc.stderr  # shown, escaped
    _clean(proc.stderr)
