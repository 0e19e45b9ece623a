"""`run --from-sweep` of a confirmed variant whose override names a local data file (SmolLM2's `arith-calib`) writes
a lock: the override is published as the recipe's own data paths are, ``<local>/NAME``, never the path itself (the
lock's privacy check refused the release before: "would reveal the local path", found by running it as a user)."""

from __future__ import annotations

from mathneuro_edit.util.paths import public_override as _public_override


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
    ):
        assert _public_override(o) == o
