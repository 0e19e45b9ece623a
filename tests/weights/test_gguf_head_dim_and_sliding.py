"""Two GGUF export rules no test pinned (issue 41, the mutation audit's untested behaviours):

- a family whose ``head_dim`` is not ``hidden_size / num_attention_heads`` (Qwen3, Gemma 2, a Llama with its own
  ``head_dim``) writes ``attention.key_length`` and ``attention.value_length`` (llama.cpp otherwise takes
  hidden / heads for both and cannot load the q/k/v/o shapes); one whose ``head_dim`` is hidden / heads writes
  neither, as llama.cpp's converter does;
- a SmolLM3 config with ``use_sliding_window: true`` is refused by the GGUF export with one line (llama.cpp's
  SMOLLM3 attends over the whole context: its file would compute another model), by ``run`` before anything is
  computed and by the public ``export_gguf``.

The tiny models are the family matrix's shapes (tests/_family_shapes.py) with the organism's tokenizer.
docs/testing.md ("Behaviours tested in round 4") says which break each test was seen failing on.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from mathneuro_edit import InputError, export_gguf
from mathneuro_edit.cli.main import main
from tests._families import save_family_base
from tests._family_shapes import family_shape

gguf = pytest.importorskip("gguf")

SLIDING = "use_sliding_window is set but llama.cpp's SMOLLM3 attends over the whole context"


def _fields(path: Path) -> dict:
    return {k: v.contents() for k, v in gguf.GGUFReader(str(path)).fields.items()}


def _llama_with_head_dim(head_dim: int):
    shape = family_shape("Llama 3.x")
    return dataclasses.replace(shape, name=f"Llama, head_dim {head_dim}", kwargs={**shape.kwargs, "head_dim": head_dim})


@pytest.mark.parametrize(
    "shape,arch",
    [
        (family_shape("Qwen3"), "qwen3"),
        (family_shape("Gemma 2"), "gemma2"),
        (_llama_with_head_dim(32), "llama"),
    ],
    ids=lambda x: getattr(x, "name", x),
)
def test_a_head_dim_that_is_not_hidden_over_heads_writes_key_and_value_lengths(tmp_path, shape, arch) -> None:
    cfg = shape.config()
    head_dim = int(cfg.head_dim)
    assert head_dim != cfg.hidden_size // cfg.num_attention_heads
    base = save_family_base(tmp_path / "base", shape)
    f = _fields(export_gguf(base, "F32", tmp_path / "m.gguf"))
    assert f["general.architecture"] == arch
    assert f[f"{arch}.attention.key_length"] == head_dim
    assert f[f"{arch}.attention.value_length"] == head_dim


def test_a_head_dim_of_hidden_over_heads_writes_neither(tmp_path) -> None:
    shape = family_shape("Llama 3.x")
    cfg = shape.config()
    assert cfg.head_dim == cfg.hidden_size // cfg.num_attention_heads
    f = _fields(export_gguf(save_family_base(tmp_path / "base", shape), "F32", tmp_path / "m.gguf"))
    assert "llama.attention.key_length" not in f and "llama.attention.value_length" not in f


# ------------------------------------------------------------------------ SmolLM3 with a sliding window


def _smollm3(tmp_path: Path, sliding: bool) -> Path:
    base = save_family_base(tmp_path / "base", family_shape("SmolLM3"))
    cfg = json.loads((base / "config.json").read_text())
    cfg["use_sliding_window"] = sliding
    cfg["sliding_window"] = 16
    (base / "config.json").write_text(json.dumps(cfg))
    return base


def _error_line(text: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert "Traceback" not in text and len([ln for ln in lines if ln.startswith("error: ")]) == 1, text
    return next(ln for ln in lines if ln.startswith("error: "))


def test_smollm3_with_a_sliding_window_is_refused_by_run_in_one_line_before_any_work(tmp_path) -> None:
    base = _smollm3(tmp_path, sliding=True)
    recipe = {
        "base": {"model": str(base), "dtype": "float32", "device": "cpu"},
        "data": {"math": "organism:math", "general": ["organism:general"], "samples": 4, "seed": 0},
        "calibration": {"max_length": 32, "batch_size": 4},
        "mask": {"top_k": 0.1},
        "edit": {"scale": 1.1},
        "outputs": {"checkpoint": True, "gguf": "F32"},
    }
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(recipe))
    result = CliRunner().invoke(main, ["run", str(tmp_path / "r.yaml"), "--out", str(tmp_path / "out"), "-q"])
    assert result.exit_code == 2, result.output
    line = _error_line(result.output)
    assert SLIDING in line and "set outputs.gguf: null" in line, line
    assert not (tmp_path / "out").exists()  # refused from the plan: nothing calibrated, nothing written


def test_smollm3_with_a_sliding_window_is_refused_by_export_gguf(tmp_path) -> None:
    with pytest.raises(InputError, match=f"^outputs\\.gguf: this smollm3 config .*{SLIDING}") as caught:
        export_gguf(_smollm3(tmp_path, sliding=True), "F32", tmp_path / "m.gguf")
    assert "\n" not in str(caught.value)
    assert not (tmp_path / "m.gguf").exists()


def test_smollm3_without_a_sliding_window_is_written(tmp_path) -> None:
    f = _fields(export_gguf(_smollm3(tmp_path, sliding=False), "F32", tmp_path / "m.gguf"))
    assert f["general.architecture"] == "smollm3"
