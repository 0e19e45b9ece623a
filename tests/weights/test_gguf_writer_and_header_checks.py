"""The GGUF writer's and header check's refusals: a tied head stored twice, another vocabulary, a cut or doubled
tensor, a path in the identity (round 4 of hand mutations, docs/testing.md "Round 4"; each failed with the
mutation its docstring names)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mathneuro_edit.errors import InputError


def test_a_tied_checkpoint_that_also_stores_its_head_gets_no_output_tensor(tmp_path: Path) -> None:
    """r4-gguf-tied-head-written: with ``tie_word_embeddings`` llama.cpp's converter writes no ``output.weight``
    (llama.cpp reuses ``token_embd``), also when the checkpoint holds the tied head as a second copy."""
    pytest.importorskip("gguf")
    from safetensors.torch import load_file, save_file

    from mathneuro_edit.weights.gguf_tensors import gguf_plan
    from tests.weights.test_gguf import save_base

    folder = save_base(tmp_path / "tied", "llama", tied=True)
    state = load_file(str(folder / "model.safetensors"))
    assert "lm_head.weight" not in state
    state["lm_head.weight"] = state["model.embed_tokens.weight"].clone()
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    names = [name for name, *_ in gguf_plan(folder, "F32")]
    assert "token_embd.weight" in names and "output.weight" not in names


def test_an_output_layer_of_another_vocabulary_than_the_config_s_is_refused(tmp_path: Path) -> None:
    """r4-gguf-output-rows-unchecked: llama.cpp builds ``output`` as vocab_size rows and refuses a file whose
    ``output.weight`` has others; the writer refuses it first, in one line, also when the embedding agrees."""
    pytest.importorskip("gguf")
    from safetensors.torch import load_file, save_file

    from mathneuro_edit.weights.gguf_writer import check_gguf
    from tests.weights.test_gguf import save_base

    folder = save_base(tmp_path / "untied", "llama", tied=False)
    check_gguf(folder, "F32")
    vocab = json.loads((folder / "config.json").read_text())["vocab_size"]
    state = load_file(str(folder / "model.safetensors"))
    state["lm_head.weight"] = state["lm_head.weight"][: vocab - 3].clone()
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(
        InputError, match=rf"config.json: vocab_size is {vocab} but the output layer has {vocab - 3} rows"
    ):
        check_gguf(folder, "F32")


def _two_tensor_gguf(path: Path) -> Path:
    gguf = pytest.importorskip("gguf")
    import numpy as np

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tensor("a.weight", np.ones((4, 32), dtype=np.float32))
    w.add_tensor("b.weight", np.full((4, 32), 2.0, dtype=np.float32))  # 512 bytes: the file ends on its last byte
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_a_gguf_whose_last_tensor_is_cut_short_is_refused_by_its_header(tmp_path: Path) -> None:
    """r4-gguf-header-truncated-data: the header check refuses a tensor whose data ends past the file's end, not
    only one whose data starts past it (a download cut a few bytes short)."""
    from mathneuro_edit.weights.gguf_header import check_gguf_header

    path = _two_tensor_gguf(tmp_path / "whole.gguf")
    check_gguf_header(path)
    raw = path.read_bytes()
    for cut in (1, 4, 511):
        short = tmp_path / f"short-{cut}.gguf"
        short.write_bytes(raw[:-cut])
        with pytest.raises(InputError, match=r"the data of 'b.weight' lies beyond the end of the file"):
            check_gguf_header(short)


def test_a_gguf_that_lists_one_tensor_twice_is_refused_by_its_header(tmp_path: Path) -> None:
    """r4-gguf-header-duplicate-tensor: gguf's reader keeps one of two tensors of the same name (which one
    depends on the reader); the header check refuses the file in one line instead."""
    from mathneuro_edit.weights.gguf_header import check_gguf_header

    path = _two_tensor_gguf(tmp_path / "two.gguf")
    raw = path.read_bytes()
    assert raw.count(b"b.weight") == 1
    (tmp_path / "twice.gguf").write_bytes(raw.replace(b"b.weight", b"a.weight"))
    with pytest.raises(InputError, match=r"it lists the tensor 'a.weight' twice"):
        check_gguf_header(tmp_path / "twice.gguf")


def test_a_gguf_s_identity_never_takes_a_value_holding_a_path(tmp_path: Path) -> None:
    """r4-gguf-identity-keeps-paths: what a GGUF base says it is (``general.*``) reaches the lock and the card only
    as plain short values; one with a ``/`` (a path of the machine that converted it) is dropped."""
    gguf = pytest.importorskip("gguf")
    import numpy as np

    from mathneuro_edit.weights.gguf_reader import gguf_identity

    path = tmp_path / "named.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("/home/alice/models/smollm2")
    w.add_organization("HuggingFaceTB")
    w.add_basename("smollm2")
    w.add_finetune("../../etc")
    w.add_languages(["en", "fr/../x", "de"])
    w.add_tensor("a.weight", np.ones((4, 32), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    assert gguf_identity(path) == {"organization": "HuggingFaceTB", "basename": "smollm2", "languages": ["en", "de"]}
