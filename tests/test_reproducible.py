"""Byte-identical outputs and machine-independent hashes: separate processes with different PYTHONHASHSEED,
the base and the data in other folders, then `reproduce` after the outputs and the base were moved.

Every file of the run must be identical; none is exempt (the cards carry no timestamp and no path).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from mathneuro_edit.publish.run_files import card_sha256
from mathneuro_edit.util.hashing import sha256_file
from mathneuro_edit.util.tensor_files import save_file
from tests._tiny import write_workspace

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]


def _cli(
    *args: str, seed: str = "0", cwd: Path | None = None, umask: int = 0o022, env: dict | None = None
) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "mathneuro_edit.cli", *args],
        capture_output=True,
        text=True,
        env=full_env,
        cwd=cwd,
        preexec_fn=lambda: os.umask(umask),
    )


def _inproc(*args: str) -> tuple[int, str]:
    """The CLI in this process (faster; for checks that do not depend on the hash seed)."""
    from click.testing import CliRunner

    from mathneuro_edit.cli.main import main

    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def _files(folder: Path) -> dict[str, Path]:
    return {p.relative_to(folder).as_posix(): p for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """The same recipe run twice in separate processes: other PYTHONHASHSEED, other folders, other umask."""
    torch.manual_seed(0)
    one, two = tmp_path_factory.mktemp("machine-one"), tmp_path_factory.mktemp("machine-two")
    recipe_one = write_workspace(one)
    shutil.copytree(one / "base", two / "a-copy-of-the-base")  # the same model (same bytes) elsewhere
    for name in ("math.jsonl", "eval.jsonl", "general.txt"):
        shutil.copy(one / name, two / name)
    recipe = yaml.safe_load(recipe_one.read_text())
    recipe["base"]["model"] = str(two / "a-copy-of-the-base")
    for section in ("data", "evaluation"):
        recipe[section]["math"]["path"] = str(two / Path(recipe[section]["math"]["path"]).name)
        recipe[section]["general"][0]["path"] = str(two / "general.txt")
    (two / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    r1 = _cli("run", str(recipe_one), "--out", str(one / "out"), "-q", seed="1")
    assert r1.returncode == 0, r1.stderr
    r2 = _cli("run", str(two / "recipe.yaml"), "--out", str(two / "out"), "-q", seed="2", umask=0o027)
    assert r2.returncode == 0, r2.stderr
    return {"one": one, "two": two}


def test_every_output_file_is_byte_identical(runs) -> None:
    a, b = _files(runs["one"] / "out"), _files(runs["two"] / "out")
    assert list(a) == list(b)
    differ = [rel for rel in a if a[rel].read_bytes() != b[rel].read_bytes()]
    assert differ == []  # no exemption: cards, locks, adapter config, mask and statistics files included
    config = json.loads(a["adapter/adapter_config.json"].read_text())
    assert config["target_modules"] == sorted(config["target_modules"]) and len(config["target_modules"]) > 3
    for rel, p in a.items():  # no local path anywhere (the folders differ, the bytes do not)
        text = p.read_bytes()
        assert str(runs["one"]).encode() not in text and str(runs["two"]).encode() not in text, rel
    assert "checkpoint/scores.json" not in a  # nothing reads as the edited model's own scores


def test_files_get_the_users_umask(runs) -> None:
    for folder, mode in ((runs["one"] / "out", 0o644), (runs["two"] / "out", 0o640)):
        modes = {rel: stat.S_IMODE(p.stat().st_mode) for rel, p in _files(folder).items()}
        assert modes == dict.fromkeys(modes, mode), modes  # not 0600 (mkstemp, safetensors) for any file


def test_lock_identifies_base_and_data_by_content(runs) -> None:
    lock = yaml.safe_load((runs["one"] / "out" / "mathneuro_recipe.lock.yaml").read_text())
    base = lock["base"]
    assert base["model"] == "<local>" and "model.safetensors.index.json" in base["weights_sha256"]
    assert len([n for n in base["weights_sha256"] if n.endswith(".safetensors")]) > 1  # every shard
    assert base["description"]["architecture"] == "LlamaForCausalLM"
    import hashlib

    want = hashlib.sha256((runs["one"] / "math.jsonl").read_bytes()).hexdigest()
    assert lock["files"]["data.math.path"] == {"name": "math.jsonl", "sha256": want}
    assert set(lock["files"]) == {
        "data.math.path",
        "data.general.0.path",
        "evaluation.math.path",
        "evaluation.general.0.path",
    }


def test_reproduce_after_moving_outputs_and_base_with_the_cards_command(runs, tmp_path) -> None:
    moved_out, moved_base = tmp_path / "elsewhere" / "run", tmp_path / "models" / "base-moved"
    moved_out.parent.mkdir()
    moved_base.parent.mkdir()
    shutil.copytree(runs["one"] / "out", moved_out)
    shutil.copytree(runs["one"] / "base", moved_base)
    card = (moved_out / "checkpoint" / "README.md").read_text()
    line = next(x for x in card.splitlines() if x.startswith("mathneuro-edit reproduce "))
    assert "--set data.math.path=math.jsonl" in line and '--base "$BASE_MODEL_DIR"' in line
    args = [os.path.expandvars(a) for a in shlex.split(line.replace("$BASE_MODEL_DIR", str(moved_base)))][1:]
    assert args[1] == "."  # the card's folder: here given as the moved run folder
    args[1] = str(moved_out)
    done = _cli(*args, "--out", str(tmp_path / "again"), "-q", seed="3", cwd=runs["two"])  # data: the other copy
    assert done.returncode == 0, done.stdout + done.stderr
    assert "reproduced: yes, bit for bit" in done.stdout and "differs" not in done.stdout
    # a wrong file under a right name is reported as such, before anything runs
    wrong = tmp_path / "math.jsonl"
    wrong.write_text((runs["one"] / "eval.jsonl").read_text())
    args = [
        "reproduce",
        str(moved_out),
        "--base",
        str(moved_base),
        "--set",
        f"data.math.path={wrong}",
        "--set",
        f"data.general.0.path={runs['two'] / 'general.txt'}",
        "--set",
        f"evaluation.math.path={runs['two'] / 'eval.jsonl'}",
        "--set",
        f"evaluation.general.0.path={runs['two'] / 'general.txt'}",
        "--out",
        str(tmp_path / "no"),
    ]
    bad = _cli(*args, seed="4")
    assert bad.returncode == 2 and "data.math.path=" in bad.stderr and "the lock expects" in bad.stderr, bad.stderr
    assert "not the file the run used" in bad.stderr and not (tmp_path / "no").exists()


def test_card_re_rendered_from_the_folder_is_the_written_card(runs) -> None:
    from mathneuro_edit.publish.card import card_for_folder

    for sub in ("checkpoint", "adapter"):
        folder = runs["one"] / "out" / sub
        assert card_for_folder(folder).content == (folder / "README.md").read_text()


def test_standalone_export_writes_the_runs_lock_and_card(runs, tmp_path) -> None:
    out = runs["one"] / "out"
    recipe = str(runs["one"] / "recipe.yaml")
    code, text = _inproc("export", recipe, "--mask", str(out / "mask.safetensors"), "--out", str(tmp_path / "ck"), "-q")
    assert code == 0, text
    run_lock = yaml.safe_load((out / "checkpoint" / "mathneuro_recipe.lock.yaml").read_text())
    lock = yaml.safe_load((tmp_path / "ck" / "mathneuro_recipe.lock.yaml").read_text())
    # the same lock but its outputs, the device the statistics were made on (an export computes none) and the
    # other files it records (an export folder holds no mask, statistics or evaluation: its card only)
    same = ("outputs", "device", "run_files")
    assert {k: v for k, v in lock.items() if k not in same} == {k: v for k, v in run_lock.items() if k not in same}
    assert "device" not in lock and run_lock["device"]["type"] == "cpu"
    assert lock["outputs"] == {
        k: v for k, v in run_lock["outputs"].items() if k.startswith("checkpoint/") and k != "checkpoint/eval.json"
    }
    card = (tmp_path / "ck" / "README.md").read_text()
    assert "No evaluation was run" in card and lock["mask_sha256"] in card
    lock_sha = sha256_file(tmp_path / "ck" / "mathneuro_recipe.lock.yaml")
    assert lock["run_files"] == {"checkpoint/README.md": card_sha256(card.encode(), lock_sha)}
    # verify finds the lock in the export folder itself and asks for the mask it does not hold
    code, text = _inproc("verify", str(tmp_path / "ck"), "--base", str(runs["one"] / "base"))
    assert code == 2 and "pass --mask MASK" in text, text
    code, text = _inproc("verify", str(tmp_path / "ck"), "--mask", str(out / "mask.safetensors"))
    assert code == 2 and "--base PATH" in text, text  # local base: redacted in the lock
    code, text = _inproc(
        "verify", str(tmp_path / "ck"), "--base", str(runs["one"] / "base"), "--mask", str(out / "mask.safetensors")
    )
    assert code == 0, text


def test_wrong_folders_say_what_was_expected(runs, tmp_path) -> None:
    out = runs["one"] / "out"
    code, text = _inproc("card", str(out / "checkpoint"))
    assert code == 2 and f"pass the run folder {out}" in " ".join(text.split()), text
    (tmp_path / "notamodel").mkdir()
    code, text = _inproc("verify", str(tmp_path / "notamodel"))
    assert code == 2 and "not a mathneuro-edit output" in text and "pass the run folder" in text, text
    assert "Traceback" not in text
    # card on the run folder: no base needed (the lock has what the card shows), same cards as the run wrote
    before = {s: (out / s / "README.md").read_bytes() for s in ("checkpoint", "adapter")}
    code, text = _inproc("card", str(out))
    assert code == 0, text
    assert before == {s: (out / s / "README.md").read_bytes() for s in ("checkpoint", "adapter")}


def test_save_file_bytes_do_not_follow_the_hash_seed(tmp_path) -> None:
    """safetensors' own writer orders __metadata__ by a Rust HashMap: different bytes per process."""
    code = (
        "import sys, torch; from mathneuro_edit.util.tensor_files import save_file; "
        "save_file({'b': torch.ones(3), 'a': torch.arange(4)}, sys.argv[1], "
        "{k: str(i) for i, k in enumerate(['format', 'mathneuro_edit', 'zeta', 'alpha', 'k1', 'k2', 'k3'])})"
    )
    blobs = set()
    for seed in ("1", "2"):  # safetensors' writer: a random HashMap order per process, so 2 differ w.p. 1 - 1/7!
        path = tmp_path / f"x{seed}.safetensors"
        subprocess.run(
            [sys.executable, "-c", code, str(path)],
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)},
        )
        blobs.add(path.read_bytes())
    assert len(blobs) == 1
    from safetensors import safe_open

    with safe_open(str(tmp_path / "x1.safetensors"), framework="pt") as f:
        assert f.metadata()["zeta"] == "2" and torch.equal(f.get_tensor("a"), torch.arange(4))
    save_file({"m": torch.ones(2, dtype=torch.bool)}, tmp_path / "b.safetensors")
    from safetensors.torch import load_file

    assert load_file(str(tmp_path / "b.safetensors"))["m"].dtype == torch.bool
