"""Every small file read from a folder someone else may have made goes through one regular-file reader
(:mod:`mathneuro_edit.util.reading`): a FIFO is never opened for reading (it blocked), a link to /dev/zero or an
oversized file is refused before it is read (it exhausted memory), and JSON nested 100,000 deep is one line (it was
an internal RecursionError). Issue 41, class 10: the sweep's statistics cache and a base's tokenizer_config.json
were read without the check config.json got; the reader is now that check, shared."""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from pathlib import Path

import pytest

from mathneuro_edit.errors import InputError
from mathneuro_edit.recipe.io import quickstart_recipe
from mathneuro_edit.util.config_sizes import check_config_file_sizes
from mathneuro_edit.util.reading import read_json, read_regular
from mathneuro_edit.weights.checkpoint_writer import published_bytes
from mathneuro_edit.weights.remote_code import check_remote_code

DEEP = "[" * 100_000 + "]" * 100_000


class _Unblocker:
    """Writes into a FIFO after ``seconds`` if the code under test opened it for reading (then the test fails)."""

    def __init__(self, fifo: Path, seconds: float = 15) -> None:
        self.needed = False

        def run() -> None:
            time.sleep(seconds)
            self.needed = True
            try:
                fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
                os.write(fd, b"{}")
                os.close(fd)
            except OSError:
                pass  # nobody reads it: nothing blocked

        threading.Thread(target=run, daemon=True).start()


def _fifo(path: Path) -> _Unblocker:
    if path.exists() or path.is_symlink():
        path.unlink()
    os.mkfifo(path)
    return _Unblocker(path)


def test_the_reader_refuses_what_is_not_a_small_regular_file(tmp_path: Path) -> None:
    unblock = _fifo(tmp_path / "fifo.json")
    with pytest.raises(InputError, match=r"fifo\.json: not a regular file \(a FIFO, device or folder\); fix it"):
        read_regular(tmp_path / "fifo.json", 100, "a file", "fix it")
    assert not unblock.needed
    (tmp_path / "zero.json").symlink_to("/dev/zero")
    with pytest.raises(InputError, match="zero.json: not a regular file"):
        read_json(tmp_path / "zero.json", 100, "a file", "fix it")
    (tmp_path / "big.json").write_text("1" * 101)
    with pytest.raises(InputError, match=r"big\.json: 101 bytes, more than a file holds \(100\); fix it"):
        read_json(tmp_path / "big.json", 100, "a file", "fix it")
    (tmp_path / "deep.json").write_text(DEEP)
    with pytest.raises(InputError, match=r"deep\.json: nested too deep to be a file; fix it"):
        read_json(tmp_path / "deep.json", 1 << 20, "a file", "fix it")
    with pytest.raises(InputError, match="not a regular file"):
        read_json(tmp_path, 100, "a file", "fix it")
    with pytest.raises(FileNotFoundError):  # the caller's to decide (a missing tokenizer_config.json is normal)
        read_json(tmp_path / "missing.json", 100, "a file", "fix it")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError) as e:
        read_json(tmp_path / "bad.json", 100, "a file", "fix it")
    assert not isinstance(e.value, InputError)
    (tmp_path / "ok.json").write_text('{"a": [1]}')
    assert read_json(tmp_path / "ok.json", 100, "a file", "fix it") == {"a": [1]}


@pytest.fixture()
def base(ws: Path, tmp_path: Path) -> Path:
    folder = tmp_path / "base"
    shutil.copytree(ws / "base", folder)
    return folder


@pytest.mark.parametrize("name", ["tokenizer_config.json", "config.json"])
def test_a_fifo_or_dev_zero_in_a_base_folder_is_one_line(base: Path, name: str) -> None:
    unblock = _fifo(base / name)
    with pytest.raises(InputError, match=rf"{name}: not a regular file"):
        check_remote_code(base, False)  # every command that reads a base checks it first
    with pytest.raises(InputError, match=rf"{name}: not a regular file"):
        published_bytes(base, name, "float32")  # what export writes beside the weights
    assert not unblock.needed, "blocked on the FIFO"
    (base / name).unlink()
    (base / name).symlink_to("/dev/zero")
    with pytest.raises(InputError, match=rf"{name}: not a regular file"):
        check_remote_code(base, False)


def test_a_deeply_nested_config_json_is_one_line(base: Path) -> None:
    (base / "config.json").write_text(DEEP)
    with pytest.raises(InputError, match="config.json: nested too deep to be a config.json"):
        check_config_file_sizes(base)
    (base / "config.json").write_text('{"model_type": "llama", "x": ' + DEEP + "}")
    with pytest.raises(InputError, match="nested too deep"):
        check_remote_code(base, False)


