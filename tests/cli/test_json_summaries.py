"""`--json` on the long commands: `run`, `sweep` and `eval` print one machine-readable summary on stdout
while their stage lines stay on stderr; `plan --json` says what `plan`'s text says (an output the text calls "yes"
is supported in the JSON, never a bare null), including the edited checkpoint's size at ``outputs.dtype``."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from mathneuro_edit.cli.main import main
from mathneuro_edit.runs.plan import format_bytes

SMALL = [
    "--set",
    "data.samples=4",
    "--set",
    "evaluation.samples=3",
    "--set",
    "evaluation.max_new_tokens=4",
    "--set",
    "evaluation.math=arithmetic",
]


def _invoke(*args: object) -> tuple[int, dict, str]:
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result.exit_code, json.loads(result.stdout), result.stderr  # the whole of stdout is one document


def test_plan_json_says_what_its_text_says() -> None:
    for sets in ([], ["--set", "outputs.dtype=bfloat16"]):
        text = CliRunner().invoke(main, ["plan", *sets]).stdout
        _, data, _ = _invoke("plan", *sets, "--json")
        for name, said in data["outputs"].items():
            line = f"  {name}: yes" if said["supported"] else f"  {name}: no ({said['why_not']})"
            assert line in text.splitlines(), (name, said, text)
            assert said["supported"] == (said["why_not"] is None)
        assert data["outputs"]["checkpoint"]["supported"] is True  # the organism gets every output
        assert data["fits"] in text and data["summary"] in text.splitlines()
        assert f"edited checkpoint ~{format_bytes(data['checkpoint_bytes'])} ({data['output_dtype']}" in text
    assert data["output_dtype"] == "bfloat16" and data["checkpoint_bytes"] == 2 * data["n_params"]
    _, default, _ = _invoke("plan", "--json")
    assert default["output_dtype"] == "float32" and default["checkpoint_bytes"] == 4 * default["n_params"]


def test_run_eval_and_sweep_json_print_one_summary_on_stdout_and_stages_on_stderr(tmp_path: Path) -> None:
    _, run, err = _invoke("run", "--out", tmp_path / "run", *SMALL, "--json")
    assert run["ok"] is True and run["out_dir"] == str(tmp_path / "run") and 0 < run["selected"] < run["total"]
    assert run["files"]["checkpoint/model.safetensors"] and set(run["eval"]) == {"math", "general"}
    assert err.splitlines()[0].startswith("[1/") and "[8/8]" in err  # the stage lines: stderr only
    lock = (tmp_path / "run" / "mathneuro_recipe.lock.yaml").read_text()
    assert run["mask_sha256"] in lock

    _, ev, err = _invoke("eval", "--mask", tmp_path / "run" / "mask.safetensors", *SMALL, "--json")
    assert ev["ok"] is True and ev["eval_json"] is None
    for label in ("base", "edited"):  # the same problems, the same model (eval.json adds per-problem rows)
        ran = {k: v for k, v in run["eval"]["math"][label].items() if k != "predictions"}
        assert ev["results"]["math"][label] == ran
    assert "evaluate" in err

    _, sw, err = _invoke(
        "sweep",
        "--out",
        tmp_path / "sw",
        "--top-k",
        "0.05",
        "--scale",
        "1.1",
        *SMALL,
        "--set",
        "sweep.selection_samples=3",
        "--set",
        "sweep.confirmation_samples=3",
        "--set",
        "sweep.general_samples=3",
        "--json",
    )
    assert sw["ok"] is True and sw["sweep"] == json.loads((tmp_path / "sw" / "sweep.json").read_text())
    assert sw["recommendation"] == sw["sweep"]["recommendation"]
    assert str(tmp_path / "sw" / "sweep.csv") in sw["files"] and err.startswith("[1/")
