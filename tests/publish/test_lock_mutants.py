"""Edges of mathneuro_edit.publish.lock that the mutation run (scripts/mutation.sh card) found unguarded: the GGUF and
organism paths of check_base_weights and its exact messages, the weights hash of a sharded folder, which data
files check_local_files checks, every private path of a recipe, and what build_lock / recipe_from_lock do with a
recipe without evaluation or with a redacted lm-eval include path."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from mathneuro_edit.errors import InputError, MathNeuroEditError
from mathneuro_edit.publish.lock import (
    build_lock,
    check_base_weights,
    check_local_files,
    check_private,
    local_files,
    private_paths,
    recipe_from_lock,
    weights_sha256,
)
from mathneuro_edit.recipe.io import quickstart_recipe, recipe_from_dict

ORGANISM_DATA = {"math": "organism:math", "general": "organism:general"}
BASE = {"model": "organism"}


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_gguf_base_is_checked_by_the_file_it_pinned(tmp_path: Path) -> None:
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF one")
    lock = {"base": {"gguf": {"file": "m.gguf", "sha256": _sha(b"GGUF one")}}}
    check_base_weights(lock, gguf)  # the file itself
    check_base_weights(lock, tmp_path)  # or the folder that holds it
    gguf.write_bytes(b"GGUF two")
    with pytest.raises(InputError) as err:
        check_base_weights(lock, gguf)
    assert str(err.value) == (
        f"{gguf}: sha256 {_sha(b'GGUF two')[:12]}..., expected the GGUF file m.gguf the lock was made from"
    )
    with pytest.raises(InputError) as err:
        check_base_weights(lock, tmp_path / "gone.gguf")
    assert str(err.value) == (
        f"{tmp_path / 'gone.gguf'}: not a file, expected the GGUF file m.gguf the lock was made from"
    )
    # a .gguf base (any case) for a lock made from a safetensors base: refused, not compared as a folder
    upper = tmp_path / "M.GGUF"
    upper.write_bytes(b"GGUF one")
    with pytest.raises(InputError) as err:
        check_base_weights({"base": {"weights_sha256": {}}}, upper)
    assert str(err.value).endswith("expected the GGUF file (none recorded) the lock was made from")


def test_safetensors_base_messages_and_the_organism(tmp_path: Path) -> None:
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    good = {"base": {"weights_sha256": {"model.safetensors": _sha(b"weights")}}}
    check_base_weights(good, tmp_path)
    bad = {"base": {"weights_sha256": {"model.safetensors": "f" * 64, "other.safetensors": "0" * 64}}}
    with pytest.raises(InputError) as err:
        check_base_weights(bad, tmp_path)
    assert str(err.value) == (
        f"{tmp_path / 'model.safetensors'}: sha256 {_sha(b'weights')[:12]}..., expected "
        f"{'f' * 12}...; this is not the base model the lock was made from"
    )
    from mathneuro_edit.organism import organism_path

    check_base_weights({"base": {"weights_sha256": weights_sha256(organism_path())}}, "organism")


def test_weights_hash_covers_shards_and_the_index_in_name_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = ["model-00002-of-00002.safetensors", "model-00001-of-00002.safetensors", "model.safetensors.index.json"]
    for n in names:
        (tmp_path / n).write_bytes(n.encode())
    (tmp_path / "config.json").write_text("{}")
    real_glob = Path.glob
    # whatever order the file system lists them in, the record is in name order
    monkeypatch.setattr(Path, "glob", lambda self, pattern: list(reversed(sorted(real_glob(self, pattern)))))
    got = weights_sha256(tmp_path)
    assert list(got) == sorted(names) and got == {n: _sha(n.encode()) for n in names}


def test_only_recorded_local_files_are_checked_and_every_one_is(tmp_path: Path) -> None:
    math_file, general_file = tmp_path / "math.jsonl", tmp_path / "general.jsonl"
    math_file.write_text('{"question": "q", "answer": "#### 1"}\n')
    general_file.write_text('{"text": "t"}\n')
    recipe = recipe_from_dict(
        {"base": BASE, "data": {"math": str(math_file), "general": str(general_file)}, "edit": {"scale": 1.1}}
    )
    recorded = local_files(recipe)
    assert set(recorded) == {"data.math.path", "data.general.0.path"}
    check_local_files({"files": recorded}, recipe)
    # the lock did not record the first file: it is skipped, and the next one is still checked
    general_file.write_text('{"text": "changed"}\n')
    with pytest.raises(InputError, match=r"data\.general\.0\.path="):
        check_local_files({"files": {"data.general.0.path": recorded["data.general.0.path"]}}, recipe)
    # a recorded key whose path is now a folder cannot be compared: skipped, not an error
    folder = recipe_from_dict(
        {"base": BASE, "data": {"math": str(tmp_path), "general": "organism:general"}, "edit": {"scale": 1.1}}
    )
    assert local_files(folder) == {}
    check_local_files({"files": {"data.math.path": recorded["data.math.path"]}}, folder)


def test_private_paths_of_every_recipe_field(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    cwd = str(Path.cwd().resolve())
    offload, tasks = tmp_path / "off", tmp_path / "tasks"
    recipe = recipe_from_dict(
        {
            "base": {"model": "/modelx", "device_map": "auto", "offload_folder": str(offload)},
            "data": {"math": ".hidden.jsonl", "general": "\\\\share\\g.jsonl"},
            "edit": {"scale": 1.1},
            "evaluation": {**ORGANISM_DATA, "lm_eval": {"tasks": ["gsm8k"], "include_path": str(tasks)}},
        }
    )
    assert private_paths(recipe) == [
        "/modelx",  # its folder is "/": not a private folder
        str(offload),
        str(offload.resolve().parent),
        cwd,  # ".hidden.jsonl" has no folder part: only the folder it resolves to
        "\\\\share\\g.jsonl",
        cwd,  # a Windows-style path: raw (it has a backslash) and its folder here
        str(tasks),
        str(tasks.resolve().parent),  # evaluation data is organism data; lm_eval's include_path
    ]
    with pytest.raises(MathNeuroEditError) as err:
        check_private(f"model: {offload}\n", recipe, "the lock file")
    assert str(err.value) == f"the lock file would reveal the local path {str(offload)!r}; not written (please report)"


def test_lock_of_a_recipe_without_evaluation_and_a_redacted_include_path() -> None:
    recipe = recipe_from_dict({"base": BASE, "data": ORGANISM_DATA, "edit": {"scale": 1.1}, "evaluation": None})
    assert recipe.evaluation is None
    lock = build_lock(
        recipe,
        base_revision=None,
        data_records={},
        stats_sha256="s",
        mask_sha256="m",
        output_files={},
        versions={"tool": "x"},
    )
    assert "description" in lock["base"] and recipe_from_lock(lock) == recipe  # organism: described
    lm = recipe_from_dict(
        {
            "base": BASE,
            "data": ORGANISM_DATA,
            "edit": {"scale": 1.1},
            "evaluation": {**ORGANISM_DATA, "lm_eval": {"tasks": ["gsm8k"], "include_path": "<local>/tasks"}},
        }
    )
    lock = build_lock(
        quickstart_recipe(),
        base_revision=None,
        data_records={},
        stats_sha256="s",
        mask_sha256="m",
        output_files={},
        versions={"tool": "x"},
    )
    lock["recipe"] = lm.public_dict()
    with pytest.raises(InputError) as err:
        recipe_from_lock(lock)
    assert "give them again: evaluation.lm_eval.include_path (e.g." in str(err.value)
    assert recipe_from_lock(lock, ["evaluation.lm_eval.include_path=tasks"]).evaluation.lm_eval.include_path == "tasks"


def test_build_lock_refuses_a_private_path_in_its_own_text(tmp_path: Path) -> None:
    secret = tmp_path / "secret" / "data.jsonl"
    recipe = recipe_from_dict(
        {"base": BASE, "data": {"math": str(secret), "general": "organism:general"}, "edit": {"scale": 1.1}}
    )
    with pytest.raises(MathNeuroEditError) as err:
        build_lock(
            recipe,
            base_revision=None,
            data_records={"math": {"where": str(secret.parent)}},
            stats_sha256="s",
            mask_sha256="m",
            output_files={},
            versions={"tool": "x"},
        )
    assert str(err.value).startswith("the lock file would reveal the local path ")
    assert os.sep == "/"  # the paths above are POSIX
