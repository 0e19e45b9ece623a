"""What a release publishes and what its lock and card may hold: absolute output paths, hidden folders, Windows
paths, extra files, non-finite metrics, raw file names, the dtype sentence (round 4 of hand mutations,
docs/testing.md "Round 4"; each failed with the mutation its docstring names)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from mathneuro_edit.errors import InputError
from mathneuro_edit.recipe.io import quickstart_recipe


@pytest.mark.parametrize("name", ["\\etc\\passwd", "\\\\server\\share\\x.bin", "/etc/passwd", "checkpoint/../../x"])
def test_a_lock_output_path_that_is_absolute_on_any_system_is_malformed(name: str) -> None:
    """r4-lock-backslash-output-accepted: a lock's ``outputs`` are relative paths inside the run; one starting
    with ``\\`` is absolute on Windows (a UNC share with two) and is refused like ``/``."""
    from mathneuro_edit.publish.lock_policy import _canonical_sha, validate_lock

    public = {"base": {"model": "organism"}}
    good = {"recipe_sha256": _canonical_sha(public), "recipe": public, "outputs": {"checkpoint/x.bin": "a" * 64}}
    validate_lock(good)
    with pytest.raises(InputError, match="must be a relative file path inside the run"):
        validate_lock({**good, "outputs": {name: "a" * 64}})


def test_files_in_hidden_folders_are_never_published(tmp_path: Path) -> None:
    """r4-push-hidden-folder-published: a push leaves out hidden files *and* everything under a hidden folder
    (``.cache/``, ``.git/``: huggingface_hub's download metadata, a repo's objects), at any depth."""
    from mathneuro_edit.publish.hub_files import folder_files

    for rel in ("config.json", "sub/model.safetensors", ".hidden.txt", ".cache/huggingface/x.json", "sub/.git/HEAD"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x")
    assert [rel for rel, _ in folder_files(tmp_path)] == ["config.json", "sub/model.safetensors"]


@pytest.mark.parametrize("base", ["C:\\Users\\alice\\llama", "D:/models/llama", "/home/alice/models/llama"])
def test_an_adapter_config_naming_a_windows_path_is_not_published(tmp_path: Path, base: str) -> None:
    """r4-push-adapter-private-base-accepted: PEFT loads an adapter's base from ``base_model_name_or_path``; a
    local path there (a Windows drive path too, which is not a local path on this machine) is refused before any
    request, never published."""
    from mathneuro_edit.publish.hub_files import folder_files, uploaded_contents

    (tmp_path / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": base, "peft_type": "SHIRA"}))
    with pytest.raises(InputError, match="base_model_name_or_path is a local path"):
        uploaded_contents(folder_files(tmp_path))
    (tmp_path / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "meta-llama/Llama-3.2-1B"}))
    contents, blanked = uploaded_contents(folder_files(tmp_path))
    assert list(contents) == ["adapter_config.json"] and blanked == ()


def test_a_file_check_with_an_extra_file_is_not_ok() -> None:
    """r4-filecheck-ok-with-extra: ``verify`` and a folder's ``reproduce`` pass only when every file is the lock's
    (``FileCheck.ok``); a file the lock does not list is a difference (``--json``'s ``ok`` false)."""
    from mathneuro_edit.publish.integrity import FileCheck, compare_files

    states = compare_files({"checkpoint/a": "1", "checkpoint/b": "2"}, {"checkpoint/a": "1"})
    check = FileCheck("run", states)
    assert states == {"checkpoint/a": "match", "checkpoint/b": "extra"}
    assert not check.ok and check.to_dict()["ok"] is False and check.differences() == {"checkpoint/b": "extra"}
    assert FileCheck("run", {"checkpoint/a": "match"}).ok


def test_the_model_index_leaves_out_a_value_that_is_not_a_number() -> None:
    """r4-model-index-keeps-nan: a NaN metric (a loss a pruned model made non-finite) or an infinity is no result;
    the Hub's model-index gets the other values only, never ``.nan`` or ``.inf``."""
    from mathneuro_edit.publish.model_index import eval_results_metadata

    recipe = quickstart_recipe()
    assert recipe.evaluation is not None
    results = {"general": {"base": {"general_kl": 0.0}, "edited": {"general_loss": math.nan, "general_kl": 0.25}}}
    found = eval_results_metadata(results, recipe)
    assert [(r.metric_type, r.metric_value) for r in found] == [("kl_divergence", 0.25)]
    for infinite in (math.inf, -math.inf):  # only a hand-edited eval.json holds one: no result either
        results["general"]["edited"]["general_loss"] = infinite
        found = eval_results_metadata(results, recipe)
        assert [(r.metric_type, r.metric_value) for r in found] == [("kl_divergence", 0.25)]


def test_the_model_index_dataset_name_of_a_local_file_is_escaped(tmp_path: Path) -> None:
    """r4-model-index-file-name-raw: the model-index value itself (which the Hub shows and ``ModelCard.load``
    returns, not only the card's text) shows a data file name's bidi override and ESC escaped."""
    from mathneuro_edit.publish.model_index import eval_results_metadata
    from mathneuro_edit.util.console import document_safe

    name = "math\u202etxt.\x1b[31mjsonl"
    path = tmp_path / name
    path.write_text(json.dumps({"question": "1+1?", "answer": "#### 2"}) + "\n")
    recipe = quickstart_recipe([f"evaluation.math={path}"])
    found = eval_results_metadata({"math": {"edited": {"math_accuracy": 0.5}}}, recipe)
    assert len(found) == 1
    shown = found[0].dataset_name
    assert "\u202e" not in shown and "\x1b" not in shown
    assert shown == f"{document_safe(name)} (a local file; its sha256 is in the lock)"


def test_the_card_s_dtype_sentence_is_only_for_a_cast_checkpoint() -> None:
    """r4-card-dtype-note-on-auto: ``outputs.dtype: auto`` (like no ``outputs.dtype``) keeps the base's own dtype,
    so the card says nothing of a cast; a named dtype is said, and an adapter (deltas) never says it."""
    from mathneuro_edit.outputs.adapter import ADAPTER
    from mathneuro_edit.outputs.checkpoint import CHECKPOINT
    from mathneuro_edit.publish.card import CardSource, build_card, summarize_edit
    from mathneuro_edit.publish.card_weights import cast_dtype
    from mathneuro_edit.publish.lock import build_lock
    from mathneuro_edit.recipe.io import quickstart_recipe

    def lock(dtype):
        return {"recipe": {"outputs": {} if dtype is None else {"dtype": dtype}}, "base": {}}

    assert cast_dtype(lock(None), CHECKPOINT, "bfloat16") is None
    assert cast_dtype(lock("auto"), CHECKPOINT, "bfloat16") is None
    assert cast_dtype(lock("bfloat16"), CHECKPOINT, "bfloat16") == "bfloat16"
    assert cast_dtype(lock("bfloat16"), ADAPTER, "bfloat16") is None
    recipe = quickstart_recipe(["outputs.dtype=bfloat16"])
    run = build_lock(recipe, base_revision=None, data_records={}, stats_sha256="s", mask_sha256="m", output_files={})
    source = CardSource(recipe, run, summarize_edit({}, model_params=1), weights_dtype="bfloat16")
    sentence = (
        "\nThe weights are stored in bfloat16 (`outputs.dtype`): the edit was computed in the base's own dtype and "
        "the result cast; the evaluation below ran on these stored weights (read into the base's dtype).\n\n## What"
    )
    assert sentence in build_card(source, "checkpoint", base_model_id=None).text
