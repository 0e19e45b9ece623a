"""The model card shows every string it takes from a file as text, never as Markdown or HTML (issue 41, class 3).

``push`` renders the card again from the folder's ``eval.json`` (outside the lock: anyone can edit it) and the
lock's description of the base (``architectures[0]`` and ``model_type`` of a ``config.json`` someone else wrote).
A task name or an architecture such as ``x`\\n## Injected <img src=x onerror=alert(1)> [a](javascript:alert(1))``
put a new heading, a raw HTML tag and a ``javascript:`` link into the published card. One rule now
(:func:`mathneuro_edit.publish.card_sections.card_text`): such a string is one inline code span, its line breaks,
control and bidi characters escaped and its backticks and table pipes neutralised."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml
from huggingface_hub import ModelCard

from mathneuro_edit.publish.card import card_for_folder
from mathneuro_edit.publish.card_sections import card_text

HOSTILE = "x`\n## Injected heading <img src=x onerror=alert(1)> [click](javascript:alert(1)) | cell |\u202e"
_CODE_SPAN = re.compile(r"`[^`\n]*`")


def _outside_code(card: str) -> str:
    """The card's Markdown body with every inline code span and fenced block removed: what a renderer acts on
    (the metadata above it is YAML data: the Hub shows its values as text)."""
    body = card.split("\n---\n", 1)[1]
    body = re.sub(r"```.*?```", "", body, flags=re.S)
    return _CODE_SPAN.sub("", body)


def _assert_inert(card: str) -> None:
    plain = _outside_code(card)
    assert "Injected heading" not in plain, [ln for ln in card.splitlines() if "Injected" in ln]
    assert "<img" not in plain and "javascript:" not in plain, [ln for ln in card.splitlines() if "img" in ln]
    assert not any(ln.startswith("## Injected") for ln in card.splitlines())  # nowhere a heading
    assert "\u202e" not in card
    assert ModelCard(card).data.to_dict()  # the metadata still parses


@pytest.fixture()
def folder(ws: Path, tmp_path: Path) -> Path:
    out = tmp_path / "checkpoint"
    shutil.copytree(ws / "run" / "checkpoint", out)
    return out


def test_a_task_name_from_eval_json_is_text_in_the_card(folder: Path) -> None:
    path = folder / "eval.json"
    results = json.loads(path.read_text())
    results[HOSTILE] = results.pop("math")
    results["general"]["base"]["general_loss"] = "<img src=y onerror=alert(2)>"  # a value that is not a number
    path.write_text(json.dumps(results))
    card = card_for_folder(folder).content
    _assert_inert(card)
    assert "onerror=alert(2)" not in _outside_code(card)
    assert "`x' ## Injected" not in card and "x'\\n## Injected heading" in card, card  # shown, escaped


def test_a_base_config_s_architecture_is_text_in_the_card(folder: Path) -> None:
    lock_path = folder / "mathneuro_recipe.lock.yaml"
    text = lock_path.read_text()
    lock = yaml.safe_load(text.split("\n", 1)[1] if text.startswith("#") else text)
    lock["base"]["description"] = {"architecture": HOSTILE, "model_type": "<b onmouseover=alert(3)>llama"}
    lock_path.write_text(yaml.safe_dump(lock))
    card = card_for_folder(folder).content
    _assert_inert(card)
    assert "onmouseover" not in _outside_code(card)


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("LlamaForCausalLM", "`LlamaForCausalLM`"),
        ("a`b", "`a'b`"),
        ("a|b", "`a\\|b`"),
        ("a\nb\tc\x1b[31m\u202ed", "`a\\nb\\tc\\x1b[31m\\u202ed`"),
        ("données", "`données`"),
        ("", ""),
    ],
)
def test_card_text_is_one_inert_code_span(value: str, shown: str) -> None:
    assert card_text(value) == shown
