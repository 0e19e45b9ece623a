"""A `kill` (SIGTERM) while the GGUF file is being written ends the command as every other SIGTERM does: exit 143,
"terminated by SIGTERM", and nothing left behind (no output folder, no temporary folder or file, no lock)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

pytest.importorskip("gguf")

from mathneuro_edit.engine.mask import Mask  # noqa: E402
from mathneuro_edit.organism import organism_path  # noqa: E402

_CHILD = """
import sys, time
import mathneuro_edit.weights.gguf_writer as gguf_writer
real = gguf_writer._encode
def slow(*a, **k):
    time.sleep(30)
    return real(*a, **k)
gguf_writer._encode = slow
from mathneuro_edit.cli.main import main
main(sys.argv[1:])
"""


def test_sigterm_during_the_gguf_write_exits_143_and_leaves_nothing(tmp_path: Path) -> None:
    sd = load_file(str(organism_path() / "model.safetensors"))
    mask = {
        k: torch.zeros_like(v, dtype=torch.bool).index_fill_(0, torch.tensor([0]), True)
        for k, v in sd.items()
        if v.ndim == 2 and k.endswith("proj.weight")
    }
    Mask(mask, {"method": "mathneuro"}).save(tmp_path / "mask.safetensors")
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "MATHNEURO_EDIT_DEBUG": "", "OMP_NUM_THREADS": "1"}
    p = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _CHILD,
            "export",
            "--mask",
            str(tmp_path / "mask.safetensors"),
            "--out",
            str(work / "o"),
            "--gguf",
            "F32",
            "-q",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.time() + 240
        while not list(work.glob("**/*.gguf*")) and time.time() < deadline and p.poll() is None:
            time.sleep(0.1)
        assert list(work.glob("**/*.gguf*")), ("the GGUF write never started", p.poll())
        time.sleep(1)  # inside the write (each tensor waits 30 s)
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=60)
    finally:
        p.kill()
    assert p.returncode == 143, err
    assert err.strip().splitlines()[-1] == "error: terminated by SIGTERM; no output was left behind", err
    assert list(work.iterdir()) == []  # no output, no temporary folder or file, no lock
