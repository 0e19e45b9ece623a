"""What leaves for the Hub, and what `verify` / `reproduce` accept, is what the run wrote: a folder is checked file by
file against its lock (a changed shard, a file the lock does not list, a lock whose recipe or outputs were edited)
before anything is sent; a branch name, the Hub timeout and the printed plan are checked or scrubbed as data.

The run is the tiny llama workspace of tests/test_reliability.py; each test works on its own copy.
docs/reliability.md lists what each test promises.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from safetensors.torch import load_file, save_file

from mathneuro_edit.cli.main import main
from mathneuro_edit.recipe.io import quickstart_recipe
from tests._fakehub import TOKEN, FakeHub, relock
from tests.test_reliability import _error_line
from tests.test_untrusted_inputs import _data_sets

LOCK = "mathneuro_recipe.lock.yaml"


def _cli(*args: object, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = CliRunner(env=env).invoke(main, [str(a) for a in args])
    return result.exit_code, result.stdout, result.output


@pytest.fixture()
def run(ws: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(ws / "run", copy)
    return copy


def _change_a_weight(path: Path) -> None:
    sd = load_file(str(path))
    name = next(iter(sd))
    sd[name].view(-1)[0] += 0.5
    save_file(sd, str(path), metadata={"format": "pt"})


def _edit_lock(folder: Path, edit, rehash: bool) -> None:
    """Edit the lock of ``folder`` (and of each output folder in it); recompute ``recipe_sha256`` when ``rehash``
    (a hostile author keeps the lock self-consistent)."""
    for where in (folder, folder / "checkpoint", folder / "adapter"):
        path = where / LOCK
        if not path.is_file():
            continue
        lock = yaml.safe_load(path.read_text())
        edit(lock)
        if rehash:
            canonical = json.dumps(lock["recipe"], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
            lock["recipe_sha256"] = hashlib.sha256(canonical.encode()).hexdigest()
        path.write_text(yaml.safe_dump(lock, sort_keys=False))


# ------------------------------------------------------------------------------------- verify and reproduce


def test_verify_and_reproduce_refuse_a_file_the_lock_does_not_list(ws: Path, run: Path, tmp_path: Path) -> None:
    (run / "checkpoint" / "added-after-the-run.txt").write_text("added after the run")
    code, stdout, text = _cli("verify", run, "--base", ws / "base", "-q")
    assert code == 1, text
    assert "  extra    checkpoint/added-after-the-run.txt" in stdout
    assert (
        stdout.strip()
        .splitlines()[-1]
        .endswith("files differ from the lock's sha256: checkpoint/added-after-the-run.txt (extra) (details above)")
    )
    code, stdout, text = _cli("reproduce", run, "--base", ws / "base", "-q", *_data_sets(ws))
    assert code == 1, text
    assert "  extra    checkpoint/added-after-the-run.txt" in stdout
    last = stdout.strip().splitlines()[-1]
    assert last.startswith(
        "reproduced: NO: the files you have differ from the lock: checkpoint/added-after-the-run.txt (extra)"
    )


@pytest.mark.parametrize("name", ["checkpoint/../../outside.bin", "../x.safetensors", "/etc/passwd"])
def test_a_lock_whose_outputs_name_a_path_out_of_the_run_is_malformed(ws: Path, run: Path, name: str) -> None:
    def add(lock):
        lock["outputs"][name] = "a" * 64

    _edit_lock(run, add, rehash=False)  # outputs are not part of the recipe hash
    for args in (
        ["verify", run, "--base", ws / "base", "-q"],
        ["reproduce", run, "--base", ws / "base", "-q", *_data_sets(ws)],
        ["push", run, "--dry-run"],
    ):
        code, _, text = _cli(*args)
        assert code == 2, (args[0], text)
        line = _error_line(text)
        assert f"outputs: {name!r}: must be a relative file path inside the run" in line, line


# ------------------------------------------------------------------------------------- push checks first


def test_push_refuses_a_shard_changed_after_the_run(fake_hub: FakeHub, run: Path) -> None:
    _change_a_weight(run / "checkpoint" / "model.safetensors")
    for flags in ([], ["--dry-run"]):
        code, stdout, text = _cli("push", run, "--repo-id", "me/edit", *flags, env={"HF_TOKEN": TOKEN})
        assert code == 2, text
        line = _error_line(text)
        assert "1 file(s) differ from the lock's sha256: checkpoint/model.safetensors (changed)" in line, line
        assert "nothing was uploaded" in line and stdout == ""
    assert fake_hub.requests == []  # not a byte left
    code, _, text = _cli("push", run, "--adapter", "--repo-id", "me/edit-adapter", "--dry-run")
    assert code == 0, text  # the adapter is as the run wrote it: its push is not refused


def test_push_refuses_a_file_the_lock_does_not_list(fake_hub: FakeHub, run: Path) -> None:
    (run / "adapter" / "extra.safetensors").write_bytes(b"not from the run")
    (run / "adapter" / "adapter_model.safetensors").unlink()
    code, _, text = _cli("push", run, "--adapter", "--repo-id", "me/edit-adapter", env={"HF_TOKEN": TOKEN})
    assert code == 2, text
    line = _error_line(text)
    assert (
        "2 file(s) differ from the lock's sha256: adapter/adapter_model.safetensors (missing), "
        "adapter/extra.safetensors (extra)"
    ) in line, line
    assert fake_hub.requests == []


def test_push_refuses_a_lock_whose_recipe_was_edited(fake_hub: FakeHub, run: Path) -> None:
    def boost(lock):
        lock["recipe"]["edit"]["scale"] = 5.0

    _edit_lock(run, boost, rehash=False)
    code, _, text = _cli("push", run, "--repo-id", "me/edit", env={"HF_TOKEN": TOKEN})
    assert code == 1, text  # as verify and reproduce: a lock that disagrees with its own hash
    line = _error_line(text)
    assert "field recipe:" in line and "recipe_sha256" in line, line
    assert fake_hub.requests == []


def test_push_into_a_symlink_loop_is_one_line(fake_hub: FakeHub, run: Path) -> None:
    (run / "checkpoint" / "loop").symlink_to(run / "checkpoint" / "loop")
    code, _, text = _cli("push", run, "--repo-id", "me/edit", "--dry-run")
    assert code == 2, text
    assert "loop: a symbolic link that leads nowhere" in _error_line(text)


# ------------------------------------------------------------------------------------- branch names


@pytest.mark.parametrize(
    "branch",
    ["../main", "a..b", "-rf", "main\nrm -rf /", "main\u202etxt.exe", "x/.hidden", "refs//heads", "v1.lock", ""],
)
def test_a_branch_name_the_hub_would_misread_is_refused(fake_hub: FakeHub, run: Path, branch: str) -> None:
    code, stdout, text = _cli("push", run, "--repo-id", "me/edit", f"--branch={branch}", env={"HF_TOKEN": TOKEN})
    assert code == 2, text
    line = _error_line(text)
    assert "--branch:" in line and "is not a branch name the Hub takes as written" in line, line
    assert "\u202e" not in text and line.isascii()  # shown escaped, never raw on the terminal
    assert fake_hub.requests == []


def test_plain_branch_names_are_taken(fake_hub: FakeHub, run: Path) -> None:
    for branch in ("main", "v1", "exp/boost-1.1", "release_2026.12", "prs/refs"):
        code, stdout, text = _cli("push", run, "--repo-id", "me/edit", f"--branch={branch}", "--dry-run")
        assert code == 0 and f"(revision {branch}," in stdout, text


@pytest.mark.parametrize("branch", ["refs/pr/1", "refs/pr/3", "refs/heads/main", "refs/convert/parquet", "refs"])
def test_a_hub_ref_is_not_a_branch_a_push_commits_to(fake_hub: FakeHub, run: Path, branch: str) -> None:
    """Issue 41 (still open from round 3): `push --branch refs/pr/1` committed into an existing pull request."""
    code, _, text = _cli("push", run, "--repo-id", "me/edit", f"--branch={branch}", env={"HF_TOKEN": TOKEN})
    assert code == 2, text
    line = _error_line(text)
    assert f"--branch: '{branch}' is a Hub ref (a pull request's), not a branch" in line, line
    assert "pass --create-pr to open one" in line
    assert fake_hub.requests == []
    with pytest.raises(ValueError, match="must be a branch name"):  # nor can a recipe (or a lock) name one
        quickstart_recipe(["hub.repo_id=me/edit", f"hub.revision={branch}"])


def test_a_lock_s_hub_revision_is_checked_as_a_branch_name(fake_hub: FakeHub, run: Path) -> None:
    def hub(lock):
        lock["recipe"]["hub"] = {"repo_id": "me/edit", "private": False, "revision": "../main"}

    _edit_lock(run, hub, rehash=True)  # self-consistent: the recipe hash agrees
    code, _, text = _cli("push", run, env={"HF_TOKEN": TOKEN})
    assert code == 2, text
    line = _error_line(text)
    assert "recipe hub.revision: '../main' is not a branch name" in line, line
    assert fake_hub.requests == []
    code, _, text = _cli("plan", "--set", "hub.repo_id=me/edit", "--set", "hub.revision=../main")
    assert code == 2 and "hub.revision:" in _error_line(text), text


# ------------------------------------------------------------------------------------- the Hub's timeout


@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf", "soon"])
def test_a_hub_timeout_that_is_not_a_positive_finite_number_is_refused(
    fake_hub: FakeHub, run: Path, value: str
) -> None:
    for flags in ([], ["--dry-run"]):
        code, _, text = _cli(
            "push", run, "--repo-id", "me/edit", *flags, env={"HF_TOKEN": TOKEN, "MATHNEURO_EDIT_HUB_TIMEOUT": value}
        )
        assert code == 2, text
        assert f"MATHNEURO_EDIT_HUB_TIMEOUT={value!r}:" in _error_line(text), text
    assert fake_hub.requests == []


def test_a_positive_hub_timeout_is_taken(fake_hub: FakeHub, run: Path) -> None:
    code, _, text = _cli("push", run, "--repo-id", "me/edit", "--dry-run", env={"MATHNEURO_EDIT_HUB_TIMEOUT": "0.5"})
    assert code == 0, text


# ------------------------------------------------------------------------------------- the printed plan


def test_push_dry_run_never_prints_the_token(fake_hub: FakeHub, run: Path) -> None:
    (run / "checkpoint" / f"notes-{TOKEN}.txt").write_text("a file whose name holds the token")
    code, stdout, text = _cli("push", run, "--repo-id", "me/edit", "--dry-run", env={"HF_TOKEN": TOKEN})
    assert code == 2 and TOKEN not in text and "notes-***.txt (extra)" in _error_line(text), text
    relock(run / "checkpoint")  # as if the run had written it: the plan lists it
    for flags in ([], ["--json"]):
        code, stdout, text = _cli("push", run, "--repo-id", "me/edit", "--dry-run", *flags, env={"HF_TOKEN": TOKEN})
        assert code == 0, text
        assert TOKEN not in text and "notes-***.txt" in stdout, stdout


def test_reproduce_json_of_an_edited_folder_prints_its_report_as_json_on_stdout(
    ws: Path, run: Path, tmp_path: Path
) -> None:
    edited = tmp_path / "edited"
    shutil.copytree(run, edited)
    shard = next((edited / "checkpoint").glob("*.safetensors"))
    data = bytearray(shard.read_bytes())
    data[-1] ^= 1  # one weight's last byte changed after the run
    shard.write_bytes(bytes(data))
    result = CliRunner().invoke(main, ["reproduce", str(edited), "--base", str(ws / "base"), "--json", *_data_sets(ws)])
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)  # stdout is one JSON document, nothing else
    assert doc["ok"] is False and f"checkpoint/{shard.name}" in json.dumps(doc), doc


def test_reproduce_of_a_card_refuses_a_lock_beside_it_that_is_not_the_one_it_names(run: Path) -> None:
    card = run / "checkpoint" / "README.md"
    lock = run / "checkpoint" / "mathneuro_recipe.lock.yaml"
    assert "`mathneuro_recipe.lock.yaml` in this folder (sha256 `" in card.read_text()
    lock.write_text(lock.read_text() + "# edited after the run\n")  # still a valid lock, another sha256
    code, _, text = _cli("reproduce", card)
    assert code == 2, text
    assert f"{lock}: its sha256 is not the one the card states" in _error_line(text), text
