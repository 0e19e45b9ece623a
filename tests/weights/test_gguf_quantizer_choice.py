"""Which llama.cpp quantizer makes a K-quant (weights/gguf_quantize.py): llama-cpp-python, else a llama-quantize
program (MATHNEURO_EDIT_LLAMA_QUANTIZE, else PATH), else one line saying how to get one; and which float GGUF it is
made from. Milliseconds: nothing is quantized."""

from __future__ import annotations

import sys

import pytest

from mathneuro_edit import InputError
from mathneuro_edit.recipe.edit_sections import OutputsConfig
from mathneuro_edit.weights.gguf_quantize import find_quantizer, source_type


def _no_llama_cpp(monkeypatch, path: str) -> None:
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # import llama_cpp raises ImportError
    monkeypatch.delenv("MATHNEURO_EDIT_LLAMA_QUANTIZE", raising=False)
    monkeypatch.setenv("PATH", path)


def test_without_any_quantizer_one_line_says_how_to_get_one(monkeypatch, tmp_path) -> None:
    _no_llama_cpp(monkeypatch, str(tmp_path))
    with pytest.raises(InputError) as e:
        find_quantizer("Q4_K_M")
    assert str(e.value).startswith("outputs.gguf: Q4_K_M is made by llama.cpp's quantizer, and none was found")
    assert "pip install llama-cpp-python" in str(e.value) and "\n" not in str(e.value)


def test_a_llama_quantize_on_path_is_used_without_llama_cpp_python(monkeypatch, tmp_path) -> None:
    program = tmp_path / "llama-quantize"
    program.write_text("#!/bin/sh\nexit 0\n")
    program.chmod(0o755)
    _no_llama_cpp(monkeypatch, str(tmp_path))
    assert find_quantizer("Q6_K") == str(program)


def test_the_named_program_must_exist(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("MATHNEURO_EDIT_LLAMA_QUANTIZE", str(tmp_path / "missing"))
    with pytest.raises(InputError, match="MATHNEURO_EDIT_LLAMA_QUANTIZE: .* is not an executable program"):
        find_quantizer("Q4_K_M")


def test_the_float_source_holds_the_checkpoint_exactly() -> None:
    assert [source_type(d) for d in ("bfloat16", "float16", "float32", None)] == ["BF16", "F16", "F32", "F32"]


def test_outputs_gguf_is_a_type_or_a_list_of_distinct_types() -> None:
    assert OutputsConfig(gguf=["Q8_0", "Q4_K_M"]).gguf_types == ["Q8_0", "Q4_K_M"]
    assert OutputsConfig(gguf="Q6_K").gguf_types == ["Q6_K"] and OutputsConfig().gguf_types == []
    for bad in ([], ["Q8_0", "Q8_0"], ["Q7_K"]):
        with pytest.raises(ValueError):
            OutputsConfig(gguf=bad)
