"""Long steps speak in a log too: when stderr is not a terminal (no bars there), a command prints a line at least
every 30 s while a stage runs (``MATHNEURO_EDIT_PROGRESS_EVERY`` seconds; 0: none), and none under ``--quiet``."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from mathneuro_edit.cli.main import main
from mathneuro_edit.errors import InputError
from mathneuro_edit.util.console import PROGRESS_ENV, Stages, progress_every, progress_lines

SMALL = ["--set", "data.samples=8", "--set", "evaluation.samples=4", "--set", "evaluation.max_new_tokens=24"]


@pytest.mark.parametrize(
    "value,quiet,every", [(None, False, 30.0), ("5", False, 5.0), ("0", False, None), ("5", True, None)]
)
def test_progress_every_reads_the_variable_off_a_terminal(monkeypatch, value, quiet, every) -> None:
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False)
    if value is None:
        monkeypatch.delenv(PROGRESS_ENV, raising=False)
    else:
        monkeypatch.setenv(PROGRESS_ENV, value)
    assert progress_every(quiet) == every


def test_progress_every_is_none_on_a_terminal_and_refuses_a_bad_value(monkeypatch) -> None:
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert progress_every(False) is None
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False)
    for bad in ("soon", "-1", "nan", "inf"):
        monkeypatch.setenv(PROGRESS_ENV, bad)
        with pytest.raises(InputError, match=f"{PROGRESS_ENV}='{bad}': a number of seconds >= 0"):
            progress_every(False)


def test_a_running_stage_says_so_until_the_next_starts_and_the_block_ends() -> None:
    lines: list[str] = []
    stages = Stages(2, lines.append)
    with progress_lines(0.05):
        stages.start("calibrate")
        time.sleep(0.3)
        stages.start("mask")
        at_mask = len(lines)
        time.sleep(0.3)
    ended = len(lines)
    time.sleep(0.2)
    calibrate = [x for x in lines if x.startswith("      ... [1/2] calibrate: ")]
    assert len(calibrate) >= 2 and all(x.endswith(" s so far") for x in calibrate), lines
    assert lines.index("[2/2] mask") == at_mask - 1 and not any("calibrate" in x for x in lines[at_mask:])
    assert any(x.startswith("      ... [2/2] mask: ") for x in lines[at_mask:])
    assert len(lines) == ended  # after the block: silent
    without: list[str] = []
    Stages(1, without.append).start("calibrate")  # outside the block (a Python caller): stage lines only
    time.sleep(0.2)
    assert without == ["[1/1] calibrate"]


def test_run_off_a_terminal_prints_progress_lines(monkeypatch, tmp_path: Path) -> None:
    import mathneuro_edit.runs.pipeline as pipeline

    calibrate = pipeline.calibrate_step

    def slow_calibrate(run):  # one stage surely longer than the interval: a warm organism run is faster than it
        time.sleep(0.5)
        return calibrate(run)

    monkeypatch.setattr(pipeline, "calibrate_step", slow_calibrate)
    monkeypatch.setenv(PROGRESS_ENV, "0.2")
    result = CliRunner().invoke(main, ["run", *SMALL, "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    ticks = [
        x for x in result.stderr.splitlines() if re.fullmatch(r"      \.\.\. \[\d/\d\] .+: (\d+ min )?\d+ s so far", x)
    ]
    assert ticks, result.stderr
    quiet = CliRunner().invoke(main, ["run", *SMALL, "-q", "--out", str(tmp_path / "quiet")])
    assert quiet.exit_code == 0 and quiet.stderr == "", quiet.stderr
