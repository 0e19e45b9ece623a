"""Lines a library prints that nobody asked for, from common inputs: none without ``--verbose``, all with it.

transformers logs through its own handler, bound to the process's stderr when it is imported, so a CliRunner test
never sees these lines: the commands run in a subprocess. docs/reliability.md lists what each test promises."""

from __future__ import annotations

import json
import logging
import logging.handlers
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# a base's generation_config.json as many on the Hub are: sampling flags, greedy by default, and a max_length
SAMPLING = {"do_sample": False, "temperature": 0.6, "top_p": 0.9, "max_length": 20}


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHONWARNINGS", "HF_HUB_DISABLE_PROGRESS"))}
    env.update(PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", MATHNEURO_EDIT_CACHE=str(cwd / "cache"))
    env.pop("MATHNEURO_EDIT_DEBUG", None)
    cmd = [sys.executable, "-m", "mathneuro_edit.cli", *args]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def _ours(stderr: str) -> list[str]:
    """The lines of ``stderr`` that are not the tool's own (stage lines ``[i/n] ...`` and notes indented under them)."""
    return [line for line in stderr.splitlines() if not (line[:1] == "[" and line[1:2].isdigit() or line[:2] == "  ")]


def test_a_base_s_generation_config_with_sampling_flags_and_max_length_prints_nothing_of_transformers(tmp_path):
    from tests._tiny import write_workspace

    recipe = write_workspace(tmp_path)
    gen = tmp_path / "base" / "generation_config.json"
    gen.write_text(json.dumps({**json.loads(gen.read_text()), **SAMPLING}))
    args = ("eval", str(recipe), "--set", "evaluation.samples=2")
    proc = _cli(tmp_path, *args)
    assert proc.returncode == 0, proc.stderr
    # were "[transformers] The following generation flags are not valid and may be ignored: ['temperature',
    # 'top_p']. ..." at the load and "[transformers] Both `max_new_tokens` (=8) and `max_length`(=20) seem to
    # have been set. ..." at the first generation
    assert _ours(proc.stderr) == [], proc.stderr
    shown = _cli(tmp_path, *args, "--verbose").stderr
    assert "generation flags are not valid" in shown and "Both `max_new_tokens` (=8) and `max_length`(=20)" in shown


def test_known_log_lines_are_dropped_only_inside_only_by_logger_and_message_start():
    from mathneuro_edit.util.console import KNOWN_LOG_LINES, quiet_libraries

    name, start, _why = KNOWN_LOG_LINES[0]
    handler = logging.handlers.BufferingHandler(100)
    known, other = logging.getLogger(name), logging.getLogger(f"{name}.other")
    known.addHandler(handler)  # the other logger's records reach it too: they propagate
    try:
        with quiet_libraries():
            known.warning(f"{start}: ['temperature']")  # dropped
            known.warning("something else")  # another message of that logger: shown
            other.warning(f"{start}: ['top_p']")  # the same message from another logger: shown
        known.warning(f"{start}: after")  # after the block: shown
        with quiet_libraries(verbose=True):
            known.warning(f"{start}: verbose")  # --verbose: shown
    finally:
        known.removeHandler(handler)
    seen = [f"{record.name}: {record.getMessage()[:12]}" for record in handler.buffer]
    assert seen == [
        f"{name}: something el",
        f"{name}.other: {start[:12]}",
        f"{name}: {start[:12]}",
        f"{name}: {start[:12]}",
    ], seen


def test_plan_and_card_of_a_gguf_base_print_no_bars_of_its_first_dequantization(tmp_path):
    pytest.importorskip("gguf")
    from tests._gguf_e2e import write_recipe
    from tests._gguf_tiny import tiny_llama, write_gguf

    gguf = tmp_path / "tiny.gguf"
    write_gguf(tiny_llama(), gguf)
    recipe = write_recipe(tmp_path, gguf, evaluate=False, adapter=False)
    proc = _cli(tmp_path, "plan", str(recipe))  # was transformers' three bars: "Converting and de-quantizing GGUF
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr  # tensors...", "Loading weights", "Writing ..."
    assert proc.stdout.startswith("model: llama")
    assert _cli(tmp_path, "run", str(recipe), "--out", "run", "-q").returncode == 0
    for cache in (tmp_path / "cache").iterdir():  # card's own first dequantization
        cache.rename(tmp_path / f"old-{cache.name}")
    proc = _cli(tmp_path, "card", "run", "--base", str(gguf))
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    for cache in (tmp_path / "cache").iterdir():
        cache.rename(tmp_path / f"old2-{cache.name}")
    assert "de-quantizing GGUF tensors" in _cli(tmp_path, "plan", str(recipe), "--verbose").stderr
