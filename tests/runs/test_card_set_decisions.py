"""``card RUN --set``'s decisions on a lock in memory (issue 48 item 2; milliseconds, no run): which keys a card may
change, and a Hub origin (``base.hub_id`` / ``hub_revision``) refused where an output file records another one (a
GGUF's name and metadata, an adapter's ``base_model_name_or_path``), accepted where none does or nothing changes.
``scripts/mutation.sh card-sets`` mutates ``runs/card_sets.py`` against this file."""

from __future__ import annotations

from typing import Any

import pytest

from mathneuro_edit.errors import InputError
from mathneuro_edit.publish.lock import build_lock
from mathneuro_edit.recipe.io import quickstart_recipe, recipe_from_dict
from mathneuro_edit.recipe.schema import recipe_sha256
from mathneuro_edit.runs.card_sets import CARD_KEYS, apply_card_sets, check_card_sets


def _lock(outputs: dict[str, str], *sets: str) -> dict[str, Any]:
    return build_lock(
        quickstart_recipe(["base.model=<local>", *sets]),
        base_revision=None,
        data_records={},
        stats_sha256="s",
        mask_sha256="m",
        output_files=outputs,
    )


CHECKPOINT = {"checkpoint/model.safetensors": "0" * 64}
GGUF = {**CHECKPOINT, "checkpoint/organism-F32.gguf": "1" * 64}
ADAPTER = {**CHECKPOINT, "adapter/adapter_config.json": "2" * 64}


@pytest.mark.parametrize(
    "item",
    [
        *(f"{k}=x" for k in CARD_KEYS),
        "data.math.hub_dataset=openai/gsm8k",
        "evaluation.general.hub_dataset=x/y",
        "data.general.0.hub_dataset=x/y",
        " hub.private = true",
    ],
)
def test_the_keys_a_card_may_change(item: str) -> None:
    assert check_card_sets([item]) == [item]


@pytest.mark.parametrize(
    "key",
    [
        "data.seed",
        "data",
        "calibration.max_length",
        "targets.include",
        "mask.top_k",
        "edit.scale",
        "base.gguf_file",
        "base.revision",
        "base.dtype",
        "outputs.dtype",
    ],
)
def test_a_key_that_decides_the_weights_is_refused_in_one_line(key: str) -> None:
    with pytest.raises(InputError) as e:
        check_card_sets(["hub.private=true", f"{key}=1"])
    assert str(e.value) == (
        f"card --set {key}: would change the weights, which the run computed with the recorded value; a card only "
        f"describes them: re-run the recipe with --set {key}=1 (mathneuro-edit run)"
    )


def test_base_model_is_given_back_with_base_and_other_keys_get_a_suggestion() -> None:
    with pytest.raises(InputError, match=r"; a base the lock redacted is given back with --base PATH$"):
        check_card_sets(["base.model=/x"])
    with pytest.raises(InputError) as e:
        check_card_sets(["hub.repo=me/x"])
    assert str(e.value) == (
        "card --set hub.repo: not a card setting, did you mean 'hub.repo_id'? (a card may change hub.repo_id, "
        "hub.private, hub.revision, base.hub_id, base.hub_revision and a source's hub_dataset)"
    )
    with pytest.raises(InputError) as e:
        check_card_sets(["evaluation.samples=5"])
    assert str(e.value).endswith("; re-run the recipe with --set evaluation.samples=5 to change it")
    with pytest.raises(InputError) as e:
        check_card_sets(["evaluation.math.hub_datset=x/y"])
    assert "did you mean 'evaluation.math.hub_dataset'?" in str(e.value)
    with pytest.raises(InputError) as e:
        check_card_sets(["dat.math.hub_dataset=x/y"])
    assert "did you mean 'data.math.hub_dataset'?" in str(e.value)
    assert check_card_sets(["hub.revision=a=b"]) == ["hub.revision=a=b"]  # the key ends at the first "="
    for near_miss in (
        "data.math.hub_datasets=x",
        "outputs.gguf=Q8_0",
        "base.hub_ids=x",
        "evaluation.math.hub_dataset.x=y",
    ):
        with pytest.raises(InputError, match="not a card setting|would change the weights"):
            check_card_sets([near_miss])


@pytest.mark.parametrize(
    ("item", "meant"),
    [
        ("data.math.hub_datset=openai/gsm8k", "data.math.hub_dataset"),
        ("data.general.0.hub_datset=x/y", "data.general.0.hub_dataset"),
        ("data.general.hub_datset=x/y", "data.general.hub_dataset"),
        ("base.hub_revison=abc", "base.hub_revision"),
        ("evaluation.mth.hub_dataset=x/y", "evaluation.math.hub_dataset"),
    ],
)
def test_a_mistyped_card_key_under_a_weights_section_gets_the_suggestion_first(item: str, meant: str) -> None:
    key = item.partition("=")[0]
    with pytest.raises(InputError) as e:
        check_card_sets([item])
    assert str(e.value) == (
        f"card --set {key}: not a card setting, did you mean {meant!r}? (a card may change hub.repo_id, "
        "hub.private, hub.revision, base.hub_id, base.hub_revision and a source's hub_dataset)"
    )


