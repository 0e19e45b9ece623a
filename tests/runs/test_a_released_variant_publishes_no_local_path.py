"""`run --from-sweep` of a confirmed variant whose override names a local data file (SmolLM2's `arith-calib`) writes
a lock: the override is published as the recipe's own data paths are, ``<local>/NAME``, never the path itself (the
lock's privacy check refused the release before: "would reveal the local path", found by running it as a user).

Issue 41 class 2: the shorthand keys (``data.math=/abs/path``, ``data.general=[/abs/path]``, a list item, a source
given as a mapping) reached the lock, the card and the Hub, because redaction only knew keys ending in ``.path``.
One rule now (:func:`mathneuro_edit.recipe.overrides.public_override`): the value is parsed as the override is
applied, and every string in it that lands on a recipe key naming a local file is redacted."""

from __future__ import annotations

from pathlib import Path

import pytest

from mathneuro_edit.recipe.io import quickstart_recipe
from mathneuro_edit.recipe.overrides import public_override as _public_override
from mathneuro_edit.recipe.schema import recipe_sha256
from mathneuro_edit.runs.sweep.evidence import SweepEvidence


def test_a_variant_s_local_data_path_is_published_as_its_file_name_only() -> None:
    assert _public_override("data.math.path=recipes/data/a.jsonl") == "data.math.path=<local>/a.jsonl"
    assert _public_override("data.math.path=/home/u/secret/x.jsonl") == "data.math.path=<local>/x.jsonl"
    assert _public_override('data.math.path="/home/u/x.jsonl"') == "data.math.path=<local>/x.jsonl"


def test_other_overrides_are_published_as_they_are() -> None:
    for o in (
        "targets.include=[mlp]",
        "data.math.path=hf://datasets/openai/gsm8k",
        "data.math.path=arithmetic",
        'data.math.template="{question} {solution}"',
        "data.math=organism:math",
        "data.general=[organism:general, hf://datasets/wikitext]",
        "calibration.batch_size=4",
        "data.samples=50",
    ):
        assert _public_override(o) == o


@pytest.mark.parametrize(
    ("override", "public"),
    [
        ("data.math=/home/u/secret/m.jsonl", "data.math=<local>/m.jsonl"),
        ("data.math='/home/u/secret/m.jsonl'", "data.math=<local>/m.jsonl"),
        ("data.general=/srv/secret/g.jsonl", "data.general=<local>/g.jsonl"),
        ("data.general=[/home/u/secret/g.jsonl]", 'data.general=["<local>/g.jsonl"]'),
        (
            "data.general=[organism:general, ~/secret/g.jsonl]",
            'data.general=["organism:general", "<local>/g.jsonl"]',
        ),
        ("data.general.1=/home/u/secret/g.jsonl", "data.general.1=<local>/g.jsonl"),
        ("data.general.0.path=/home/u/secret/g.jsonl", "data.general.0.path=<local>/g.jsonl"),
        (
            "data.general=[{path: /home/u/secret/g.jsonl, text_field: t}]",
            'data.general=[{"path": "<local>/g.jsonl", "text_field": "t"}]',
        ),
        ("data.math={path: ./secret/m.jsonl}", 'data.math={"path": "<local>/m.jsonl"}'),
        ('data.math="/home/u/secret/a: b.jsonl"', 'data.math="<local>/a: b.jsonl"'),
    ],
)
def test_every_spelling_of_a_data_source_is_redacted(override: str, public: str) -> None:
    assert _public_override(override) == public
    assert "secret" not in public


def _recipe_with_variants(tmp_path: Path, folder: str):
    secret = tmp_path / folder
    secret.mkdir()
    for name in ("m.jsonl", "g.jsonl"):
        (secret / name).write_text('{"text": "1 + 1 = 2"}\n')
    return quickstart_recipe(
        [
            "sweep.variants=["
            f"{{name: own-math, set: ['data.math={secret}/m.jsonl']}}, "
            f"{{name: own-general, set: ['data.general=[{secret}/g.jsonl]', 'data.general.0={secret}/g.jsonl']}}]"
        ]
    )


def test_the_lock_card_and_hash_never_hold_a_variant_s_local_path(tmp_path: Path) -> None:
    recipe = _recipe_with_variants(tmp_path, "secret-a")
    public = recipe.public_dict()
    assert "secret-a" not in repr(public), public["sweep"]["variants"]
    assert public["sweep"]["variants"][0]["set"] == ["data.math=<local>/m.jsonl"]
    # the same recipe with its data in another folder has the same hash (the hash sees the public form)
    assert recipe_sha256(recipe) == recipe_sha256(_recipe_with_variants(tmp_path, "secret-b"))


def test_a_release_s_lock_entry_never_holds_the_variant_s_local_path(tmp_path: Path) -> None:
    evidence = SweepEvidence(
        0.05,
        1.1,
        ("0" * 64,),
        {"variant": "own-general", "variant_set": ["data.general=[/home/u/secret/g.jsonl]"]},
        {},
        1,
        "0" * 64,
        {},
    )
    assert evidence.lock_entry()["variant_set"] == ['data.general=["<local>/g.jsonl"]']
