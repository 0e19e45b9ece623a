"""Untrusted input and faults: no repository code without opt-in, no run clobbers another, every failure is
one clear line with exit 2, and nothing is left behind. docs/reliability.md lists what each test promises."""

from __future__ import annotations

import errno
import json
import multiprocessing
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from safetensors.torch import load_file, save_file

from mathneuro_edit.cli.main import main
from mathneuro_edit.errors import InputError
from tests._fakehub import TOKEN, _committed, relock
from tests._models import hash_tree
from tests._tiny import GENERAL, MATH


def _cli(*args: str, input: str | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(main, [str(a) for a in args], input=input)
    return result.exit_code, result.output


def _error_line(text: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.startswith("error: ")]
    assert len(lines) == 1, text
    return lines[0]


def _recipe_for(ws: Path, base: Path, name: str, **base_extra) -> Path:
    r = yaml.safe_load((ws / "recipe.yaml").read_text())
    r["base"]["model"] = str(base)
    r["base"].update(base_extra)
    path = ws / name
    path.write_text(yaml.safe_dump(r))
    return path


# ------------------------------------------------------------------------------------------- recipe types


@pytest.mark.parametrize(
    "override",
    [
        "calibration.batch_size=true",
        "data.samples=true",
        'edit.prune="yes"',
        "data.seed=1.5",
        'outputs.adapter="no"',
        "hub.private=1",
    ],
)
def test_recipe_ints_and_bools_are_strict(override: str) -> None:
    code, text = _cli("plan", "--set", override)
    assert code == 2, text
    assert "input should be a valid" in _error_line(text)


def test_recipe_keeps_ints_for_floats_and_numbers_for_strings() -> None:
    from mathneuro_edit.recipe.io import quickstart_recipe

    r = quickstart_recipe(("edit.scale=1", "mask.top_k=1", "base.revision=1234"))
    assert r.edit.scale == 1.0 and r.mask.top_k == 1.0 and r.base.revision == "1234"


# ------------------------------------------------------------------------------------------- remote code


def test_repository_code_never_runs_without_opt_in(ws: Path, evil: tuple[Path, Path], tmp_path: Path) -> None:
    base, marker = evil
    recipe = _recipe_for(ws, base, "evil.yaml")
    commands = {
        "run": ["run", recipe, "--out", tmp_path / "o-run"],
        "calibrate": ["calibrate", recipe, "--out", tmp_path / "o-stats"],
        "mask": ["mask", recipe, "--stats", ws / "stats", "--out", tmp_path / "o-mask.safetensors"],
        "export": ["export", recipe, "--mask", ws / "mask.safetensors", "--out", tmp_path / "o-ckpt"],
        "export --adapter": [
            "export",
            recipe,
            "--mask",
            ws / "mask.safetensors",
            "--out",
            tmp_path / "o-ad",
            "--adapter",
        ],
        "eval": ["eval", recipe],
        "verify": ["verify", ws / "run", "--base", base],
        "reproduce": [
            "reproduce",
            ws / "run",
            "--base",
            base,
            "--out",
            tmp_path / "o-repro",
            "--set",
            f"data.math.path={ws / 'math.txt'}",
            "--set",
            f"data.general.0.path={ws / 'general.txt'}",
            "--set",
            f"evaluation.math.path={ws / 'eval.jsonl'}",
            "--set",
            f"evaluation.general.0.path={ws / 'general.txt'}",
        ],
        "plan": ["plan", recipe],
        "consistency": ["consistency", recipe, "--out", tmp_path / "o-cons", "--sizes", "1", "--repeats", "1"],
        "sweep": [
            "sweep",
            recipe,
            "--out",
            tmp_path / "o-sweep",
            "--top-k",
            "0.1",
            "--scale",
            "1.1",
            "--set",
            "sweep.selection_samples=1",
            "--set",
            "sweep.confirmation_samples=2",
        ],  # eval.jsonl: 3
    }
    for name, args in commands.items():
        quiet = [] if name in ("verify", "plan") else ["-q"]
        code, text = _cli(*args, *quiet, input="y\n" * 50)
        assert code == 2, (name, text)
        assert "base.trust_remote_code: true" in _error_line(text), (name, text)
        assert not marker.exists(), f"{name} ran the repository's code"
    assert hash_tree(base) == hash_tree(ws / "base") | {
        "evil.py": hash_tree(base)["evil.py"],
        "config.json": hash_tree(base)["config.json"],
    }


def test_repository_code_with_yes_on_a_real_terminal_stdin(ws: Path, evil: tuple[Path, Path], tmp_path: Path) -> None:
    """The reported case exactly: `yes | mathneuro-edit export ...` in a shell."""
    base, marker = evil
    recipe = _recipe_for(ws, base, "evil2.yaml")
    cmd = (
        f"yes | {sys.executable} -m mathneuro_edit.cli export {recipe} --mask {ws / 'mask.safetensors'} "
        f"--out {tmp_path / 'o'} -q"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, env=env, timeout=300)
    assert not marker.exists(), "the repository's code ran"
    assert proc.returncode == 2, proc.stderr
    assert "base.trust_remote_code: true" in proc.stderr


def test_opting_in_runs_the_repository_code(ws: Path, evil: tuple[Path, Path], tmp_path: Path) -> None:
    base, marker = evil
    code, text = _cli(
        "export",
        _recipe_for(ws, base, "trusted.yaml", trust_remote_code=True),
        "--mask",
        ws / "mask.safetensors",
        "--out",
        tmp_path / "o",
        "-q",
    )
    assert code == 0, text
    assert marker.exists()  # asked for: the repository's class built the model


def test_hub_repo_needing_remote_code_is_one_line_with_the_fix() -> None:
    from mathneuro_edit.weights.remote_code import remote_code_error

    err = ValueError(
        "The repository x/y contains custom code which must be executed to correctly load the model. "
        "Please pass the argument `trust_remote_code=True` to allow custom code to be run."
    )
    got = remote_code_error("x/y", err)
    assert isinstance(got, InputError) and "base.trust_remote_code: true" in str(got)
    assert remote_code_error("x/y", ValueError("something else")) is None


# ------------------------------------------------------------------------------------------- publishing


def test_push_blanks_local_paths_at_any_depth(fake_hub, out_dir: Path) -> None:  # noqa: F811
    from mathneuro_edit.publish.hub import push_to_hub

    home = str(Path.home())
    tok_cfg = {
        "name_or_path": f"{home}/models/llama",
        "eos_token": "</s>",
        "chat_template": "{{ a / b }}",
        "added_tokens_decoder": {"1": {"content": "/s"}},
    }
    gen_cfg = {"bos_token_id": 1, "extra": {"source": "/srv/models/base/generation_config.json"}}
    cfg = {
        "model_type": "llava",
        "_name_or_path": "/data/me/llava",
        "text_config": {"_name_or_path": "/data/me/llava/text", "layers": [{"path": "~/x"}]},
    }
    for name, data in (("tokenizer_config.json", tok_cfg), ("generation_config.json", gen_cfg), ("config.json", cfg)):
        (out_dir / name).write_text(json.dumps(data))
    relock(out_dir)  # as a run would have written them
    before = hash_tree(out_dir)
    dry = push_to_hub(out_dir, "me/x", dry_run=True)
    assert set(dry.scrubbed) == {
        "tokenizer_config.json: name_or_path",
        "generation_config.json: extra.source",
        "config.json: _name_or_path",
        "config.json: text_config._name_or_path",
        "config.json: text_config.layers[0].path",
    }
    push_to_hub(out_dir, "me/x", token=TOKEN)
    sent = _committed(fake_hub)
    for name in ("tokenizer_config.json", "generation_config.json", "config.json"):
        text = sent[name].decode()
        assert home not in text and "/srv/" not in text and "/data/" not in text and "~/" not in text, text
    tok = json.loads(sent["tokenizer_config.json"])
    assert tok["chat_template"] == "{{ a / b }}" and tok["added_tokens_decoder"]["1"]["content"] == "/s"
    assert tok["name_or_path"] == ""
    assert hash_tree(out_dir) == before  # the local files are never modified


def test_statistics_do_not_depend_on_the_model_folder(ws: Path, tmp_path: Path) -> None:
    from mathneuro_edit import calibrate
    from mathneuro_edit.weights.loading import load_model

    shutil.copytree(ws / "base", tmp_path / "elsewhere" / "copy")
    hashes = []
    for folder in (ws / "base", tmp_path / "elsewhere" / "copy"):
        model, tok = load_model(str(folder), dtype="float32", device="cpu")
        stats = calibrate(model, tok, MATH[:3], max_length=32, progress=False)
        assert str(folder) not in json.dumps(stats.meta) and stats.meta["model_name"] == "<local>"
        hashes.append(stats.sha256)
    assert hashes[0] == hashes[1]


# ------------------------------------------------------------------------------------------- concurrency


def _slow_write(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    import mathneuro_edit.weights.checkpoint_writer as export_mod

    real = export_mod._write_shard

    def slow(*args, **kwargs):
        time.sleep(seconds)
        return real(*args, **kwargs)

    monkeypatch.setattr(export_mod, "_write_shard", slow)


def _child(args: list, result: Path, barrier) -> None:  # runs in a forked process
    try:
        if barrier is not None:
            barrier.wait(timeout=60)
        code, text = _cli(*args)
        result.write_text(json.dumps({"pid": os.getpid(), "code": code, "text": text}))
    finally:
        os._exit(0)


def _fork(args: list, result: Path, barrier=None) -> multiprocessing.Process:
    p = multiprocessing.get_context("fork").Process(target=_child, args=(args, result, barrier))
    p.start()
    return p


def test_two_runs_to_one_out_never_both_succeed(ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _slow_write(monkeypatch, 0.3)  # the winner holds the output long enough for the loser to see it
    ctx = multiprocessing.get_context("fork")
    for i in range(10):
        out = tmp_path / f"out{i}"
        args = ["export", ws / "recipe.yaml", "--mask", ws / "mask.safetensors", "--out", out, "-q"]
        barrier = ctx.Barrier(2)
        procs = [_fork(args, tmp_path / f"r{i}-{j}.json", barrier) for j in range(2)]
        for p in procs:
            p.join(120)
        res = [json.loads((tmp_path / f"r{i}-{j}.json").read_text()) for j in range(2)]
        codes = sorted(r["code"] for r in res)
        assert codes == [0, 2], res
        winner, loser = (res[0], res[1]) if res[0]["code"] == 0 else (res[1], res[0])
        line = _error_line(loser["text"])
        assert f"another run (pid {winner['pid']}" in line and "choose another --out" in line, line
        assert (out / "model.safetensors").is_file()
        assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(f".out{i}.")]  # no temp, no lock


@pytest.mark.parametrize("cmd", ["mask", "calibrate"])
def test_out_inside_the_base_folder_is_refused(ws: Path, cmd: str) -> None:
    before = hash_tree(ws / "base")
    if cmd == "mask":
        args = ["mask", ws / "recipe.yaml", "--stats", ws / "stats", "--out", ws / "base" / "model.safetensors"]
    else:
        args = ["calibrate", ws / "recipe.yaml", "--out", ws / "base" / "stats"]
    code, text = _cli(*args, "-q")
    assert code == 2 and "overlaps the base folder" in _error_line(text), text
    assert hash_tree(ws / "base") == before


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP"])
def test_sigterm_and_sighup_leave_no_temporary_folder(
    ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sig: str
) -> None:
    _slow_write(monkeypatch, 30)
    out = tmp_path / "o"
    p = _fork(
        ["export", ws / "recipe.yaml", "--mask", ws / "mask.safetensors", "--out", out, "-q"], tmp_path / "r.json"
    )
    deadline = time.time() + 60
    while not list(tmp_path.glob(".o.tmp-*")) and time.time() < deadline:
        time.sleep(0.05)
    assert list(tmp_path.glob(".o.tmp-*")), "the export never started"
    os.kill(p.pid, getattr(signal, sig))
    p.join(60)
    res = json.loads((tmp_path / "r.json").read_text())
    assert res["code"] == 128 + getattr(signal, sig) and f"terminated by {sig}" in _error_line(res["text"])
    assert sorted(x.name for x in tmp_path.iterdir()) == ["r.json"]  # no temp folder, no lock, no output


def test_a_temp_folder_left_by_kill_9_is_removed_by_the_next_run(
    ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import mathneuro_edit.weights.checkpoint_writer as export_mod

    real = export_mod._write_shard
    monkeypatch.setattr(export_mod, "_write_shard", lambda *a, **k: (time.sleep(30), real(*a, **k)))
    p = _fork(
        ["export", ws / "recipe.yaml", "--mask", ws / "mask.safetensors", "--out", tmp_path / "a", "-q"],
        tmp_path / "r.json",
    )
    deadline = time.time() + 60
    while not list(tmp_path.glob(".a.tmp-*")) and time.time() < deadline:
        time.sleep(0.05)
    (left,) = tmp_path.glob(".a.tmp-*")
    os.kill(p.pid, signal.SIGKILL)
    p.join(60)
    assert left.is_dir()  # kill -9 cannot clean up
    monkeypatch.setattr(export_mod, "_write_shard", real)
    (tmp_path / ".b.tmp-live").mkdir()  # a folder of a live run on this host is left alone
    (tmp_path / ".b.tmp-live" / ".mathneuro-edit-owner.json").write_text(
        json.dumps({"pid": os.getpid(), "host": os.uname().nodename})
    )
    code, text = _cli("export", ws / "recipe.yaml", "--mask", ws / "mask.safetensors", "--out", tmp_path / "a", "-q")
    assert code == 0, text
    assert f"removed {left}" in text and not left.exists() and (tmp_path / ".b.tmp-live").is_dir()
    # the dead run's lock file does not block: flock is released by the kernel
    assert not (tmp_path / ".a.lock").exists()


# ------------------------------------------------------------------------------------------- bad checkpoints


def _broken_base(ws: Path, tmp_path: Path, how: str) -> Path:
    base = tmp_path / f"base-{how}"
    shutil.copytree(ws / "base", base)
    f = base / "model.safetensors"
    raw = f.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + n])
    if how == "truncated":
        f.write_bytes(raw[: len(raw) - 100])
    elif how == "header-2^62":
        f.write_bytes((2**62).to_bytes(8, "little") + raw[8:])
    elif how == "size-vs-shape":
        name = next(k for k in header if k != "__metadata__" and "q_proj" in k)
        header[name]["shape"] = [header[name]["shape"][0] * 2, header[name]["shape"][1]]
        body = json.dumps(header).encode()
        body += b" " * (-len(body) % 8)
        f.write_bytes(len(body).to_bytes(8, "little") + body + raw[8 + n :])
    elif how == "missing-tensor":
        sd = load_file(str(f))
        del sd["model.layers.1.mlp.up_proj.weight"]
        save_file(sd, str(f), metadata={"format": "pt"})
    return base


@pytest.mark.parametrize("how", ["truncated", "header-2^62", "size-vs-shape"])
@pytest.mark.parametrize("cmd", ["export", "calibrate"])
def test_corrupt_shard_is_one_line_naming_file_and_tensor(ws: Path, tmp_path: Path, how: str, cmd: str) -> None:
    base = _broken_base(ws, tmp_path, how)
    recipe = _recipe_for(ws, base, f"broken-{how}.yaml")
    args = (
        ["export", recipe, "--mask", ws / "mask.safetensors", "--out", tmp_path / "o"]
        if cmd == "export"
        else ["calibrate", recipe, "--out", tmp_path / "o"]
    )
    code, text = _cli(*args, "-q")
    assert code == 2, text
    line = _error_line(text)
    assert str(base / "model.safetensors") in line, line
    if how != "header-2^62":
        assert "tensor model." in line, line
    assert not (tmp_path / "o").exists()


def test_missing_weights_are_an_error_not_random_init(ws: Path, tmp_path: Path) -> None:
    base = _broken_base(ws, tmp_path, "missing-tensor")
    code, text = _cli("calibrate", _recipe_for(ws, base, "missing.yaml"), "--out", tmp_path / "o", "-q")
    assert code == 2, text
    assert "model.layers.1.mlp.up_proj.weight" in _error_line(text)


def test_statistics_from_mixed_models_name_the_tensor(ws: Path, tmp_path: Path) -> None:
    from mathneuro_edit import calibrate
    from tests._tiny import build, char_tokenizer

    other, _ = build("llama", hidden_size=48)  # another model of the same family: same names, other shapes
    stats = tmp_path / "mixed"
    shutil.copytree(ws / "stats", stats)
    calibrate(other, char_tokenizer(), GENERAL[:3], max_length=32, progress=False).save(
        stats / "general-0.stats.safetensors"
    )
    code, text = _cli("mask", ws / "recipe.yaml", "--stats", stats, "--out", tmp_path / "m.safetensors", "-q")
    assert code == 2, text
    assert "general_stats[0]: 'model.layers.0.self_attn.q_proj.weight'" in _error_line(text)


# ------------------------------------------------------------------------------------------- disk faults


@pytest.mark.parametrize(
    "err,phrase",
    [
        (errno.ENOSPC, "no space left on device writing"),
        (errno.EDQUOT, "quota exceeded writing"),
        (errno.EROFS, "read-only file system: cannot write"),
    ],
)
def test_disk_full_quota_read_only_are_one_line(
    ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, err: int, phrase: str
) -> None:
    import mathneuro_edit.engine.stats as stats_mod
    import mathneuro_edit.weights.checkpoint_writer as export_mod

    def fail(*args, **kwargs):
        raise OSError(err, os.strerror(err))

    monkeypatch.setattr(export_mod, "_write_shard", fail)
    out = tmp_path / "ckpt"
    code, text = _cli("export", ws / "recipe.yaml", "--mask", ws / "mask.safetensors", "--out", out, "-q")
    line = _error_line(text)
    assert code == 2 and f"{phrase} {out}" in line and "choose another --out" in line, text
    if err != errno.EROFS:  # the disk here is not full: what is free, not a made-up need (issue 48)
        assert re.search(r" \((\d[\d,]*) (MB|bytes) free there\); make room or choose another --out$", line), line
    monkeypatch.setattr(stats_mod, "save_file", fail)  # the writer of masks (and statistics)
    m = tmp_path / "m.safetensors"
    code, text = _cli("mask", ws / "recipe.yaml", "--stats", ws / "stats", "--out", m, "-q")
    assert code == 2 and f"{phrase} {m}" in _error_line(text), text
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no temp folder, no lock, no half file


# ------------------------------------------------------------------------------------------- reports


def test_verify_finding_a_difference_exits_1_with_its_report_last(ws: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(ws / "run", run)
    f = run / "checkpoint" / "model.safetensors"
    sd = load_file(str(f))
    name = next(k for k in sd if "q_proj" in k)
    sd[name] = sd[name] + 1.0
    save_file(sd, str(f), metadata={"format": "pt"})
    code, text = _cli("verify", run, "--base", ws / "base")
    assert code == 1, text
    assert "internal error" not in text and "SystemExit" not in text
    assert "model.layers.0.self_attn.q_proj.weight: 1024 of 1024 entries differ" in text  # entries, not bytes
    assert text.strip().splitlines()[-1].startswith("verify: FAILED: checkpoint differ"), text


def test_reproduce_finding_a_difference_exits_1_with_its_report_last(ws: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(ws / "run", run)
    lock = run / "mathneuro_recipe.lock.yaml"
    data = yaml.safe_load(lock.read_text())
    data["mask_sha256"] = "0" * 64  # as if the recorded run had selected other weights
    lock.write_text(yaml.safe_dump(data, sort_keys=False))
    code, text = _cli(
        "reproduce",
        run,
        "--base",
        ws / "base",
        "--out",
        tmp_path / "again",
        "-q",
        "--set",
        f"data.math.path={ws / 'math.txt'}",
        "--set",
        f"data.general.0.path={ws / 'general.txt'}",
        "--set",
        f"evaluation.math.path={ws / 'eval.jsonl'}",
        "--set",
        f"evaluation.general.0.path={ws / 'general.txt'}",
    )
    assert code == 1, text
    assert "internal error" not in text and "SystemExit" not in text
    assert text.strip().splitlines()[-1].startswith("reproduced: NO"), text


def test_disk_full_reported_by_the_safetensors_writer_is_the_same_line(tmp_path: Path) -> None:
    from safetensors import SafetensorError

    from mathneuro_edit.util.outdir import as_space_error

    err = SafetensorError(
        'Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space left on device" })'
    )
    got = as_space_error(err, tmp_path / "m.safetensors", 5_000_000)
    assert got is not None and str(got).startswith(f"no space left on device writing {tmp_path / 'm.safetensors'}")
    assert as_space_error(SafetensorError("header too large"), tmp_path, None) is None