@pytest.mark.parametrize(
    "key",
    # each close to a card key (difflib), but a recipe key, a section or a value within one
    [
        "base.revision",
        "data.math.path",
        "data.general.0.template",
        "mask.top_k.default",
        "data.math",
        "data.math.path.x",
    ],
)
def test_a_real_weights_key_close_to_a_card_key_is_still_refused_as_weights(key: str) -> None:
    with pytest.raises(InputError, match=rf"^card --set {key}: would change the weights"):
        check_card_sets([f"{key}=1"])


def test_a_hub_origin_is_refused_where_the_gguf_records_another() -> None:
    lock, named = _lock(GGUF), _lock(GGUF, "base.hub_id=me/base")
    cases = [
        (lock, ["base.hub_id=me/base"]),
        (named, ["base.hub_revision=v1"]),
        (named, ["base.hub_id=me/other"]),
        (lock, ["hub.repo_id=me/x", "base.hub_id=me/base"]),
    ]
    for lock_, sets in cases:
        with pytest.raises(InputError) as e:
            apply_card_sets(lock_, sets, "lock")
        key = sorted({s.partition("=")[0] for s in sets} & {"base.hub_id", "base.hub_revision"})[0]
        assert str(e.value) == (
            f"card --set {key}: the run's checkpoint/organism-F32.gguf records the base's Hub origin (the GGUF's "
            f"name and metadata, or the adapter's base_model_name_or_path); re-run the recipe with --set {key}=... "
            "so the file and the card agree"
        )
    # both keys: the first in order is named
    with pytest.raises(InputError, match=r"^card --set base\.hub_id: "):
        apply_card_sets(lock, ["base.hub_revision=v1", "base.hub_id=me/base"], "lock")
    # the origin the run recorded, set again: nothing changes, nothing to refuse
    recorded = _lock(GGUF, "base.hub_id=me/base")
    assert apply_card_sets(recorded, ["base.hub_id=me/base"], "lock")["recipe"]["base"]["hub_id"] == "me/base"
    # keys that are no origin go through with a GGUF
    assert apply_card_sets(lock, ["hub.repo_id=me/x"], "lock")["recipe"]["hub"]["repo_id"] == "me/x"


def test_a_hub_origin_is_refused_where_the_adapter_records_it_and_taken_where_no_file_does() -> None:
    with pytest.raises(InputError, match=r"the run's adapter/adapter_config\.json records the base's Hub origin"):
        apply_card_sets(_lock(ADAPTER), ["base.hub_id=me/base"], "lock")
    new = apply_card_sets(_lock(CHECKPOINT), ["base.hub_id=me/base", "base.hub_revision=v1"], "lock")
    assert (new["recipe"]["base"]["hub_id"], new["recipe"]["base"]["hub_revision"]) == ("me/base", "v1")
    assert new["recipe_sha256"] == recipe_sha256(recipe_from_dict(new["recipe"], where="x"))
    assert new["recipe_sha256"] != _lock(CHECKPOINT)["recipe_sha256"]


def test_an_adapter_of_a_gguf_base_names_no_hub_id_so_its_origin_may_change() -> None:
    """adapter_base: a GGUF base's adapter records no Hub id (it was computed against the dequantized weights), so
    only a GGUF output would record the origin; a lock with an adapter and no GGUF file takes the new origin."""
    lock = build_lock(
        quickstart_recipe(["base.model=<local>/x.gguf"]),
        base_revision="0123abc",  # the same revision on both sides of the comparison: not a change of origin
        data_records={},
        stats_sha256="s",
        mask_sha256="m",
        output_files=ADAPTER,
    )
    assert apply_card_sets(lock, ["base.hub_id=me/base"], "lock")["recipe"]["base"]["hub_id"] == "me/base"
    assert lock["base"]["revision"] == "0123abc"


def test_a_bad_value_or_a_bad_lock_is_named_by_where_it_came_from() -> None:
    with pytest.raises(InputError, match=r"^my lock: 1 problem: hub.private"):
        apply_card_sets(_lock(CHECKPOINT, "hub.repo_id=me/x"), ["hub.private=maybe"], "my lock")
    bad = _lock(CHECKPOINT)
    bad["recipe"] = {**bad["recipe"], "mask": {**bad["recipe"]["mask"], "top_k": 5}}
    with pytest.raises(InputError, match=r"^my lock: 1 problem: mask.top_k"):
        apply_card_sets(bad, ["hub.repo_id=me/x"], "my lock")


def test_the_data_records_keep_the_sources_hub_dataset_in_step() -> None:
    lock = _lock(CHECKPOINT, "data.math=<local>/m.jsonl")
    lock["data"] = {
        "math": [{"source": {"path": "<local>/m.jsonl"}, "sha256": "a"}],
        "general": [{"source": {"path": "organism:general"}}, "not a record"],
        "other": "not a list",
    }
    for records in (["not a record"], [{"source": "not a mapping"}], [{"sha256": "no source"}]):
        odd = {**lock, "data": {"math": records}}
        assert apply_card_sets(odd, ["data.math.hub_dataset=openai/gsm8k"], "lock")["data"]["math"] == records
    new = apply_card_sets(lock, ["data.math.hub_dataset=openai/gsm8k"], "lock")
    assert new["data"]["math"] == [
        {"source": {"path": "<local>/m.jsonl", "hub_dataset": "openai/gsm8k"}, "sha256": "a"}
    ]
    assert new["data"]["general"][0] == {"source": {"path": "organism:general", "hub_dataset": None}}
    assert lock["data"]["math"][0]["source"] == {"path": "<local>/m.jsonl"}  # the lock given is not changed
