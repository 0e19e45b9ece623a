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


# issue 48, item 2: the same injection through a recipe or lock field the card shows raw (a revision, a Hub id):
# refused by its format, with one line, wherever it comes from (card --set, an edited lock whose hash is recomputed)
INJECTED_REVISION = "main\n\n## Injected\n\n<img src=x onerror=alert(1)>"


def _edit_lock(folder: Path, change) -> None:
    from mathneuro_edit.publish.lock import write_lock
    from mathneuro_edit.recipe.io import recipe_from_dict
    from mathneuro_edit.recipe.schema import recipe_sha256

    lock_path = folder / "mathneuro_recipe.lock.yaml"
    text = lock_path.read_text()
    lock = yaml.safe_load(text.split("\n", 1)[1] if text.startswith("#") else text)
    change(lock)
    try:  # the hash recomputed, as a careful forger would
        lock["recipe_sha256"] = recipe_sha256(recipe_from_dict(dict(lock["recipe"]), where="x"))
    except Exception:  # noqa: BLE001 - this version refuses the recipe itself: the hash does not matter
        pass
    write_lock(folder, lock)


def test_card_set_of_a_revision_with_markup_is_refused() -> None:
    from mathneuro_edit.errors import InputError
    from mathneuro_edit.publish.lock import build_lock
    from mathneuro_edit.recipe.io import quickstart_recipe
    from mathneuro_edit.runs.card_sets import apply_card_sets

    lock = build_lock(
        quickstart_recipe(["base.model=<local>"]),
        base_revision=None,
        data_records={},
        stats_sha256="s",
        mask_sha256="m",
        output_files={"checkpoint/model.safetensors": "0" * 64},
    )
    good = apply_card_sets(lock, ["base.hub_id=me/base", "base.hub_revision=v1.0"], "lock")
    assert good["recipe"]["base"]["hub_revision"] == "v1.0"
    for bad in (INJECTED_REVISION, 'x") ; import os #', "a b", "`x`", "../x"):
        with pytest.raises(InputError, match=r"base\.hub_revision: must be a branch, tag or commit") as e:
            apply_card_sets(lock, ["base.hub_id=me/base", f"base.hub_revision={json.dumps(bad)}"], "lock")
        assert "\n" not in str(e.value)


def test_a_lock_edited_with_its_hash_recomputed_puts_no_markup_in_the_card(folder: Path) -> None:
    from mathneuro_edit.errors import InputError

    def hub_revision(lock: dict) -> None:
        lock["recipe"]["base"].update(hub_id="me/base", hub_revision=INJECTED_REVISION)

    _edit_lock(folder, hub_revision)
    with pytest.raises(InputError, match=r"base\.hub_revision: must be a branch, tag or commit"):
        card_for_folder(folder)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("revision", INJECTED_REVISION),
        ("model", "me/x](javascript:alert(1)) <img src=x onerror=alert(1)>"),
        ("model", "/srv/x/## Injected <img src=x onerror=alert(1)>"),  # a local path with markup: refused too
    ],
)
def test_a_lock_whose_base_section_holds_markup_is_refused(folder: Path, key: str, value: str) -> None:
    """The lock's own ``base.model`` / ``base.revision`` (a Hub base's, shown raw in the card's link and snippets)."""
    from mathneuro_edit.errors import InputError

    _edit_lock(folder, lambda lock: lock["base"].update({key: value}))
    with pytest.raises(InputError, match=rf"base\.{key}: .* is not a Hub"):
        card_for_folder(folder)
