"""A data file's name is text from the user's disk: a right-to-left override or an ESC sequence in it is written
into the lock file as a YAML escape (``"math\\u202Etxt.exe.txt"``, ``"\\e[31m"``), never raw, so ``cat`` or a
code viewer shows the lock as it is; the lock is still data: it reads back to the same names, and ``verify`` and
``reproduce`` of the folder pass. docs/reliability.md lists what each test promises."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import yaml
from click.testing import CliRunner

from mathneuro_edit.cli.main import main
from mathneuro_edit.publish.lock import LOCK_NAME, read_lock

RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _cli(*args: object) -> tuple[int, str]:
    result = CliRunner().invoke(main, [str(a) for a in args])
    return result.exit_code, result.output


def test_a_lock_holds_a_hostile_data_file_name_escaped_and_still_reproduces(ws: Path, tmp_path: Path) -> None:
    math_name, general_name = "math\u202etxt.exe.txt", "gen\x1b[31meral\u2066.txt"
    shutil.copy(ws / "math.txt", tmp_path / math_name)
    shutil.copy(ws / "general.txt", tmp_path / general_name)
    r = yaml.safe_load((ws / "recipe.yaml").read_text())
    r["data"]["math"]["path"] = str(tmp_path / math_name)
    r["data"]["general"][0]["path"] = str(tmp_path / general_name)
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(r))
    run = tmp_path / "o"
    code, text = _cli("run", tmp_path / "r.yaml", "--out", run, "-q")
    assert code == 0, text
    for kind in ("checkpoint", "adapter"):
        raw = (run / kind / LOCK_NAME).read_bytes()
        shown = raw.decode("utf-8")
        assert "\u202e".encode() not in raw and b"\x1b" not in raw, sorted({hex(ord(c)) for c in RAW.findall(shown)})
        assert not RAW.search(shown)
        assert '"math\\u202Etxt.exe.txt"' in shown and '"gen\\e[31meral\\u2066.txt"' in shown, shown
        lock = read_lock(run / kind)  # the same names, read back
        assert lock["recipe"]["data"]["math"]["path"] == f"<local>/{math_name}"
        assert lock["recipe"]["data"]["general"][0]["path"] == f"<local>/{general_name}"
        code, text = _cli("verify", run / kind, "--base", ws / "base")
        assert code == 0, text
    code, text = _cli(
        "reproduce",
        run,
        "--base",
        ws / "base",
        "--out",
        tmp_path / "again",
        "-q",
        "--set",
        f"data.math.path={tmp_path / math_name}",
        "--set",
        f"data.general.0.path={tmp_path / general_name}",
        "--set",
        f"evaluation.math.path={ws / 'eval.jsonl'}",
        "--set",
        f"evaluation.general.0.path={ws / 'general.txt'}",
    )
    assert code == 0 and "reproduced: yes" in text.lower(), text
