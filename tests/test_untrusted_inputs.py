"""Untrusted inputs: a shared lock is data, never code; no command writes onto its inputs; what is read is what was
checked; every bad input is exit 2 with one line. The tests act as a stranger who crafts the lock, the recipe, the
model folder or the file names. docs/reliability.md lists what each test promises."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import yaml

from ._models import hash_tree
from .test_reliability import _cli, _error_line

LOCK = "mathneuro_recipe.lock.yaml"


def _data_sets(ws: Path) -> list[str]:
    return [
        "--set",
        f"data.math.path={ws / 'math.txt'}",
        "--set",
        f"data.general.0.path={ws / 'general.txt'}",
        "--set",
        f"evaluation.math.path={ws / 'eval.jsonl'}",
        "--set",
        f"evaluation.general.0.path={ws / 'general.txt'}",
    ]


def _hostile_run(ws: Path, tmp_path: Path, edit, rehash: bool = True) -> Path:
    """A copy of the run folder whose lock's recipe was edited by ``edit(recipe)``; its recipe_sha256 recomputed
    (a hostile author keeps the lock self-consistent) unless ``rehash`` is False."""
    run = tmp_path / "hostile-run"
    shutil.copytree(ws / "run", run)
    path = run / LOCK
    lock = yaml.safe_load(path.read_text())
    edit(lock["recipe"])
    if rehash:
        canonical = json.dumps(lock["recipe"], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        lock["recipe_sha256"] = hashlib.sha256(canonical.encode()).hexdigest()
    path.write_text(yaml.safe_dump(lock, sort_keys=False))
    return run


# ------------------------------------------------------------------------------------------- a lock is data


def test_reproduce_never_takes_trust_remote_code_from_a_lock(ws: Path, evil, tmp_path: Path) -> None:
    base, marker = evil

    def trust(r):
        r["base"]["trust_remote_code"] = True

    run = _hostile_run(ws, tmp_path, trust)
    code, text = _cli("reproduce", run, "--base", base, "--out", tmp_path / "again", "-q", *_data_sets(ws))
    assert code == 2, text
    line = _error_line(text)
    assert "base.trust_remote_code: true" in line and "--trust-remote-code" in line and "refused" in line, line
    assert not marker.exists(), "the lock turned on the repository's code"
    assert not (tmp_path / "again").exists()


def test_verify_never_takes_trust_remote_code_from_the_lock(ws: Path, evil, tmp_path: Path) -> None:
    base, marker = evil

    def trust(r):
        r["base"]["trust_remote_code"] = True

    run = _hostile_run(ws, tmp_path, trust)
    code, text = _cli("verify", run, "--base", base)
    assert code == 2, text
    assert "base.trust_remote_code" in _error_line(text)
    assert not marker.exists(), "verify took trust_remote_code from the folder's lock"
    import sys

    try:
        code, text = _cli("verify", run, "--base", base, "--trust-remote-code")
        assert "trust_remote_code" not in text and "internal error" not in text, text  # the user's own flag opts in
    finally:  # the repository's module, once imported, would hide a later test's run of it
        for name in [m for m in sys.modules if m.startswith("transformers_modules")]:
            del sys.modules[name]


@pytest.mark.parametrize(
    "key,value",
    [
        ("data.math.path", "/etc/passwd"),
        ("data.general.0.path", "../../x.txt"),
        ("evaluation.math.path", "/etc/hostname"),
        ("evaluation.general.0.path", "~/.ssh/id_rsa"),
    ],
)
def test_a_lock_naming_a_local_file_reads_nothing(ws: Path, tmp_path: Path, key: str, value: str) -> None:
    def point(r):
        section, *rest = key.split(".")
        node = r[section]
        if rest[0] == "general":
            node["general"][0]["path"] = value
        else:
            node["math"]["path"] = value

    run = _hostile_run(ws, tmp_path, point)
    lock = yaml.safe_load((run / LOCK).read_text())
    del lock["files"][key]  # self-consistent: the lock records no local file under that key
    (run / LOCK).write_text(yaml.safe_dump(lock, sort_keys=False))
    sets = [a for a in _data_sets(ws)]
    i = sets.index(next(s for s in sets if s.startswith(key + "=")))
    del sets[i - 1 : i + 1]  # the user does not give this one: the lock's value would be read
    code, text = _cli("reproduce", run, "--base", ws / "base", "--out", tmp_path / "again", "-q", *sets)
    assert code == 2, text
    line = _error_line(text)
    assert f"{key}: {value!r}" in line and f"--set {key}=FILE" in line, line
    assert not (tmp_path / "again").exists()


def test_a_lock_choosing_an_lm_eval_task_folder_is_refused(ws: Path, tmp_path: Path) -> None:
    tasks = tmp_path / "evil_tasks"
    tasks.mkdir()
    (tasks / "t.yaml").write_text("task: t\nprocess_docs: !function evil.run\n")
    (tasks / "evil.py").write_text("raise SystemExit('ran')\n")

    def include(r):
        r["evaluation"]["lm_eval"] = {
            "tasks": ["t"],
            "include_path": str(tasks),
            "limit": None,
            "num_fewshot": None,
            "apply_chat_template": False,
            "fewshot_as_multiturn": None,
            "batch_size": None,
        }

    run = _hostile_run(ws, tmp_path, include)
    lock = yaml.safe_load((run / LOCK).read_text())
    lock["lm_eval"] = {"include_path_sha256": {"t.yaml": "0" * 64}}
    (run / LOCK).write_text(yaml.safe_dump(lock, sort_keys=False))
    code, text = _cli("reproduce", run, "--base", ws / "base", "--out", tmp_path / "again", "-q", *_data_sets(ws))
    assert code == 2, text
    assert "--set evaluation.lm_eval.include_path=FOLDER" in _error_line(text)


def test_every_refused_setting_is_named_at_once(ws: Path, tmp_path: Path) -> None:
    from mathneuro_edit.publish.lock_policy import refused_lock_settings

    lock = {
        "recipe": {
            "base": {"model": "/srv/models/x", "trust_remote_code": True, "offload_folder": "/tmp/o"},
            "data": {"math": {"path": "/etc/passwd"}, "general": "organism:general"},
        }
    }
    got = refused_lock_settings(lock)
    assert [g.split(":")[0] for g in got] == [
        "base.trust_remote_code",
        "base.model",
        "base.offload_folder",
        "data.math.path",
    ]
    assert (
        refused_lock_settings(lock, ["base.model=/m", "base.offload_folder=/o", "data.math=/d"], trust_remote_code=True)
        == []
    )


def test_verify_and_card_do_not_read_a_local_base_named_by_the_lock(ws: Path, tmp_path: Path) -> None:
    def local(r):
        r["base"]["model"] = str(ws / "base")

    run = _hostile_run(ws, tmp_path, local)
    lock = yaml.safe_load((run / LOCK).read_text())
    lock["base"]["model"] = str(ws / "base")
    (run / LOCK).write_text(yaml.safe_dump(lock, sort_keys=False))
    for cmd in ("verify", "card"):
        code, text = _cli(cmd, run)
        assert code == 2, (cmd, text)
        assert "--base PATH" in _error_line(text), (cmd, text)


def test_an_edited_lock_that_kept_its_hash_is_exit_1_naming_the_field(ws: Path, tmp_path: Path) -> None:
    def boost(r):
        r["edit"]["scale"] = 5.0

    run = _hostile_run(ws, tmp_path, boost, rehash=False)
    for args in (
        ["reproduce", run, "--base", ws / "base", "--out", tmp_path / "again", "-q", *_data_sets(ws)],
        ["verify", run, "--base", ws / "base"],
    ):
        code, text = _cli(*args)
        assert code == 1, text
        line = _error_line(text)
        assert "field recipe:" in line and "recipe_sha256" in line and "internal error" not in line, line
    assert not (tmp_path / "again").exists()
    lock = yaml.safe_load((ws / "run" / LOCK).read_text())
    lock["files"]["data.math.path"]["name"] = "other.txt"  # a field that must agree with the recipe
    (run / LOCK).write_text(yaml.safe_dump(lock, sort_keys=False))
    code, text = _cli("reproduce", run, "--base", ws / "base", "--out", tmp_path / "again", "-q", *_data_sets(ws))
    assert code == 1 and "field files.data.math.path" in _error_line(text), text


@pytest.mark.parametrize(
    "field,value",
    [("recipe", ["a", "list"]), ("recipe", "text"), ("outputs", [1, 2]), ("base", "x"), ("recipe_sha256", 5)],
)
def test_a_malformed_lock_is_exit_2(ws: Path, tmp_path: Path, field: str, value) -> None:
    run = tmp_path / "run"
    shutil.copytree(ws / "run", run)
    lock = yaml.safe_load((run / LOCK).read_text())
    lock[field] = value
    for where in (run, run / "checkpoint", run / "adapter"):
        (where / LOCK).write_text(yaml.safe_dump(lock, sort_keys=False))
    for args in (
        ["reproduce", run, "--base", ws / "base", "-q", *_data_sets(ws)],
        ["verify", run],
        ["push", run, "--dry-run"],
        ["card", run],
    ):
        code, text = _cli(*args)
        assert code == 2, (args[0], text)
        assert field in _error_line(text), text


# ------------------------------------------------------------------------------------------- recipe limits

_BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n" + "".join(
    f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n" for p, c in zip("bcdefgh", "cdefghi")
)


@pytest.mark.parametrize(
    "name,text,phrase",
    [
        ("deep-flow", "base: " + "[" * 20_000 + "]" * 20_000 + "\n", "nested more than 64 levels"),
        ("deep-block", "base:\n" + "".join(" " * i + "- \n" for i in range(1, 1000)), "nested more than 64 levels"),
        ("alias-bomb", _BOMB, "expands to more than"),
        ("long-int", "base: {model: organism}\ndata: {samples: " + "7" * 5000 + "}\n", "an integer of 5000 digits"),
        ("huge", "# " + "x" * 2_000_000 + "\n", "more than a recipe may hold"),
    ],
)
def test_yaml_over_the_recipe_limits_is_refused_before_it_expands(
    tmp_path: Path, name: str, text: str, phrase: str
) -> None:
    import time

    assert name != "alias-bomb" or len(_BOMB) < 400
    recipe = tmp_path / f"{name}.yaml"
    recipe.write_text(text)
    start = time.monotonic()
    code, out = _cli("plan", recipe)
    assert code == 2, out
    assert phrase in _error_line(out) and str(recipe) in _error_line(out), out
    assert time.monotonic() - start < 5, "the limit was checked after expanding"


def test_a_recipe_or_lock_that_is_a_fifo_or_a_device_is_refused(tmp_path: Path) -> None:
    import os

    os.mkfifo(tmp_path / "fifo.yaml")
    for args in (["plan", tmp_path / "fifo.yaml"], ["plan", "/dev/zero"], ["reproduce", tmp_path / "fifo.yaml"]):
        code, out = _cli(*args)
        assert code == 2 and "not a regular file" in _error_line(out), out


@pytest.mark.parametrize(
    "value,phrase", [("[" * 5000 + "]" * 5000, "nested more than"), ("9" * 5000, "an integer of 5000 digits")]
)
def test_override_values_over_the_recipe_limits_are_one_line(value: str, phrase: str) -> None:
    code, out = _cli("plan", "--set", f"data.samples={value}")
    assert code == 2 and phrase in _error_line(out), out


def test_a_lock_file_over_the_recipe_limits_is_one_line(ws: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(ws / "run", run)
    for text, phrase in (
        (_BOMB + "lock_version: 1\nrecipe: {}\n", "expands to more than"),
        ("lock_version: " + "1" * 5000 + "\nrecipe: {}\n", "an integer of 5000 digits"),
        ("lock_version: 1\nrecipe: " + "[" * 20000 + "]" * 20000 + "\n", "nested more than"),
    ):
        (run / LOCK).write_text(text)
        for cmd in (["reproduce", run, "-q"], ["verify", run]):
            code, out = _cli(*cmd)
            assert code == 2 and phrase in _error_line(out), out


# ------------------------------------------------------------------------------------------- outputs vs inputs


@pytest.fixture()
def mine(ws: Path, tmp_path: Path) -> Path:
    """A private copy of the workspace's inputs (an attack that succeeds destroys only this copy)."""
    root = tmp_path / "mine"
    root.mkdir()
    for name in ("base", "stats"):
        shutil.copytree(ws / name, root / name)
    for name in ("mask.safetensors", "math.txt", "general.txt", "eval.jsonl"):
        shutil.copy(ws / name, root / name)
    r = yaml.safe_load((ws / "recipe.yaml").read_text())
    r["base"]["model"] = str(root / "base")
    r["data"]["math"]["path"] = str(root / "math.txt")
    r["data"]["general"][0]["path"] = str(root / "general.txt")
    r["evaluation"]["math"]["path"] = str(root / "eval.jsonl")
    r["evaluation"]["general"][0]["path"] = str(root / "general.txt")
    (root / "recipe.yaml").write_text(yaml.safe_dump(r))
    return root


