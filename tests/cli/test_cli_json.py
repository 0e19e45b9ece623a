"""`--json`: one JSON document on stdout for inspect, plan, verify, push --dry-run and reproduce; and the exit codes
(0 ok, 1 a check found a difference, 2 bad input, 3 internal error, 130 interrupted), each distinct."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from mathneuro_edit.cli.main import main

SETS = ["data.samples=4", "evaluation.samples=2", "evaluation.max_new_tokens=4", "outputs.adapter=false"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("json") / "run"
    result = CliRunner().invoke(main, ["run", "--out", str(out), "-q", *[a for s in SETS for a in ("--set", s)]])
    assert result.exit_code == 0, result.output
    return out


def _json(*args: object) -> tuple[int, dict]:
    result = CliRunner().invoke(main, [str(a) for a in args])
    return result.exit_code, json.loads(result.stdout)  # the whole of stdout is one document


def test_inspect_and_plan_json(run_dir: Path) -> None:
    code, mask = _json("inspect", run_dir / "mask.safetensors", "--json")
    assert (
        code == 0
        and mask["kind"] == "mask"
        and mask["selected"] == sum(t["selected"] for t in mask["tensors"].values())
    )
    code, stats = _json("inspect", run_dir / "stats" / "math.stats.safetensors", "--json")
    assert code == 0 and stats["kind"] == "stats" and stats["summary"]["samples"] == 4
    code, plan = _json("plan", "--json")
    assert code == 0 and plan["n_params"] > 0 and plan["n_targets"] == len(mask["tensors"])


def test_verify_json_and_exit_1_on_a_difference(run_dir: Path, tmp_path: Path) -> None:
    code, report = _json("verify", run_dir, "-q", "--json")
    assert code == 0 and report["ok"] and report["audits"][0]["ok"]
    copy = tmp_path / "run"
    import shutil

    shutil.copytree(run_dir, copy)
    (copy / "checkpoint" / "tokenizer_config.json").write_text("{}")
    code, report = _json("verify", copy, "-q", "--json")
    assert code == 1 and report["files_checked"]["files"]["checkpoint/tokenizer_config.json"] == "changed"


def test_exit_codes_are_distinct(run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bad = CliRunner().invoke(main, ["inspect", str(run_dir / "nope.safetensors")])
    assert bad.exit_code == 2 and bad.output.startswith("error: ") and "Traceback" not in bad.output

    import mathneuro_edit.runs.inspect as inspect_mod

    def boom(*a: object, **k: object) -> None:
        raise RuntimeError("kaboom")

    monkeypatch.setattr(inspect_mod, "load_artifact", boom)
    internal = CliRunner().invoke(main, ["inspect", str(run_dir / "mask.safetensors")])
    assert internal.exit_code == 3 and "internal error: RuntimeError: kaboom" in internal.output

    def interrupted(*a: object, **k: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(inspect_mod, "load_artifact", interrupted)
    ctrl_c = CliRunner().invoke(main, ["inspect", str(run_dir / "mask.safetensors")])
    assert ctrl_c.exit_code == 130 and "interrupted" in ctrl_c.output


def test_shell_completion_as_documented() -> None:
    import os
    import shutil
    import subprocess

    exe = shutil.which("mathneuro-edit")
    if exe is None:
        pytest.skip("the mathneuro-edit console script is not installed")
    out = subprocess.run(
        [exe], env={**os.environ, "_MATHNEURO_EDIT_COMPLETE": "bash_source"}, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0 and "_mathneuro_edit_completion" in out.stdout
    doc = (Path(__file__).resolve().parents[2] / "docs" / "publishing.md").read_text()
    assert "_MATHNEURO_EDIT_COMPLETE=bash_source mathneuro-edit" in doc
