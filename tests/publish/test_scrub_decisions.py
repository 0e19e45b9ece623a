"""The scrubber's decisions, one by one (issue 48 item 2; milliseconds): which keys name a path (a key ending in
``model`` does), which values are local paths, what a scrubbed file looks like, and which credentials are
redacted from a message. ``scripts/mutation.sh scrub`` mutates ``util/scrub.py`` against this file and
``test_every_local_path_spelling_is_redacted.py``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from mathneuro_edit.util import scrub
from mathneuro_edit.util.scrub import (
    is_private_path,
    names_a_path,
    redact_url_credentials,
    scrub_json,
    scrub_json_bytes,
    scrub_token,
)


@pytest.mark.parametrize(
    "key",
    [
        "base_model",
        "model",
        "teacherModel",
        "_name_or_path",
        "tokenizer_file",
        "cacheDir",
        "CACHE_DIR",
        "output_directory",
        "data_files",
        "sources",
        "root",
        "location",
        "checkpoint",
        "pretrained",
        "image_folder",
        "model_dirs",
        "filename",
        "log_paths",
    ],
)
def test_a_key_whose_last_word_names_a_file_folder_or_model_is_a_path_key(key: str) -> None:
    assert names_a_path(key) is True


@pytest.mark.parametrize(
    "key", ["model_type", "models", "merges", "vocab", "eos_token", "chat_template", "content", "", "_", "pathology"]
)
def test_other_keys_are_not(key: str) -> None:
    assert names_a_path(key) is False


def test_a_key_that_is_not_text_is_not_a_path_key() -> None:
    assert names_a_path(5) is False and names_a_path(None) is False and names_a_path(("path",)) is False


@pytest.mark.parametrize("value", [None, 5, ["/srv/models/x"], Path("/srv/models/x"), b"/srv/models/x"])
def test_only_a_string_is_a_path_value(value: object) -> None:
    assert is_private_path(value) is False


def test_the_home_folder_and_what_lies_under_it_are_private(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", "/nonexistent-home-48")
    assert is_private_path("/nonexistent-home-48") is True  # one component, not on this machine: home alone
    assert is_private_path("/nonexistent-home-48\\x") is True
    assert is_private_path("/nonexistent-home-48x") is False  # a sibling that shares the prefix is not under it
    assert is_private_path("/nonexistent-other") is False
    monkeypatch.setenv("HOME", "/nonexistent-home-48\\")  # a trailing separator is not part of the home's name
    assert is_private_path("/nonexistent-home-48\\x") is True
    monkeypatch.setenv("HOME", "/nonexistent-home-X")  # nor is anything but a separator stripped
    assert is_private_path("/nonexistent-home-X") is True
    monkeypatch.setenv("HOME", "/")  # a home of "/" strips to nothing: it makes no path private
    assert is_private_path("/nonexistent-other") is False


def test_a_one_component_absolute_path_is_private_when_it_exists_here(tmp_path: Path) -> None:
    one = "/" + sorted(os.listdir("/"))[0]
    assert is_private_path(one) is True
    assert is_private_path("/no-such-top-level-folder-48") is False
    assert is_private_path("/no-such\x00folder") is False  # a NUL byte: os.path.exists raises
    assert is_private_path("/no-such\x00folder/x") is True  # two components still match the shape
    assert is_private_path("/" + "x" * 5000) is False  # a name too long: ENAMETOOLONG is no path of this machine


@pytest.mark.parametrize(
    ("value", "private"),
    [
        ("FILE:///x", True),
        ("File:relative", True),
        ("fil", False),
        ("~x", True),
        ("~ x", False),
        ("a:\\", True),  # a drive alone
        ("C:", False),
        ("\\\\server", False),  # a UNC path needs its share
        ("\\\\a b\\share", False),
        ("//server/share", True),  # a UNC path written with slashes
        ("//server", False),
        ("// x/y", False),
        ("/ x/y", False),  # a blank first component is prose
        ("/x/", True),
        ("/x/y\tz", False),
        ("/x/y\rz", False),
        ("/x/y\fz", False),
        ("/x/y\vz", False),
        ("  ~  ", True),
        ("/", False),
        ("~/", True),
    ],
)
def test_the_edges_of_a_local_path(value: str, private: bool) -> None:
    assert is_private_path(value) is private


def test_scrub_json_blanks_path_values_at_any_depth_and_names_them() -> None:
    data = {
        "a": {"model": "/srv/models/x", "model_type": "/srv/models/x"},
        "data_files": ["/srv/d/a.json", "hub/x", ["~/b.json"]],
        "sources": {"train": "/srv/d/t", "name": "/srv/d/n"},
        "list": [{"cache_dir": "C:\\x"}, "/srv/not/a/path/key"],
    }
    new, found = scrub_json(data)
    assert new == {
        "a": {"model": "", "model_type": "/srv/models/x"},
        "data_files": ["", "hub/x", [""]],
        "sources": {"train": "/srv/d/t", "name": "/srv/d/n"},  # a dict's values are judged by their own keys
        "list": [{"cache_dir": ""}, "/srv/not/a/path/key"],
    }
    assert found == ["a.model", "data_files[0]", "data_files[2][0]", "list[0].cache_dir"]
    assert data["a"]["model"] == "/srv/models/x"  # the input is not changed
    assert scrub_json("/srv/models/x") == ("/srv/models/x", [])
    assert scrub_json("/srv/models/x", path_field=True) == ("", ["(value)"])
    assert scrub_json(["/srv/a/b"], "top", path_field=True) == ([""], ["top[0]"])
    assert scrub_json({"path": "/srv/a/b"}, "cfg") == ({"path": ""}, ["cfg.path"])


def test_a_scrubbed_file_is_indented_utf8_json_with_a_final_newline(tmp_path: Path) -> None:
    f = tmp_path / "config.json"
    f.write_text(json.dumps({"_name_or_path": "/srv/models/x", "name": "café"}), encoding="utf-8")
    content, found = scrub_json_bytes(f)
    assert found == ["_name_or_path"]
    assert content == '{\n  "_name_or_path": "",\n  "name": "café"\n}\n'.encode()


def test_files_the_scrubber_leaves_as_they_are(tmp_path: Path) -> None:
    for name in sorted(scrub.TOKENIZER_FILES):
        (tmp_path / name).write_text(json.dumps({"_name_or_path": "/srv/models/x"}))
        assert scrub_json_bytes(tmp_path / name) == (None, [])
    (tmp_path / "clean.json").write_text(json.dumps({"_name_or_path": "meta-llama/x"}))
    assert scrub_json_bytes(tmp_path / "clean.json") == (None, [])
    (tmp_path / "broken.json").write_text("{")
    assert scrub_json_bytes(tmp_path / "broken.json") == (None, [])
    (tmp_path / "latin1.json").write_bytes(b'{"path": "/srv/\xe9/x"}')
    assert scrub_json_bytes(tmp_path / "latin1.json") == (None, [])
    assert scrub_json_bytes(tmp_path / "missing.json") == (None, [])
    assert scrub.TOKENIZER_FILES == {
        "tokenizer.json",
        "vocab.json",
        "special_tokens_map.json",
        "added_tokens.json",
        "chat_template.json",
    }


@pytest.mark.parametrize(
    ("text", "redacted"),
    [
        ("https://alice:s3cret@hub.example/x", "https://***@hub.example/x"),
        ("see http://u@h and ftp://a:b@c/d", "see http://***@h and ftp://***@c/d"),
        ("https://h/x?token=abc&x=1", "https://h/x?token=***&x=1"),
        ("https://h/x?X-Amz-Signature=abc#f", "https://h/x?X-Amz-Signature=***#f"),
        ("https://h/x?a=1;API_KEY=zz&b=2", "https://h/x?a=1;API_KEY=***&b=2"),
        (
            "https://h/x?Password=p&pwd=q&auth_code=r&credential=s",
            "https://h/x?Password=***&pwd=***&auth_code=***&credential=***",
        ),
        ("mail me@example.com, https://h/me/model", "mail me@example.com, https://h/me/model"),
        ("https://h/x?page=2", "https://h/x?page=2"),
    ],
)
def test_url_credentials_are_redacted_and_nothing_else(text: str, redacted: str) -> None:
    assert redact_url_credentials(text) == redacted


def test_scrub_token_replaces_every_token_it_knows_of_longest_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_envtoken1")
    monkeypatch.setenv("HUGGING_FACE_HUB_TOKEN", "hf_envtoken1_longer")
    monkeypatch.setattr("huggingface_hub.get_token", lambda: "hf_storedlogin")
    text = "a hf_envtoken1_longer b hf_envtoken1 c hf_storedlogin d hf_given99 e short"
    assert scrub_token(text, "hf_given99") == "a *** b *** c *** d *** e short"
    assert scrub_token("short 1234567", "1234567") == "short 1234567"  # under 8 characters: not a token
    assert scrub_token("12345678", "12345678") == "***"
    assert scrub_token("at https://u:p@h/x", None) == "at https://***@h/x"
    # a token inside a longer one sorts after it by length, whatever their order as text: the longer goes whole
    monkeypatch.setenv("HF_TOKEN", "hf_a_hf_bsecret1")
    assert scrub_token("x hf_a_hf_bsecret1 y", "hf_bsecret1") == "x *** y"


def test_scrub_token_without_a_readable_login(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)

    def broken() -> str:
        raise OSError("no login")

    monkeypatch.setattr("huggingface_hub.get_token", broken)
    assert scrub_token("x hf_abcdefgh", "hf_abcdefgh") == "x ***"