def _attacks(m: Path) -> dict[str, list]:
    rec, base, stats, mask = m / "recipe.yaml", m / "base", m / "stats", m / "mask.safetensors"
    (m / "to-stats.safetensors").symlink_to(stats / "math.stats.safetensors")
    (m / "to-base").symlink_to(base)
    (m / "hard-mask.json").hardlink_to(mask)
    return {
        "sweep --out BASE --overwrite": [
            "sweep",
            rec,
            "--out",
            base,
            "--overwrite",
            "--top-k",
            "0.1",
            "--scale",
            "1.1",
        ],
        "consistency --out BASE/.. spelling": [
            "consistency",
            rec,
            "--out",
            base / ".." / "base",
            "--overwrite",
            "--sizes",
            "1",
            "--repeats",
            "1",
        ],
        "consistency --out a symlink to BASE": [
            "consistency",
            rec,
            "--out",
            m / "to-base",
            "--overwrite",
            "--sizes",
            "1",
            "--repeats",
            "1",
        ],
        "eval --out BASE/config.json": ["eval", rec, "--out", base / "config.json"],
        "eval --mask M --out M": ["eval", rec, "--mask", mask, "--out", mask],
        "eval --out a hard link of M": ["eval", rec, "--mask", mask, "--out", m / "hard-mask.json"],
        "mask --out STATS/math.stats": ["mask", rec, "--stats", stats, "--out", stats / "math.stats.safetensors"],
        "mask --out a symlink to a stats file": ["mask", rec, "--stats", stats, "--out", m / "to-stats.safetensors"],
        "mask --out the recipe": ["mask", rec, "--stats", stats, "--out", rec],
        "mask --out a data file": ["mask", rec, "--stats", stats, "--out", m / "math.txt"],
        "calibrate --out STATS/../base": ["calibrate", rec, "--out", stats / ".." / "base"],
        "calibrate --out a folder holding the data": ["calibrate", rec, "--out", m],
        "export --out the folder holding the mask": ["export", rec, "--mask", mask, "--out", m, "--overwrite"],
        "run --out the folder holding the data": ["run", rec, "--out", m, "--overwrite"],
        "inspect M --plot M": ["inspect", mask, "--plot", mask],
    }


