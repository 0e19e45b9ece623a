"""A sweep folder is an input of ``run --from-sweep`` and is adopted by ``sweep --out`` only when it is one
(issue 41, classes 4 and 5).

``run --from-sweep S --out S --overwrite`` replaced the sweep (its cache, statistics and sweep.json) with the
release, and ``--out S/release`` wrote into it: the sweep folder is now one of the command's inputs, which no
output may be, contain or lie inside (:func:`mathneuro_edit.util.outdir.check_output`). ``sweep --out D`` wrote
into any folder holding a ``cache/`` folder or a ``stats/*.key.json`` file without ``--overwrite``: a sweep now
marks its folder when it starts (:data:`mathneuro_edit.layout.SWEEP_MARKER`), and only a folder with that marker
(or a finished sweep's sweep.json) is resumed."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from mathneuro_edit.cli.main import main
from mathneuro_edit.errors import InputError
from mathneuro_edit.layout import SWEEP_MARKER
from mathneuro_edit.recipe.io import quickstart_recipe
from mathneuro_edit.runs.sweep.evidence import run_from_sweep
from mathneuro_edit.runs.sweep.search import check_sweep_folder, run_sweep

from ._sweep_json import valid_sweep as _valid


def _sweep_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "sweep"
    (folder / "cache").mkdir(parents=True)
    (folder / "sweep.json").write_text(json.dumps(_valid()))
    (folder / "cache" / f"{'a' * 64}.json").write_text('{"key": 1}')
    (folder / SWEEP_MARKER).write_text("{}")
    return folder


def _digest(folder: Path) -> str:
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    return hashlib.sha256(b"".join(str(p.relative_to(folder)).encode() + p.read_bytes() for p in files)).hexdigest()


def _one_error_line(output: str) -> str:
    lines = [ln for ln in output.splitlines() if ln.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in output, output
    return lines[0]


@pytest.mark.parametrize("out", [".", "release", "cache/release"])
def test_run_from_sweep_never_writes_into_the_sweep_folder(tmp_path: Path, out: str) -> None:
    sweep = _sweep_folder(tmp_path)
    before = _digest(sweep)
    target = (sweep / out).resolve()
    args = ["run", "--from-sweep", str(sweep), "--out", str(target), "--overwrite", "-q"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    line = _one_error_line(result.output)
    assert "overlaps the sweep folder" in line and "write it somewhere else" in line, line
    assert _digest(sweep) == before
    assert out == "." or not target.exists()


def test_the_python_api_refuses_it_too(tmp_path: Path) -> None:
    sweep = _sweep_folder(tmp_path)
    before = _digest(sweep)
    with pytest.raises(InputError, match="overlaps the sweep folder"):
        run_from_sweep(quickstart_recipe(), sweep, sweep, overwrite=True, progress=False)
    with pytest.raises(InputError, match="overlaps the sweep folder"):
        run_from_sweep(quickstart_recipe(), sweep, sweep / "release", progress=False)
    assert _digest(sweep) == before


def _mine(tmp_path: Path, *files: str) -> Path:
    folder = tmp_path / "mine"
    for name in files:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("my own file")
    return folder


@pytest.mark.parametrize(
    "files",
    [
        ("cache/notes.txt", "thesis.tex"),
        ("cache/",),
        ("stats/run.key.json", "stats/run.stats.safetensors"),
        ("sweep.csv", "cache/x.json"),
    ],
)
def test_sweep_does_not_adopt_a_folder_that_merely_looks_like_one(tmp_path: Path, files: tuple[str, ...]) -> None:
    folder = _mine(tmp_path, *[f for f in files if not f.endswith("/")])
    for f in files:
        if f.endswith("/"):
            (folder / f).mkdir(parents=True, exist_ok=True)
    before = _digest(folder)
    with pytest.raises(InputError, match="not a sweep folder") as e:
        check_sweep_folder(folder, overwrite=False)
    assert "--overwrite" in str(e.value)
    result = CliRunner().invoke(main, ["sweep", "--out", str(folder), "-q", "--set", "evaluation.math=arithmetic"])
    assert result.exit_code == 2, result.output
    assert "not a sweep folder" in _one_error_line(result.output)
    assert _digest(folder) == before


def test_a_sweep_folder_is_resumed_and_an_overwrite_adopts_one(tmp_path: Path) -> None:
    sweep = _sweep_folder(tmp_path)
    check_sweep_folder(sweep, overwrite=False)  # its own marker: resumed
    (sweep / SWEEP_MARKER).unlink()
    check_sweep_folder(sweep, overwrite=False)  # a finished sweep of an older version: its sweep.json
    (tmp_path / "new").mkdir()
    check_sweep_folder(tmp_path / "new", overwrite=False)  # empty: a new sweep
    check_sweep_folder(tmp_path / "absent", overwrite=False)
    mine = _mine(tmp_path, "cache/notes.txt")
    check_sweep_folder(mine, overwrite=True)  # the user said so


def test_a_link_or_a_folder_at_the_marker_is_no_marker(tmp_path: Path) -> None:
    folder = _mine(tmp_path, "cache/notes.txt")
    (folder / SWEEP_MARKER).symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(InputError, match="not a sweep folder"):
        check_sweep_folder(folder, overwrite=False)
    (folder / SWEEP_MARKER).unlink()
    (folder / SWEEP_MARKER).mkdir()
    with pytest.raises(InputError, match="not a sweep folder"):
        check_sweep_folder(folder, overwrite=False)


def test_a_sweep_marks_its_folder_before_it_calibrates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mathneuro_edit.runs.sweep import stages as sweep_mod  # where the sweep loads its model

    def stop(*a, **k):
        raise KeyboardInterrupt  # a kill during the model load: the folder must already say it is a sweep's

    monkeypatch.setattr(sweep_mod, "load_step", stop)
    recipe = quickstart_recipe(["evaluation.math=arithmetic", "sweep.top_k=[0.01]", "sweep.scale=[1.1]"])
    with pytest.raises(KeyboardInterrupt):
        run_sweep(recipe, tmp_path / "s", progress=False)
    assert (tmp_path / "s" / SWEEP_MARKER).is_file()
    check_sweep_folder(tmp_path / "s", overwrite=False)