def test_the_cli_says_it_in_one_line(base: Path, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from mathneuro_edit.cli.main import main

    unblock = _fifo(base / "tokenizer_config.json")
    result = CliRunner().invoke(main, ["plan", "--set", f"base.model={base}"])
    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.output.splitlines() if ln.startswith("error: ")]
    assert len(lines) == 1 and "tokenizer_config.json: not a regular file" in lines[0], result.output
    assert not unblock.needed


class _Stop(BaseException):
    """Ends a sweep once its statistics are calibrated (the rest is not what is tested)."""


def _sweep_to_its_statistics(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mathneuro_edit.runs.sweep import search as sweep_mod

    def stop(*a, **k):
        raise _Stop

    monkeypatch.setattr(sweep_mod, "recipe_masks", stop)
    recipe = quickstart_recipe(
        ["evaluation.math=arithmetic", "data.samples=4", "sweep.top_k=[0.01]", "sweep.scale=[1.1]"]
    )
    with pytest.raises(_Stop):
        sweep_mod.run_sweep(recipe, folder, progress=False)


@pytest.mark.parametrize("damage", ["fifo statistics", "dev-zero statistics", "huge key", "deep key"])
def test_the_sweep_s_statistics_cache_is_read_through_the_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    folder = tmp_path / "s"
    _sweep_to_its_statistics(folder, monkeypatch)
    key = sorted((folder / "stats").glob("*.key.json"))[0]
    stats = key.with_name(key.name.replace(".key.json", ".stats.safetensors"))
    unblock = None
    if damage == "fifo statistics":
        unblock = _fifo(stats)
    elif damage == "dev-zero statistics":
        stats.unlink()
        stats.symlink_to("/dev/zero")
    elif damage == "huge key":
        key.write_text(json.dumps({"key": "x" * (2 << 20)}))
    else:
        key.write_text(DEEP)
    start = time.monotonic()
    with pytest.raises(InputError) as e:
        _sweep_to_its_statistics(folder, monkeypatch)
    assert time.monotonic() - start < 60 and (unblock is None or not unblock.needed)
    why = {
        "fifo statistics": "not a regular file",
        "dev-zero statistics": "not a regular file",
        "huge key": "more than a sweep cache key file holds",
        "deep key": "nested too deep to be a sweep cache key file",
    }[damage]
    assert why in str(e.value) and "delete both and run the same command again" in str(e.value), e.value


def test_push_s_card_reads_eval_json_and_tokenizer_config_through_the_reader(ws: Path, tmp_path: Path) -> None:
    """push renders the card again from the folder: its eval.json (outside the lock) and its tokenizer_config.json
    (is there a chat template?) were read raw: a FIFO hung, a deep or non-object eval.json was an internal error."""
    from mathneuro_edit.publish.card import card_for_folder

    folder = Path(shutil.copytree(ws / "run" / "checkpoint", tmp_path / "checkpoint"))
    (folder / "eval.json").write_text(DEEP)
    with pytest.raises(InputError, match=r"eval\.json: nested too deep to be an eval\.json"):
        card_for_folder(folder)
    (folder / "eval.json").write_text("[1, 2]")
    with pytest.raises(InputError, match=r"eval\.json: not an eval\.json \(a JSON object of tasks\)"):
        card_for_folder(folder)
    (folder / "eval.json").write_text("{not json")
    with pytest.raises(InputError, match=r"eval\.json: not JSON"):
        card_for_folder(folder)
    (folder / "eval.json").unlink()
    (folder / "chat_template.jinja").unlink(missing_ok=True)  # then the template is looked for in this file
    unblock = _fifo(folder / "tokenizer_config.json")
    with pytest.raises(InputError, match="tokenizer_config.json: not a regular file"):
        card_for_folder(folder)
    assert not unblock.needed


def test_a_statistics_header_nested_too_deep_is_one_line(ws: Path, tmp_path: Path) -> None:
    from safetensors import safe_open
    from safetensors.torch import save_file

    from mathneuro_edit.engine.stats import ActivationStats

    path = tmp_path / "math.stats.safetensors"
    with safe_open(str(ws / "stats" / "math.stats.safetensors"), framework="pt") as f:
        meta, tensors = f.metadata(), {k: f.get_tensor(k) for k in f.keys()}
    save_file(tensors, str(path), metadata={**meta, "mathneuro_edit": DEEP})
    with pytest.raises(InputError, match="unreadable statistics file \\(its header is nested too deep\\)"):
        ActivationStats.load(path)
