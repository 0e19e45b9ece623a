"""`reproduce` and `verify` check the files you have, not only a re-run: tests that would notice a reproduce that
compared the mask hash alone, and the SHiRA adapter's `r` (the smallest that fits every layer).

The run is the organism with a few samples (seconds); every test works on its own copy.
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from safetensors.torch import load_file, save_file

from mathneuro_edit.cli.main import main
from mathneuro_edit.engine.mask import Mask
from mathneuro_edit.organism import organism_path

SETS = ["data.samples=4", "evaluation.samples=2", "evaluation.max_new_tokens=4"]


def _cli(*args: object) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, [str(a) for a in args])
    return result.exit_code, result.stdout, result.output


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("reproduce-files") / "run"
    code, _, text = _cli("run", "--out", out, "-q", *[a for s in SETS for a in ("--set", s)])
    assert code == 0, text
    return out


@pytest.fixture()
def run(run_dir: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    return copy


def _change_a_weight(path: Path) -> None:
    """Change one weight of the checkpoint in a way the mask cannot see: an unselected entry, same shapes."""
    sd = load_file(str(path))
    name = next(k for k in sd if k.endswith("embed_tokens.weight"))
    sd[name][0, 0] += 0.5
    save_file(sd, str(path), metadata={"format": "pt"})


def test_a_changed_output_with_the_same_mask_is_not_reproduced(run: Path) -> None:
    _change_a_weight(run / "checkpoint" / "model.safetensors")
    code, stdout, text = _cli("reproduce", run, "-q")
    assert code == 1, text
    assert "re-run against the lock: mask match" in stdout  # the mask IS identical: only the file check catches it
    assert "  changed  checkpoint/model.safetensors" in stdout
    last = stdout.strip().splitlines()[-1]
    assert last.startswith(
        "reproduced: NO: the files you have differ from the lock: checkpoint/model.safetensors (changed)"
    ), last
    assert "yes" not in last


def test_missing_and_extra_files_are_named(run: Path) -> None:
    (run / "adapter" / "adapter_model.safetensors").unlink()
    (run / "checkpoint" / "notes.bin").write_bytes(b"not from the run")
    code, stdout, text = _cli("reproduce", run, "-q", "--json")
    assert code == 1, text
    report = json.loads(stdout)  # one JSON document, nothing else on stdout
    files = report["files_checked"]["files"]
    assert files["adapter/adapter_model.safetensors"] == "missing"
    assert files["checkpoint/notes.bin"] == "extra"
    assert files["checkpoint/model.safetensors"] == "match"
    assert report["ok"] is False and report["reproduced"] is False and report["rerun"]["ok"] is True


def test_the_artifact_folder_alone_and_its_card_are_checked(run: Path) -> None:
    (run / "checkpoint" / "tokenizer.json").write_text("{}")
    for source in (run / "checkpoint", run / "checkpoint" / "README.md"):
        code, stdout, text = _cli("reproduce", source, "-q")
        assert code == 1 and "  changed  checkpoint/tokenizer.json" in stdout, text
        assert "adapter/" not in stdout.split("re-run against")[0]  # only this folder's files are asked for


def test_the_rerun_is_deleted_unless_kept(run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    code, stdout, text = _cli("reproduce", run, "-q", "--json")
    assert code == 0, text
    report = json.loads(stdout)
    assert report["ok"] is True and report["rerun"]["out_dir"] is None
    assert all(f["files"] and set(f["files"].values()) == {"match"} for f in [report["files_checked"]])
    assert list(scratch.iterdir()) == []  # nothing of the re-run is left
    code, stdout, text = _cli("reproduce", run, "-q", "--keep")
    assert code == 0, text
    kept = [p for p in scratch.iterdir()]
    assert len(kept) == 1 and (kept[0] / "out" / "checkpoint" / "model.safetensors").is_file()
    assert str(kept[0] / "out") in stdout.strip().splitlines()[-1]


def test_verify_shares_the_file_check(run: Path) -> None:
    (run / "checkpoint" / "generation_config.json").write_text('{"do_sample": true}')
    code, stdout, text = _cli("verify", run, "-q")
    assert code == 1, text
    assert "  changed  checkpoint/generation_config.json" in stdout
    assert (
        stdout.strip()
        .splitlines()[-1]
        .endswith("files differ from the lock's sha256: checkpoint/generation_config.json (changed) (details above)")
    )
    code, stdout, _ = _cli("verify", run, "-q", "--json")
    report = json.loads(stdout)
    assert code == 1 and "files" in report["failed"]
    assert report["files_checked"]["files"]["checkpoint/generation_config.json"] == "changed"


def test_shira_r_is_the_smallest_that_fits(run_dir: Path) -> None:
    """SHiRA stores r*(rows+cols) entries in every layer: r must hold the densest layer's selection, and r-1 not."""
    config = json.loads((run_dir / "adapter" / "adapter_config.json").read_text())
    shapes = {k: tuple(v.shape) for k, v in load_file(str(organism_path() / "model.safetensors")).items()}
    counts = Mask.load(run_dir / "mask.safetensors").counts()
    need = {name: selected / sum(shapes[name]) for name, (selected, _) in counts.items() if selected}
    r = config["r"]
    assert r == math.ceil(max(need.values()))
    assert all(r * sum(shapes[n]) >= counts[n][0] for n in need)  # fits every layer
    assert any((r - 1) * sum(shapes[n]) < counts[n][0] for n in need)  # one less does not
    stored = load_file(str(run_dir / "adapter" / "adapter_model.safetensors"))
    sizes = {k: v.numel() for k, v in stored.items() if k.endswith("shira_weight")}
    assert sizes and all(n % r == 0 for n in sizes.values())
