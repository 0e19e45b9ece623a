"""llama.cpp looks up Phi-3's special tokens when a GGUF's general.name holds "phi3" OR "phi-3" (lowercased), and
cannot load the file when the vocabulary lacks one of them. Hub ids spell it `Phi-3` (microsoft/Phi-3-mini-4k-instruct,
Phi-3.5): that spelling is refused like `phi3`, before anything is written."""

from __future__ import annotations

import pytest

pytest.importorskip("gguf")

import tests._families as fam  # noqa: E402
from mathneuro_edit import InputError  # noqa: E402
from mathneuro_edit.weights.gguf_writer import write_gguf  # noqa: E402
from tests._family_shapes import family_shape  # noqa: E402


@pytest.fixture(scope="module")
def phi_base(tmp_path_factory):
    """A tiny Phi-3 with the organism's byte-level BPE tokenizer: no <unk>, no <|endoftext|>."""
    return fam.save_family_base(tmp_path_factory.mktemp("phi3") / "base", family_shape("Phi-3 / Phi-4"))


@pytest.mark.parametrize(
    "name",
    [
        "microsoft/Phi-3-mini-4k-instruct (MathNeuro edit)",
        "Phi-3.5-mini-instruct",
        "someone/PHI-3-math",
        "my-phi3-math",
    ],
)
def test_every_spelling_of_phi_3_in_the_name_is_checked(phi_base, tmp_path, name: str) -> None:
    with pytest.raises(
        InputError,
        match=r"^outputs\.gguf: general\.name .* makes llama\.cpp look up Phi-3's special "
        r"tokens .*, and this tokenizer lacks <unk>, <\|endoftext\|>",
    ):
        write_gguf(phi_base, tmp_path / "m.gguf", "F32", name=name)
    assert not (tmp_path / "m.gguf").exists()


def test_a_name_without_phi_3_is_written(phi_base, tmp_path) -> None:
    assert write_gguf(phi_base, tmp_path / "m.gguf", "F32", name="microsoft/Phee-three").is_file()
