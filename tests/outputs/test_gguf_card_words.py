"""What the GGUF repo's card says of its files, decided without a run (issue 48 item 2; milliseconds): float types
are "converted", any block type makes them "quantized" (close to the checkpoint's numbers, not equal to them), and
the repo is tagged for llama.cpp as a quantization of the edited checkpoint."""

from __future__ import annotations

import pytest

from mathneuro_edit.outputs.gguf import GGUF, UNQUANTIZED, requantized
from mathneuro_edit.outputs.registry import output


@pytest.mark.parametrize("types", [["F32"], ["F16"], ["BF16"], ["F32", "F16", "BF16"]])
def test_float_types_are_converted(types: list[str]) -> None:
    assert requantized(types) == "converted to " + ", ".join(types)


@pytest.mark.parametrize("types", [["Q8_0"], ["Q4_K_M"], ["F32", "Q8_0"], ["Q6_K", "BF16"], ["IQ4_XS"]])
def test_any_block_type_makes_them_quantized(types: list[str]) -> None:
    assert (
        requantized(types) == f"quantized to {', '.join(types)}: close to the checkpoint's numbers, not equal to them"
    )


def test_files_of_no_known_type_are_not_called_converted() -> None:
    assert requantized([]) == (
        "quantized to the type in each file's name: close to the checkpoint's numbers, not equal to them"
    )
    assert UNQUANTIZED == ("F32", "F16", "BF16")


def test_the_gguf_repo_is_tagged_for_llama_cpp_as_a_quantization_of_the_checkpoint() -> None:
    assert output("gguf") is GGUF
    assert GGUF.tags == ("gguf", "llama.cpp")
    assert (GGUF.relation, GGUF.library, GGUF.repo_suffix, GGUF.derived_from) == (
        "quantized",
        "gguf",
        "-GGUF",
        "checkpoint",
    )
    assert "llama.cpp" not in output("checkpoint").tags and "gguf" not in output("adapter").tags
