"""`reproduce` and `verify` check every file the lock records, not only the outputs (issue 46, item 2).

Before, a run folder whose `mask.safetensors` was another run's, or whose `stats/math.stats.safetensors` had one bit
flipped, was "reproduced: yes, bit for bit": the re-run recomputes both, so only a check of the files you have sees
them. The lock's `run_files` records them (the mask, the statistics, the evaluation, the cards); each change below
must give a NO naming the file, an untouched run a yes, and a lock written before `run_files` must say which files
it could not check instead of "bit for bit".

The runs are the organism with a few samples (seconds); every test works on its own copy.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from mathneuro_edit.cli.main import main
from mathneuro_edit.publish.card import card_for_folder
from mathneuro_edit.publish.lock import read_lock
from mathneuro_edit.publish.run_files import card_sha256
from mathneuro_edit.util.hashing import sha256_file

SETS = ["data.samples=4", "evaluation.samples=2", "evaluation.max_new_tokens=4"]


def _cli(*args: object) -> tuple[int, str]:
    result = CliRunner().invoke(main, [str(a) for a in args])
    return result.exit_code, result.output


def _run(out: Path, *sets: str) -> Path:
    code, text = _cli("run", "--out", out, "-q", *[a for s in (*SETS, *sets) for a in ("--set", s)])
    assert code == 0, text
    return out


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The run, and another run of the organism whose mask selects other weights (top 10%, not 5%)."""
    root = tmp_path_factory.mktemp("every-file")
    return _run(root / "run"), _run(root / "other", "mask.top_k=0.1")


@pytest.fixture()
def run(made: tuple[Path, Path], tmp_path: Path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(made[0], copy)
    return copy


def _verdict(folder: Path) -> tuple[int, str]:
    code, text = _cli("reproduce", folder, "-q")
    return code, text.strip().splitlines()[-1]


def test_the_lock_records_every_file_of_the_run(made: tuple[Path, Path]) -> None:
    run = made[0]
    recorded = read_lock(run)["run_files"]
    for name in ("mask.safetensors", "stats/math.stats.safetensors", "stats/general-0.stats.safetensors", "eval.json"):
        assert recorded[name] == sha256_file(run / name), name
    for sub in ("checkpoint", "adapter"):
        assert recorded[f"{sub}/eval.json"] == sha256_file(run / sub / "eval.json")
        # the card names the lock's sha256: recorded with it as zeros, and the card is the one its folder renders
        card = (run / sub / "README.md").read_bytes()
        assert sha256_file(run / sub / "mathneuro_recipe.lock.yaml").encode() in card
        assert recorded[f"{sub}/README.md"] == card_sha256(card, sha256_file(run / sub / "mathneuro_recipe.lock.yaml"))
        assert card_for_folder(run / sub).content.encode() == card


def test_an_untouched_run_is_reproduced_bit_for_bit(run: Path) -> None:
    code, last = _verdict(run)
    assert code == 0 and last.startswith("reproduced: yes, bit for bit (made on cpu, checked on cpu)"), last


def test_another_run_s_mask_is_named(run: Path, made: tuple[Path, Path]) -> None:
    shutil.copyfile(made[1] / "mask.safetensors", run / "mask.safetensors")
    code, last = _verdict(run)
    assert code == 1, last
    assert last.startswith("reproduced: NO: the files you have differ from the lock: mask.safetensors (changed)"), last
    code, text = _cli("verify", run, "-q")
    assert code == 1 and "  changed  mask.safetensors" in text, text


def test_one_flipped_bit_in_the_statistics_is_named(run: Path) -> None:
    path = run / "stats" / "math.stats.safetensors"
    data = bytearray(path.read_bytes())
    data[-5] ^= 0x01  # one bit of the last tensor's data
    path.write_bytes(bytes(data))
    code, last = _verdict(run)
    assert code == 1, last
    assert last.startswith(
        "reproduced: NO: the files you have differ from the lock: stats/math.stats.safetensors (changed)"
    ), last
    code, text = _cli("verify", run, "-q")
    assert code == 1, text
    assert (
        text.strip()
        .splitlines()[-1]
        .startswith("verify: FAILED: files differ from the lock's sha256: stats/math.stats.safetensors (changed)")
    ), text


@pytest.mark.parametrize("name", ["eval.json", "checkpoint/eval.json", "checkpoint/README.md", "adapter/README.md"])
def test_an_edited_evaluation_or_card_is_named(run: Path, name: str) -> None:
    path = run / name
    text = path.read_text(encoding="utf-8")
    if name.endswith(".json"):
        doc = json.loads(text)
        doc["edited_note"] = "better than measured"
        path.write_text(json.dumps(doc), encoding="utf-8")
    else:
        path.write_text(text.replace("## Limitations", "## Limitations\n\n- None."), encoding="utf-8")
    code, last = _verdict(run)
    assert code == 1, last
    assert last.startswith(f"reproduced: NO: the files you have differ from the lock: {name} (changed)"), last


def test_an_output_folder_s_lock_is_the_run_s(run: Path) -> None:
    lock = run / "checkpoint" / "mathneuro_recipe.lock.yaml"
    lock.write_text(lock.read_text(encoding="utf-8") + "# edited\n", encoding="utf-8")
    code, last = _verdict(run)
    assert code == 1 and "checkpoint/mathneuro_recipe.lock.yaml (changed)" in last, last


def test_a_lock_without_run_files_says_what_it_could_not_check(run: Path) -> None:
    """A lock written before `run_files` is read; its verdict names the files it could not check, never "bit for
    bit", and a changed output is still a NO."""
    for folder in (run, run / "checkpoint", run / "adapter"):
        path = folder / "mathneuro_recipe.lock.yaml"
        lock = yaml.safe_load(path.read_text(encoding="utf-8"))
        del lock["run_files"]
        path.write_text(yaml.safe_dump(lock, sort_keys=False), encoding="utf-8")
    code, text = _cli("reproduce", run, "-q")
    last = text.strip().splitlines()[-1]
    assert code == 0, text
    assert "bit for bit" not in last, last
    assert last.startswith(
        "reproduced: yes for every file the lock records: the re-run's mask, statistics and output files match it "
        "(made on cpu, checked on cpu); not checked (the lock records no sha256 of them): mask.safetensors, "
        "stats/general-0.stats.safetensors, stats/math.stats.safetensors, eval.json, checkpoint/eval.json, "
        "checkpoint/README.md, adapter/eval.json, adapter/README.md"
    ), last
    assert "checkpoint/README.md" in last and "adapter/eval.json" in last
    code, text = _cli("verify", run, "-q")
    assert code == 0, text
    assert "not checked (the lock records no sha256 of them): mask.safetensors" in text.strip().splitlines()[-1]
    (run / "checkpoint" / "config.json").write_text("{}")
    code, last = _verdict(run)
    assert code == 1 and "checkpoint/config.json (changed)" in last, last


def test_card_set_keeps_the_card_recorded(run: Path) -> None:
    """`card --set` rewrites the cards and the lock: the lock records the new cards, and the run still reproduces."""
    code, text = _cli("card", run, "--set", "hub.repo_id=me/organism-prune")
    assert code == 0, text
    code, last = _verdict(run)
    assert code == 0 and last.startswith("reproduced: yes, bit for bit"), last
