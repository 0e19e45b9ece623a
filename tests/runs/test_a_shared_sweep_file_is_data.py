"""`run --from-sweep` reads a sweep.json that may come from someone else: it is data. Its confirmation must hold (counts
that give p < alpha, problems that are not the selection's), every field the release takes must be of the right type
and range, the file must be a regular file of bounded size and depth, and none of its text is shown raw.

Each case runs `run --from-sweep SWEEP --dry-run` on the quickstart recipe (validation only: nothing runs).
docs/reliability.md lists what each test promises.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from mathneuro_edit.cli.main import main
from mathneuro_edit.errors import InputError
from mathneuro_edit.runs.sweep.evidence import read_sweep

from ._sweep_json import SEL, valid_sweep


def _from_sweep(sweep: Path, tmp_path: Path) -> tuple[int, str]:
    result = CliRunner().invoke(
        main, ["run", "--out", str(tmp_path / "release"), "--from-sweep", str(sweep), "--dry-run"]
    )
    assert not (tmp_path / "release").exists()
    return result.exit_code, result.output


def _error_line(text: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in text, text
    return lines[0]


def _write(tmp_path: Path, data: dict) -> Path:
    folder = tmp_path / "sweep"
    folder.mkdir(exist_ok=True)
    (folder / "sweep.json").write_text(json.dumps(data))
    return folder


def test_a_confirmed_sweep_is_taken(tmp_path: Path) -> None:
    code, text = _from_sweep(_write(tmp_path, valid_sweep()), tmp_path)
    assert code == 0, text


def test_run_from_sweep_refuses_confirmation_problems_that_overlap_the_selection(tmp_path: Path) -> None:
    data = valid_sweep()
    data["confirmation"]["problems_sha256"][3] = SEL[0]  # one confirmation problem also chose the setting
    code, text = _from_sweep(_write(tmp_path, data), tmp_path)
    assert code == 2, text
    line = _error_line(text)
    assert "its confirmation says confirmed, but its counts" in line and "or its problem lists do not" in line, line
    assert "the file was edited: re-run the sweep" in line


def _set(data: dict, path: str, value) -> None:
    keys = path.split(".")
    node = data
    for k in keys[:-1]:
        node = node[int(k)] if isinstance(node, list) else node[k]
    node[int(keys[-1]) if isinstance(node, list) else keys[-1]] = value


HOSTILE = [  # (field, value, what the one line names)
    ("confirmation.alpha", 2, "confirmation.alpha: must be a number in (0, 1)"),
    ("confirmation.alpha", 1, "confirmation.alpha: must be a number in (0, 1)"),
    ("confirmation.alpha", 0, "confirmation.alpha: must be a number in (0, 1)"),
    ("confirmation.alpha", "0.05", "confirmation.alpha: must be a number in (0, 1)"),
    ("confirmation.alpha", True, "confirmation.alpha: must be a number in (0, 1)"),
    ("confirmation.base_only", -1, "confirmation.base_only: must be an integer in [0, 8]"),
    ("confirmation.edited_only", 10**9, "confirmation.edited_only: must be an integer in [0, 8]"),
    ("confirmation.edited_only", 6.0, "confirmation.edited_only: must be an integer in [0, 8]"),
    ("confirmation.n", 10**9, "confirmation.n: must be an integer in [0, 20000]"),
    ("confirmation.n", 9, "confirmation.n: 9, but it lists 8 problems"),
    ("confirmation.base_correct", -4, "confirmation.base_correct: must be an integer in [0, 8]"),
    ("confirmation.point", 3, "confirmation.point: must be the index of a selection point (0 to 0)"),
    ("confirmation.point", True, "confirmation.point: must be the index of a selection point"),
    ("confirmation.mcnemar_p", 7, "confirmation.mcnemar_p: must be a number in [0, 1]"),
    ("confirmation.top_k", 5, "confirmation.top_k: must be a number in (0, 1]"),
    ("confirmation.scale", -1.1, "confirmation.scale: must be a finite number >= 0"),
    ("confirmation.scale", "1.1", "confirmation.scale: must be a finite number >= 0"),
    ("confirmation.mask_sha256", "javascript:alert(1)", "confirmation.mask_sha256: must be a sha256"),
    ("confirmation.problems_sha256.0", "## Injected heading", "confirmation.problems_sha256: must be a list of"),
    ("confirmation.problems_sha256.0", "<script>alert(1)</script>", "confirmation.problems_sha256: must be a list"),
    ("selection.problems_sha256", {"a": 1}, "selection.problems_sha256: must be a list of at most"),
    ("selection.points.0.math_correct", -3, "selection.points[0].math_correct: must be a finite number >= 0"),
    ("selection.points.0.general_kl", {"evil": 1}, "selection.points[0].general_kl: must be a finite number >= 0"),
    ("selection.points.0", [1, 2], "selection.points[0]: must be a mapping of a grid point's results"),
    ("selection.points", [], "selection.points: must be a list of 1 to 10,000 grid points"),
    ("selection.base.math_correct", 11, "selection.base.math_correct: must be an integer in [0, 10]"),
    ("recipe", "text", "recipe: must be the sweep's recipe"),
]


@pytest.mark.parametrize("field,value,phrase", HOSTILE, ids=[f"{f}={str(v)[:20]}" for f, v, _ in HOSTILE])
def test_every_field_a_release_takes_is_checked(tmp_path: Path, field: str, value, phrase: str) -> None:
    data = valid_sweep()
    _set(data, field, value)
    code, text = _from_sweep(_write(tmp_path, data), tmp_path)
    assert code == 2, text
    line = _error_line(text)
    assert phrase in line, line
    for raw in ("## Injected", "<script>", "javascript:"):
        assert raw not in line  # the value is named by its field, not echoed


def test_huge_counts_are_bounded_and_the_exact_test_stays_fast(tmp_path: Path) -> None:
    data = valid_sweep()
    n = 20_000  # the bound: as many problems as a confirmation may list
    conf = [f"{i + 10**6:064x}" for i in range(n)]
    data["confirmation"].update(
        n=n, problems_sha256=conf, base_only=9_000, edited_only=11_000, base_correct=0, edited_correct=11_000
    )
    start = time.monotonic()
    code, text = _from_sweep(_write(tmp_path, data), tmp_path)
    assert code == 0, text  # 9,000 vs 11,000 of 20,000: a real gain, p far below 0.05
    # a bound on a regression, not a benchmark: with a fresh comb per term the exact test alone took many minutes;
    # the whole run (a tiny release) takes 5-30 s depending on the machine's load, so the bound leaves room for it
    assert time.monotonic() - start < 150, "the exact test took minutes on large counts"


def test_a_sweep_json_that_is_a_fifo_or_a_device_is_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    fifo.mkdir()
    os.mkfifo(fifo / "sweep.json")

    def unblock() -> None:  # if the FIFO were opened for reading, a writer after 15 s ends the wait (test fails)
        time.sleep(15)
        try:
            fd = os.open(fifo / "sweep.json", os.O_WRONLY | os.O_NONBLOCK)
            os.close(fd)
        except OSError:
            pass

    threading.Thread(target=unblock, daemon=True).start()
    device = tmp_path / "device"
    device.mkdir()
    (device / "sweep.json").symlink_to("/dev/zero")
    for folder in (fifo, device):
        start = time.monotonic()
        code, text = _from_sweep(folder, tmp_path)
        assert code == 2, text
        line = _error_line(text)  # what it is, and how to fix it
        assert "sweep.json: not a regular file (a FIFO, device or folder); " in line, text
        assert line.endswith("; pass the --out folder of a `mathneuro-edit sweep`"), line
        assert time.monotonic() - start < 10


def test_a_sweep_json_larger_than_a_sweep_holds_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "big"
    folder.mkdir()
    with open(folder / "sweep.json", "wb") as f:
        f.truncate(65 * 1024 * 1024)  # sparse: no disk used
    code, text = _from_sweep(folder, tmp_path)
    assert code == 2, text
    assert "bytes, more than a sweep.json holds (67,108,864)" in _error_line(text)


def test_a_deeply_nested_sweep_json_is_one_line(tmp_path: Path) -> None:
    folder = tmp_path / "deep"
    folder.mkdir()
    (folder / "sweep.json").write_text('{"selection": ' + "[" * 100_000 + "]" * 100_000 + "}")
    code, text = _from_sweep(folder, tmp_path)
    assert code == 2, text
    assert "sweep.json: nested too deep to be a sweep.json; re-run the sweep" in _error_line(text)


def test_the_sweep_s_text_is_never_shown_raw(tmp_path: Path) -> None:
    data = valid_sweep()
    data["confirmation"]["confirmed"] = False
    data["recommendation"] = "\x1b]0,pwned\x07\x1b[2J nothing \u202eexe.txt; more"
    code, text = _from_sweep(_write(tmp_path, data), tmp_path)
    assert code == 2, text
    line = _error_line(text)
    assert "nothing was confirmed" in line and "\\x1b]0,pwned\\x07\\x1b[2J" in line and "\\u202e" in line, line
    assert "\x1b" not in text and "\u202e" not in text and "\x07" not in text
    with pytest.raises(InputError) as e:  # the Python API's message too, not only the CLI's line
        read_sweep(tmp_path / "sweep")
    assert "\x1b" not in str(e.value) and "\\x1b]0,pwned" in str(e.value)
    data = valid_sweep()
    data["recipe"]["data"] = {"math": "\x1b[31m## red heading"}
    code, text = _from_sweep(_write(tmp_path, data), tmp_path)
    assert code == 2, text
    line = _error_line(text)
    assert "the recipe's data.math differs from the sweep's" in line and "\\x1b[31m" in line, line
    assert "\x1b" not in text
