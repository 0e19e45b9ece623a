"""The CLI answers help, ``--version`` and every argument, path and recipe error before torch or transformers is
imported: here they are run in one fresh process where neither can be imported (``sys.modules[name] = None``), so
an import of either on the way fails the command (as an internal error, exit 3) instead of passing slowly.

Also here: ``run --dry-run`` needs no ``--out``, and a usage error (a missing option, a path that is not there) is
one line, as every other input error.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from mathneuro_edit.cli.main import main

# the child: torch and transformers unimportable, then each argv through the CLI in-process (CliRunner), its exit
# status and stdout/stderr reported as one JSON list
_CHILD = """
import json, sys
for name in ("torch", "transformers"):
    sys.modules[name] = None  # `import torch` now raises ImportError
from click.testing import CliRunner
from mathneuro_edit.cli.main import main
cases = json.loads(sys.argv[1])
rows = []
for argv in cases:
    r = CliRunner().invoke(main, argv, prog_name="mathneuro-edit")
    rows.append({"argv": argv, "code": r.exit_code, "out": r.stdout, "err": r.stderr})
rows.append({"loaded": sorted(n for n in ("torch", "transformers") if sys.modules.get(n) is not None)})
print(json.dumps(rows))
"""


def _without_torch(cases: list[list[str]], cwd: Path) -> tuple[list[dict], list[str]]:
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps(cases)], capture_output=True, text=True, timeout=120, cwd=cwd
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    *rows, loaded = json.loads(proc.stdout)
    return rows, loaded["loaded"]


def test_help_version_and_input_errors_answer_with_torch_unimportable(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("base:\n  model: organism\nmask:\n  top_kk: 0.1\n")
    commands = sorted(main.commands)
    helps = [["--help"], *([c, "--help"] for c in commands)]
    errors = {  # argv -> what its one line says
        ("run", str(tmp_path / "missing.yaml"), "--out", str(tmp_path / "o")): "recipe file not found",
        ("run", str(bad), "--out", str(tmp_path / "o")): "mask.top_kk: unknown key, did you mean 'top_k'?",
        ("run", "--set", "mask.top_k=7", "--out", str(tmp_path / "o")): "did you mean 0.07?",
        ("run",): "Missing option '--out'",
        ("calibrate", str(bad), "--out", str(tmp_path / "o")): "unknown key",
        ("sweep", "--top-k", "x", "--out", str(tmp_path / "o")): "--top-k: 'x' is not a comma-separated list",
        ("consistency", "--sizes", "1.5", "--out", str(tmp_path / "o")): "an integer >= 1",
        ("verify", str(tmp_path / "missing")): "Directory",
        ("export", "--mask", str(tmp_path / "missing"), "--out", str(tmp_path / "o")): "does not exist",
        ("inspect", str(tmp_path / "missing.safetensors")): "does not exist",
        ("reproduce", str(tmp_path / "missing")): "no such local folder",
        ("dequantize", str(tmp_path / "missing.gguf")): "no such local file",
        ("plan", str(bad)): "unknown key",
    }
    rows, loaded = _without_torch([*helps, ["--version"], *map(list, errors)], tmp_path)
    assert loaded == []
    for row in rows[: len(helps)]:
        assert row["code"] == 0 and "Usage: mathneuro-edit" in row["out"], row
    assert rows[len(helps)]["out"].strip() == "mathneuro-edit, version " + _version()
    for row, says in zip(rows[len(helps) + 1 :], errors.values()):
        lines = row["err"].strip().splitlines()
        assert row["code"] == 2 and len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], row


def _version() -> str:
    from mathneuro_edit._version import __version__

    return __version__


def test_dry_run_needs_no_out() -> None:
    """``run --dry-run`` prints the plan without ``--out`` (releasing.md's step 2); without ``--dry-run``, ``--out``
    is required, in one line."""
    result = CliRunner().invoke(main, ["run", "--dry-run"])
    assert result.exit_code == 0 and "summary:" in result.stdout, result.output
    result = CliRunner().invoke(main, ["run", "-q"])
    assert result.exit_code == 2 and result.stderr.strip().splitlines() == [
        "error: main run: Missing option '--out' (only --dry-run runs without one); see main run --help"
    ], result.stderr
