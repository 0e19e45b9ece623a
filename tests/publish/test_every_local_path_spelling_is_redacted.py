"""A local path is redacted by meaning, whatever its spelling: spaces inside a component (``My Models``,
``Application Support``), ``~``, Windows drives and UNC shares (issue 48, item 1: a path with a space was
published). Pure functions, milliseconds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mathneuro_edit.util.scrub import is_private_path, scrub_json, scrub_json_bytes

PRIVATE = [
    "/home/user/My Models/llama-ft",
    "/Users/user/Library/Application Support/llama/tokenizer.json",
    "/srv/models/x",
    " /srv/models/x ",
    "~",
    "~/My Models/x",
    "~alice/models",
    "~\\models",
    "C:\\Users\\user\\My Models\\llama",
    "c:/Users/user/models",
    "D:\\",
    "\\\\server\\share\\models\\llama",
    "\\\\?\\C:\\models",
    "file:///home/user/My Models/x",
]
PUBLIC = [
    "meta-llama/Llama-3.2-1B",
    "HuggingFaceTB/SmolLM2-135M-Instruct",
    "llama-ft",
    "converted with llama.cpp / gguf-py",
    "see the paper",
    "/",
    "~ 100 tokens",
    "/srv/x\nsecond line",
    "",
    "x",
]


@pytest.mark.parametrize("value", PRIVATE)
def test_a_local_path_in_any_spelling_is_private(value: str) -> None:
    assert is_private_path(value)


@pytest.mark.parametrize("value", PUBLIC)
def test_hub_ids_and_prose_are_not(value: str) -> None:
    assert not is_private_path(value)


def test_a_config_with_spaced_paths_is_uploaded_blanked(tmp_path: Path) -> None:
    """The issue's case: both paths of a base's configs are blanked in the uploaded copy, nothing else changes."""
    (tmp_path / "config.json").write_text(
        json.dumps({"_name_or_path": "/home/user/My Models/llama-ft", "model_type": "llama", "vocab_size": 8})
    )
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_file": "/Users/user/Library/Application Support/hf/tokenizer.json",
                "name_or_path": "C:\\Users\\user\\My Models\\llama-ft",
                "cache_dir": "\\\\nas\\models\\cache",
                "eos_token": "</s>",
            }
        )
    )
    content, keys = scrub_json_bytes(tmp_path / "config.json")
    assert keys == ["_name_or_path"] and json.loads(content)["_name_or_path"] == ""
    content, keys = scrub_json_bytes(tmp_path / "tokenizer_config.json")
    assert keys == ["tokenizer_file", "name_or_path", "cache_dir"]
    assert json.loads(content) == {"tokenizer_file": "", "name_or_path": "", "cache_dir": "", "eos_token": "</s>"}


def test_tokens_that_look_like_spaced_paths_are_kept() -> None:
    """Tokens are judged by their key, never by their shape: a token ``/ x/y`` under ``content`` stays."""
    data = {"added_tokens_decoder": {"5": {"content": "/home/user/My Models/x"}}, "sep": "C:\\a b"}
    assert scrub_json(data) == (data, [])