def test_no_command_writes_onto_its_inputs(mine: Path) -> None:
    attacks = _attacks(mine)
    before = hash_tree(mine)
    for name, args in attacks.items():
        code, text = _cli(*args, *(["-q"] if args[0] not in ("inspect",) else []))
        assert code == 2, (name, text)
        line = _error_line(text)
        assert "overlaps the" in line or "hard link" in line, (name, line)
        assert hash_tree(mine) == before, f"{name} changed an input"


@pytest.mark.parametrize("how", ["fifo", "symlink to /dev/null"])
def test_out_must_be_a_regular_file_or_folder_path(mine: Path, tmp_path: Path, how: str) -> None:
    import os

    target = tmp_path / "special"
    if how == "fifo":
        os.mkfifo(target)
    else:
        target.symlink_to("/dev/null")
    rec = mine / "recipe.yaml"
    for args in (
        ["mask", rec, "--stats", mine / "stats", "--out", target, "-q"],
        ["eval", rec, "--out", target, "-q"],
        ["inspect", mine / "mask.safetensors", "--plot", target],
    ):
        code, text = _cli(*args)
        assert code == 2 and "not a regular file or folder" in _error_line(text), (args[0], text)
    assert os.path.islink(target) or not target.is_file()


def test_recalibrating_with_fewer_sets_leaves_no_stale_statistics(mine: Path, tmp_path: Path) -> None:
    out = tmp_path / "stats"
    two = ["--set", f"data.general=[{mine / 'general.txt'}, {mine / 'math.txt'}]"]
    code, text = _cli("calibrate", mine / "recipe.yaml", "--out", out, "-q", *two)
    assert code == 0, text
    assert sorted(p.name for p in out.iterdir()) == [
        "general-0.stats.safetensors",
        "general-1.stats.safetensors",
        "math.stats.safetensors",
    ]
    code, text = _cli("calibrate", mine / "recipe.yaml", "--out", out, "-q")
    assert code == 0, text
    assert sorted(p.name for p in out.iterdir()) == ["general-0.stats.safetensors", "math.stats.safetensors"]
    (out / "notes.txt").write_text("mine")  # a folder that is not only statistics is never replaced
    code, text = _cli("calibrate", mine / "recipe.yaml", "--out", out, "-q")
    assert code == 2 and "holds other files than statistics (notes.txt)" in _error_line(text), text
    assert (out / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


_HELD = """
import os, sys, time
from pathlib import Path
import mathneuro_edit.runs.single_steps as p  # what `calibrate` composes
real = p.calibrate_step
def held(*a, **k):  # hold --out until the test says go (the other run has finished)
    deadline = time.time() + 120
    while not Path(os.environ["GO_FILE"]).exists() and time.time() < deadline:
        time.sleep(0.05)
    return real(*a, **k)
p.calibrate_step = held
from mathneuro_edit.cli.main import main
main(sys.argv[1:])
"""


def test_two_calibrates_into_one_out_never_both_succeed(mine: Path, tmp_path: Path) -> None:
    """Two real processes (a forked child of a process that already ran torch's thread pool can hang): the first
    holds --out while it calibrates; the second, started then, must fail naming it; then the first completes."""
    import os
    import subprocess
    import sys
    import time

    go = tmp_path / "go"
    env = {
        **os.environ,
        "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
        "OMP_NUM_THREADS": "1",
        "GO_FILE": str(go),
    }
    out = tmp_path / "s"
    args = ["calibrate", str(mine / "recipe.yaml"), "--out", str(out), "-q"]
    first = subprocess.Popen(
        [sys.executable, "-c", _HELD, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    deadline = time.time() + 120
    while not (tmp_path / ".s.lock").exists() and time.time() < deadline and first.poll() is None:
        time.sleep(0.05)
    assert (tmp_path / ".s.lock").exists(), first.communicate()
    second = subprocess.run(
        [sys.executable, "-m", "mathneuro_edit.cli", *args], capture_output=True, text=True, env=env, timeout=300
    )
    go.write_text("go")
    _, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    assert second.returncode == 2 and "is writing it" in _error_line(second.stderr), second.stderr
    assert sorted(p.name for p in out.iterdir()) == ["general-0.stats.safetensors", "math.stats.safetensors"]


# ------------------------------------------------------------------------------------------- what is read is checked


def test_a_gguf_missing_tensors_its_architecture_needs_is_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("gguf")
    import gguf

    from ._gguf_tiny import tiny_llama, write_gguf

    real = gguf.GGUFWriter.add_block_count
    monkeypatch.setattr(gguf.GGUFWriter, "add_block_count", lambda self, n: real(self, n + 1))  # promises 3 blocks
    path = tmp_path / "short.gguf"
    write_gguf(tiny_llama(), path)
    monkeypatch.setenv("MATHNEURO_EDIT_CACHE", str(tmp_path / "cache"))
    code, text = _cli("dequantize", path)
    assert code == 2, text
    line = _error_line(text)
    assert "model.layers.2." in line and "lacks" in line and "newly initialized" not in text, line
    assert not list((tmp_path / "cache").rglob("config.json"))  # nothing cached from it


def _rewrite_header(f: Path, edit) -> None:
    raw = f.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + n])
    edit(header)
    body = json.dumps(header).encode()
    body += b" " * (-len(body) % 8)
    f.write_bytes(len(body).to_bytes(8, "little") + body + raw[8 + n :])


def _tensors(header: dict) -> list[str]:
    return sorted((k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"][0])


def _sharded(ws: Path, tmp_path: Path, name: str) -> Path:
    from ._models import save_tiny

    base = tmp_path / name
    save_tiny(base, "llama", sharded=True)
    return base


@pytest.mark.parametrize("how", ["../outside", "/absolute", "./spelled-twice", "not-a-weight-file"])
def test_a_shard_index_names_only_files_inside_the_folder(ws: Path, tmp_path: Path, how: str) -> None:
    base = _sharded(ws, tmp_path, f"idx-{how.strip('./')}")
    index = base / "model.safetensors.index.json"
    data = json.loads(index.read_text())
    first = sorted(set(data["weight_map"].values()))[0]
    outside = tmp_path / "outside.safetensors"
    shutil.copy(base / first, outside)
    target = {
        "../outside": f"../{outside.name}",
        "/absolute": str(outside),
        "./spelled-twice": f"./{first}",
        "not-a-weight-file": "config.json",
    }[how]
    name = next(k for k, v in data["weight_map"].items() if v == first)
    data["weight_map"][name] = target
    index.write_text(json.dumps(data))
    for cmd in ("calibrate", "export"):
        recipe = tmp_path / f"r-{cmd}.yaml"
        r = yaml.safe_load((ws / "recipe.yaml").read_text())
        r["base"]["model"] = str(base)
        recipe.write_text(yaml.safe_dump(r))
        args = (
            ["export", recipe, "--mask", ws / "mask.safetensors", "--out", tmp_path / "o"]
            if cmd == "export"
            else ["calibrate", recipe, "--out", tmp_path / "o"]
        )
        code, text = _cli(*args, "-q")
        assert code == 2, (cmd, text)
        line = _error_line(text)
        assert "model.safetensors.index.json" in line and "inside the model folder" in line, line
        assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("how", ["overlap", "unknown-dtype", "shape-vs-config", "no-model-type"])
def test_every_shard_header_is_checked_before_export(ws: Path, tmp_path: Path, how: str) -> None:
    base = tmp_path / f"base-{how}"
    shutil.copytree(ws / "base", base)
    f = base / "model.safetensors"
    if how == "overlap":  # two tensors of one size share bytes: the second's offsets are the first's

        def edit(h):
            names = _tensors(h)
            a, b = next(
                (a, b)
                for a in names
                for b in names
                if a < b and h[a]["shape"] == h[b]["shape"] and len(h[a]["shape"]) == 2
            )
            h[b]["data_offsets"] = list(h[a]["data_offsets"])

        _rewrite_header(f, edit)
    elif how == "unknown-dtype":
        _rewrite_header(f, lambda h: h[_tensors(h)[0]].update(dtype="Q9_WEIRD"))
    else:
        cfg = json.loads((base / "config.json").read_text())
        if how == "shape-vs-config":
            cfg["intermediate_size"] *= 2
        else:
            cfg.pop("model_type")
        (base / "config.json").write_text(json.dumps(cfg))
    r = yaml.safe_load((ws / "recipe.yaml").read_text())
    r["base"]["model"] = str(base)
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump(r))
    phrase = {
        "overlap": "overlap",
        "unknown-dtype": "unknown dtype 'Q9_WEIRD'",
        "shape-vs-config": "config.json describes",
        "no-model-type": "model_type",
    }[how]
    for args in (
        ["export", recipe, "--mask", ws / "mask.safetensors", "--out", tmp_path / "o"],
        ["calibrate", recipe, "--out", tmp_path / "o"],
    ):
        code, text = _cli(*args, "-q")
        assert code == 2, (args[0], text)
        assert phrase in _error_line(text), text
        assert not (tmp_path / "o").exists()


def test_a_scale_is_checked_in_the_dtype_it_is_applied_in(ws: Path, tmp_path: Path) -> None:
    import torch

    from mathneuro_edit.engine.apply import check_scale, edited_values
    from mathneuro_edit.errors import InputError

    code, text = _cli(
        "export",
        ws / "recipe.yaml",
        "--mask",
        ws / "mask.safetensors",
        "--out",
        tmp_path / "o",
        "--set",
        "edit.scale=1e39",
        "-q",
    )  # finite in float64, inf in float32
    assert code == 2 and "inf in float32" in _error_line(text), text
    assert not (tmp_path / "o").exists()
    with pytest.raises(InputError, match="inf in float32"):
        check_scale(1e39)  # the Python API: the same check
    with pytest.raises(InputError, match="overflow in float16"):
        edited_values(torch.tensor([2.0, 300.0], dtype=torch.float16), 1000.0)  # 3e5 > 65504: inf in float16
    with pytest.raises(InputError, match="overflow in float32"):
        edited_values(torch.tensor([10.0]), 1e38)
    assert edited_values(torch.tensor([2.0], dtype=torch.float16), 1000.0).item() == 2000.0


def _edit_meta(src: Path, dst: Path, edit) -> None:
    from safetensors import safe_open
    from safetensors.torch import save_file

    with safe_open(str(src), framework="pt") as f:
        meta = dict(f.metadata())
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    header = json.loads(meta["mathneuro_edit"])
    meta["mathneuro_edit"] = json.dumps(edit(header))
    save_file(tensors, str(dst), metadata=meta)


@pytest.mark.parametrize(
    "edit", ["header-list", "no-shapes", "shapes-text", "targets-list", "meta-list", "shape-of-strings"]
)
def test_malformed_mask_and_statistics_headers_are_exit_2(ws: Path, tmp_path: Path, edit: str) -> None:
    def change(h):
        if edit == "header-list":
            return [1, 2]
        if edit == "no-shapes":
            h.pop("shapes", None), h.pop("targets", None)
        elif edit == "shapes-text":
            h["shapes"], h["targets"] = "x", "x"
        elif edit == "targets-list":
            h["shapes"], h["targets"] = [1], [1]
        elif edit == "meta-list":
            h["meta"] = [1]
        else:
            for table in ("shapes", "targets"):
                for k in list(h.get(table, {}))[:1]:
                    if table == "shapes":
                        h[table][k] = ["a", "b"]
                    else:
                        h[table][k]["shape"] = None
        return h

    stats = tmp_path / "stats"
    shutil.copytree(ws / "stats", stats)
    _edit_meta(ws / "stats" / "math.stats.safetensors", stats / "math.stats.safetensors", change)
    mask = tmp_path / "m.safetensors"
    _edit_meta(ws / "mask.safetensors", mask, change)
    for args in (
        ["inspect", mask],
        ["inspect", stats / "math.stats.safetensors"],
        ["mask", ws / "recipe.yaml", "--stats", stats, "--out", tmp_path / "o.safetensors", "-q"],
        ["export", ws / "recipe.yaml", "--mask", mask, "--out", tmp_path / "o", "-q"],
        ["eval", ws / "recipe.yaml", "--mask", mask, "-q"],
    ):
        code, text = _cli(*args)
        assert code == 2, (args[0], text)
        assert "internal error" not in text and (
            "malformed" in _error_line(text) or "unreadable" in _error_line(text) or "corrupt" in _error_line(text)
        ), (args[0], text)


# ------------------------------------------------------------------------------------------- disk full


def _small_disk(monkeypatch: pytest.MonkeyPatch, root: Path, capacity: int) -> None:
    """A disk of ``capacity`` bytes holding only what is written under ``root``."""
    import os

    from ._faults import Usage

    def usage(p):
        used = sum(os.lstat(os.path.join(d, f)).st_size for d, _, fs in os.walk(root) for f in fs)
        return Usage(capacity, used, max(capacity - used, 0))

    monkeypatch.setattr("mathneuro_edit.util.outdir.shutil.disk_usage", usage)


def test_disk_full_names_the_size_the_write_needed(ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The partial file is not counted against the free space, and a folder's message counts the file that
    failed: `calibrate` into a 5 MB disk that needs 6 MB says free 1 MB (not 4: what the partial file took)."""
    import errno

    import torch

    import mathneuro_edit.engine.stats as stats_mod
    from mathneuro_edit.engine.stats import ActivationStats

    real_load = ActivationStats.load
    disk = tmp_path / "disk"
    disk.mkdir()

    from mathneuro_edit.util.files import atomic_writer

    def half_then_full(tensors, filename, metadata=None):
        need = sum(t.numel() * t.element_size() for t in tensors.values())
        with atomic_writer(filename) as f:  # as the real writer: the partial file is its temporary file
            f.write(bytes(need // 2))  # the disk fills halfway through the file
            f.flush()
            raise OSError(errno.ENOSPC, "No space left on device")

    stats = real_load(ws / "stats" / "math.stats.safetensors")
    big = 6 * 10**6 // 8
    stats.norm_sum["pad"], stats.sq_sum["pad"] = torch.zeros(1, big), torch.zeros(1, big)
    stats.token_count["pad"] = torch.zeros(1, dtype=torch.int64)
    needed = sum(
        t.numel() * t.element_size() for d in (stats.norm_sum, stats.sq_sum, stats.token_count) for t in d.values()
    )
    monkeypatch.setattr(stats_mod, "save_file", half_then_full)
    _small_disk(monkeypatch, disk, 5 * 10**6)
    from mathneuro_edit.errors import InputError

    with pytest.raises(InputError) as err:
        stats.save(disk / "math.stats.safetensors")
    mb = -(-(needed - 5 * 10**6) // 10**6)
    assert str(err.value) == (
        f"no space left on device writing {disk / 'math.stats.safetensors'}; free {mb} MB or choose another --out"
    )
    assert list(disk.iterdir()) == []
    from mathneuro_edit.util.outdir import atomic_dir

    with pytest.raises(InputError) as err:  # inside an output folder: the folder, and the file's bytes
        with atomic_dir(disk / "out", overwrite=False) as tmp:
            stats.save(tmp / "math.stats.safetensors")
    assert str(err.value) == f"no space left on device writing {disk / 'out'}; free {mb} MB or choose another --out"


@pytest.mark.parametrize(
    ("free", "needed", "said"),
    [
        (0, None, "no space left on device writing OUT (0 bytes free there); make room or choose another --out"),
        (0, 0, "no space left on device writing OUT (0 bytes free there); make room or choose another --out"),
        (4096, 100, "no space left on device writing OUT (4,096 bytes free there); make room or choose another --out"),
        (7 * 10**6, 10**6, "no space left on device writing OUT (7 MB free there); make room or choose another --out"),
        (0, 1, "no space left on device writing OUT; free 1 MB or choose another --out"),
        (10**6, 3 * 10**6 + 1, "no space left on device writing OUT; free 3 MB or choose another --out"),
    ],
)
def test_a_full_disk_says_what_is_free_when_the_need_is_not_known(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, free: int, needed: int | None, said: str
) -> None:
    """Issue 48: a disk with 0 bytes free said "free 1 MB" when the write's size was not known (a made-up
    number); it says what is free then, and what is missing only when that is known."""
    import errno
    from collections import namedtuple

    from mathneuro_edit.util.outdir import space_message

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr("mathneuro_edit.util.outdir.shutil.disk_usage", lambda p: usage(10**9, 10**9 - free, free))
    out = tmp_path / "OUT"
    message = space_message(OSError(errno.ENOSPC, "No space left on device"), out, needed)
    assert message == said.replace("OUT", str(out))


# ------------------------------------------------------------------------------------------- text from file names


def test_a_data_file_name_cannot_inject_text_into_the_card_or_its_command(mine: Path, tmp_path: Path) -> None:
    evil_name = "m;touch PWNED\n## Injected heading `x` | y.txt"
    evil = mine / evil_name
    shutil.copy(mine / "math.txt", evil)
    r = yaml.safe_load((mine / "recipe.yaml").read_text())
    r["data"]["math"]["path"] = str(evil)
    r["outputs"]["adapter"], r["evaluation"] = False, None
    (tmp_path / "evil.yaml").write_text(yaml.safe_dump(r))
    code, text = _cli("run", tmp_path / "evil.yaml", "--out", tmp_path / "o", "-q")
    assert code == 0, text
    card = (tmp_path / "o" / "checkpoint" / "README.md").read_text()
    assert "\n## Injected heading" not in card  # no line of the card starts with the file name's text
    (command,) = [ln for ln in card.splitlines() if ln.startswith("mathneuro-edit reproduce")]
    # the printed command, run by bash as a user would paste it (its program replaced by printf): one argument,
    # exactly the name, and `;` runs nothing
    import subprocess

    shown = subprocess.run(
        ["bash", "-c", "printf '%s\\0' " + command.removeprefix("mathneuro-edit reproduce ")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"BASE_MODEL_DIR": "b"},
    )
    assert f"data.math.path={evil_name}" in shown.stdout.split("\0"), shown
    assert not (tmp_path / "PWNED").exists()
    (row,) = [ln for ln in card.splitlines() if ln.startswith("| `data.math.path`")]
    assert row.count(" | ") == 2 and "\\n" in row, row  # three cells; the newline shown escaped


@pytest.mark.parametrize("name", ["../../x.gguf", "/abs/x.gguf", "sub/../../x.gguf", "~/x.gguf"])
def test_a_gguf_file_names_a_file_inside_the_model_folder(name: str) -> None:
    code, text = _cli("plan", "--set", "base.model=org/repo", "--set", f"base.gguf_file={name}")
    assert code == 2 and "not a path out of it" in _error_line(text), text


@pytest.mark.parametrize("how", ["moved", "phantom"])
def test_a_shard_index_that_contradicts_the_shards_is_exit_2(ws: Path, tmp_path: Path, how: str) -> None:
    base = _sharded(ws, tmp_path, f"idx-{how}")
    index = base / "model.safetensors.index.json"
    data = json.loads(index.read_text())
    shards = sorted(set(data["weight_map"].values()))
    name = next(k for k, v in data["weight_map"].items() if v == shards[0])
    if how == "moved":
        data["weight_map"][name] = shards[1]  # the index says another shard holds it
    else:
        data["weight_map"]["model.layers.9.mlp.up_proj.weight"] = shards[0]  # a tensor no shard holds
    index.write_text(json.dumps(data))
    r = yaml.safe_load((ws / "recipe.yaml").read_text())
    r["base"]["model"] = str(base)
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(r))
    for args in (
        ["calibrate", tmp_path / "r.yaml", "--out", tmp_path / "o"],
        ["export", tmp_path / "r.yaml", "--mask", ws / "mask.safetensors", "--out", tmp_path / "o"],
    ):
        code, text = _cli(*args, "-q")
        assert code == 2 and "the index and the shards are from different saves" in _error_line(text), text
