"""A GGUF base transformers cannot load as its header says: the user sees one clear line, the error, last.

transformers prints a ``LOAD REPORT`` (a table of MISSING or MISMATCH keys, 15 lines for a file short of one block)
through its own logging handler, straight to the process's stderr, before our check refuses the load; a test
through CliRunner never sees it, so these run the real command in a subprocess. The report is held while the
load may fail and shown only with ``--verbose`` (or ``MATHNEURO_EDIT_DEBUG``), the error still last.
docs/reliability.md lists what each test promises."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests._gguf_e2e import write_recipe

pytest.importorskip("gguf")


def _gguf(path: Path, monkeypatch: pytest.MonkeyPatch, method: str, change) -> Path:
    """The tiny GGUF whose header value ``method`` writes is changed by ``change`` (the tensors stay right)."""
    import gguf

    from tests._gguf_tiny import tiny_llama, write_gguf

    with monkeypatch.context() as mp:
        real = getattr(gguf.GGUFWriter, method)
        mp.setattr(gguf.GGUFWriter, method, lambda self, n: real(self, change(n)))
        write_gguf(tiny_llama(), path)
    return path


def _cli(tmp_path: Path, *args: str, **env: str) -> tuple[int, list[str]]:
    environ = {
        **os.environ,
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
        "OMP_NUM_THREADS": "1",
        "MATHNEURO_EDIT_CACHE": str(tmp_path / "cache"),
        **env,
    }
    environ.pop("MATHNEURO_EDIT_DEBUG", None) if "MATHNEURO_EDIT_DEBUG" not in env else None
    proc = subprocess.run(
        [sys.executable, "-m", "mathneuro_edit.cli", *args], capture_output=True, text=True, env=environ, timeout=600
    )
    return proc.returncode, proc.stderr.splitlines()


def test_a_gguf_short_of_a_block_is_one_error_line_without_transformers_load_report(tmp_path, monkeypatch):
    path = _gguf(tmp_path / "short.gguf", monkeypatch, "add_block_count", lambda n: n + 1)  # promises 3 of 2
    recipe = write_recipe(tmp_path, path, evaluate=False, adapter=False)
    code, lines = _cli(tmp_path, "run", str(recipe), "--out", str(tmp_path / "out"), "-q")
    assert code == 2 and len(lines) == 1, lines  # was 15 lines of transformers' table, then ours
    assert lines[0].startswith("error: base.model 'short.gguf'") and "model.layers.2." in lines[0], lines
    code, lines = _cli(tmp_path, "run", str(recipe), "--out", str(tmp_path / "out"))  # stage lines, then the error
    assert code == 2 and lines[-1].startswith("error: ") and not any("LOAD REPORT" in s or "|" in s for s in lines)
    assert not (tmp_path / "out").exists()


def test_a_gguf_whose_tensors_do_not_fit_its_header_names_the_mismatch_in_its_one_line(tmp_path, monkeypatch):
    path = _gguf(tmp_path / "wide.gguf", monkeypatch, "add_embedding_length", lambda n: 2 * n)
    code, lines = _cli(tmp_path, "dequantize", str(path))
    assert code == 2 and len(lines) == 1, lines
    # transformers' own message points at "the above report", which is not shown: the line carries its gist
    assert "above report" not in lines[0] and "model.embed_tokens.weight: MISMATCH" in lines[0], lines
    assert "ckpt: torch.Size([262, 64]) vs model:torch.Size([262, 128])" in lines[0], lines
    for flag, env in ((["--verbose"], {}), ([], {"MATHNEURO_EDIT_DEBUG": "1"})):  # shown on demand, error last
        code, lines = _cli(tmp_path, "dequantize", *flag, str(path), **env)
        assert code == 2 and any("LOAD REPORT" in s for s in lines) and lines[-1].startswith("error: "), lines
    assert not list((tmp_path / "cache").rglob("config.json"))
