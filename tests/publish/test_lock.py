"""Lock file: the exact keys and hashes it pins, byte-stable writing, and strict reading; the base-weights check
(GGUF file, safetensors folder, sharded folder, the organism) with its exact messages, which local data files are
checked, every private path of a recipe, and build_lock / recipe_from_lock for a recipe without evaluation or with a
redacted lm-eval include path. Also the card facts derived from the recipe."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
import yaml

from mathneuro_edit.errors import InputError, MathNeuroEditError
from mathneuro_edit.layout import LOCK_NAME
from mathneuro_edit.publish.lock import (
    build_lock,
    check_base_weights,
    check_local_files,
    check_private,
    local_files,
    private_paths,
    read_lock,
    recipe_from_lock,
    weights_sha256,
    write_lock,
)
from mathneuro_edit.recipe.io import quickstart_recipe, recipe_from_dict
from mathneuro_edit.recipe.schema import recipe_sha256
from mathneuro_edit.util.hashing import sha256_file


def test_build_lock_is_exactly_the_documented_record(tmp_path: Path):
    """Every key of docs/formats.md's lock table, in its order, for the plain run and for one with every option."""
    recipe = quickstart_recipe()
    versions = {"mathneuro_edit": "0.1.0", "torch": "x"}
    organism = {"model_type": "llama", "architecture": "LlamaForCausalLM"}  # the organism's config.json
    lock = build_lock(
        recipe,
        base_revision="abc",
        data_records={"math": {"sha": "1"}, "general": [{"sha": "2"}]},
        stats_sha256={"math": "m", "general": "g"},
        mask_sha256="k",
        output_files={"b.txt": "2", "a.txt": "1"},
        versions=versions,
        base_weights={"w": "h"},
    )
    assert lock == {
        "lock_version": lock["lock_version"],
        "recipe_sha256": recipe_sha256(recipe),
        "recipe": recipe.public_dict(),
        "base": {"model": "organism", "revision": "abc", "weights_sha256": {"w": "h"}, "description": organism},
        "data": {"math": {"sha": "1"}, "general": [{"sha": "2"}]},
        "files": {},  # organism data: no local file
        "stats_sha256": {"math": "m", "general": "g"},
        "mask_sha256": "k",
        "outputs": {"a.txt": "1", "b.txt": "2"},
        "versions": versions,
    }
    assert list(lock) == [
        "lock_version",
        "recipe_sha256",
        "recipe",
        "base",
        "data",
        "files",
        "stats_sha256",
        "mask_sha256",
        "outputs",
        "versions",
    ]  # the documented order (write_lock keeps it)
    assert list(lock["outputs"]) == ["a.txt", "b.txt"]  # sorted: the same run gives the same bytes
    assert (
        build_lock(
            recipe,
            base_revision=None,
            data_records={},
            stats_sha256="s",
            mask_sha256="k",
            output_files={},
            versions=versions,
        )["stats_sha256"]
        == "s"
    )
    default = build_lock(
        recipe, base_revision=None, data_records={}, stats_sha256="s", mask_sha256="k", output_files={}
    )["versions"]
    assert set(default) >= {"tool", "torch", "transformers", "peft", "safetensors", "huggingface_hub", "python"}
    assert all(isinstance(v, str) and v for v in default.values())

    # every optional key: a local data file, an lm-eval task folder, a GGUF base, the edit summary
    data = tmp_path / "private" / "math.jsonl"
    data.parent.mkdir()
    data.write_bytes(b'{"question": "1+1?", "answer": "#### 2"}\n')
    tasks = tmp_path / "private" / "tasks"
    (tasks / "sub").mkdir(parents=True)
    (tasks / "t.yaml").write_bytes(b"task: t\n")
    (tasks / "sub" / "d.jsonl").write_bytes(b"{}\n")
    full = recipe_from_dict(
        recipe.resolved_dict(),
        ["data.math={path: " + str(data) + "}", "evaluation.lm_eval={tasks: [t], include_path: " + str(tasks) + "}"],
    )
    summary = {
        "selected": 3,
        "targeted": 400,
        "matrices": 1,
        "model_params": 1000,
        "by_module": {"down_proj": {"matrices": 1, "selected": 3, "total": 400}},
    }
    lock = build_lock(
        full,
        base_revision=None,
        data_records={"math": {"sha": "1"}},
        stats_sha256="s",
        mask_sha256="k",
        output_files={},
        versions=versions,
        base_weights={"w": "h"},
        edit_summary=summary,
        base_gguf={"file": "m.Q8_0.gguf", "sha256": "g"},
    )
    sha = lambda b: hashlib.sha256(b).hexdigest()  # noqa: E731
    assert lock == {
        "lock_version": 1,
        "recipe_sha256": recipe_sha256(full),
        "recipe": full.public_dict(),
        "base": {
            "model": "organism",
            "revision": None,
            "weights_sha256": {"w": "h"},
            "description": organism,
            "gguf": {"file": "m.Q8_0.gguf", "sha256": "g"},
        },
        "data": {"math": {"sha": "1"}},
        "files": {"data.math.path": {"name": "math.jsonl", "sha256": sha(data.read_bytes())}},
        "stats_sha256": "s",
        "mask_sha256": "k",
        "outputs": {},
        "versions": versions,
        "edit_summary": summary,
        "lm_eval": {"include_path_sha256": {"sub/d.jsonl": sha(b"{}\n"), "t.yaml": sha(b"task: t\n")}},
    }
    assert list(lock)[-2:] == ["edit_summary", "lm_eval"]
    assert lock["recipe"]["data"]["math"]["path"] == "<local>/math.jsonl"
    assert str(tmp_path) not in yaml.safe_dump(lock)  # public: no local folder anywhere


def test_write_lock_keeps_order_and_unicode_and_reads_back(tmp_path: Path):
    lock = {
        "lock_version": build_lock(
            quickstart_recipe(),
            base_revision=None,
            data_records={},
            stats_sha256="s",
            mask_sha256="k",
            output_files={},
            versions={},
        )["lock_version"],
        "zeta": "first",
        "recipe": {"note": "π ≈ 3.14"},
        "alpha": [1, 2],
    }
    path = write_lock(tmp_path, lock)
    assert path == tmp_path / LOCK_NAME
    raw = path.read_bytes()
    text = raw.decode("utf-8")
    assert "π ≈ 3.14" in text and "\r" not in text  # readable unicode, LF line ends on every OS
    body = [ln.split(":")[0] for ln in text.splitlines() if ln and not ln.startswith((" ", "#", "-"))]
    assert body == ["lock_version", "zeta", "recipe", "alpha"]  # the lock's own order, not sorted
    assert [p.name for p in tmp_path.iterdir()] == [LOCK_NAME]  # no temp file left behind
    assert read_lock(tmp_path) == lock and read_lock(path) == lock
    for bad in ({"recipe": {}}, {"lock_version": lock["lock_version"]}, ["not", "a", "mapping"]):
        (tmp_path / "bad.yaml").write_text(yaml.safe_dump(bad))
        with pytest.raises(InputError, match="not a mathneuro-edit lock file"):
            read_lock(tmp_path / "bad.yaml")


def test_sha256_file_of_a_large_file(tmp_path: Path):
    data = bytes(range(256)) * 20_000  # several read chunks
    (tmp_path / "f.bin").write_bytes(data)
    assert sha256_file(tmp_path / "f.bin") == hashlib.sha256(data).hexdigest()


def test_private_paths_lists_paths_and_their_folders(tmp_path: Path):
    model = tmp_path / "secret" / "model"
    data = tmp_path / "data" / "math.jsonl"
    recipe = recipe_from_dict(
        {
            "base": {"model": str(model)},
            "data": {"math": str(data), "general": "organism:general"},
            "edit": {"scale": 1.1},
        }
    )
    found = private_paths(recipe)
    assert str(model) in found and str(model.resolve().parent) in found
    assert str(data) in found and str(data.resolve().parent) in found
    assert "organism:general" not in found and "" not in found and "/" not in found
    assert private_paths(quickstart_recipe()) == []


def test_card_tags_prune_text_and_texts_per_general_set():
    """Card facts derived from the recipe: tags, action, top-k text, data table counts."""
    from huggingface_hub import ModelCard

    from mathneuro_edit.publish.card import CardSource, build_card, summarize_edit
    from mathneuro_edit.runs.steps.mask import data_records

    recipe = recipe_from_dict(
        quickstart_recipe().resolved_dict(),
        [
            "edit={prune: true}",
            "data.samples=10",
            "mask.granularity=row",
            "data.general=[{path: organism:general, split: train}, {path: organism:general, split: test}, "
            "{path: organism:general, split: train}]",
        ],
    )
    records = data_records(recipe)  # the lock's data section: the card's data table is built from it alone
    lock = build_lock(
        recipe,
        base_revision=None,
        data_records=records,
        stats_sha256="s",
        mask_sha256="k",
        output_files={},
        versions={},
    )
    card = build_card(
        CardSource(
            recipe=recipe,
            lock=lock,
            edit_summary=summarize_edit({"m.layers.0.mlp.down_proj.weight": (3, 400)}, model_params=1000),
        ),
        "checkpoint",
        base_model_id=None,
    )
    meta = ModelCard(card.content).data.to_dict()
    assert meta["tags"] == ["mathneuro", "mathneuro-edit", "model-editing", "math", "pruning"]
    text = card.text
    assert "were **pruned (set to 0)**" in text and "top 5% of each row" in text
    assert "| edit | pruned (set to 0) |" in text and "| top_k | 0.05 (per row) |" in text
    rows = [ln for ln in text.splitlines() if ln.startswith(("| math |", "| general |"))]
    sha = [r["sha256"] for r in (*records["math"], *records["general"])]
    # data.samples is per set (docs/recipes.md): 10 math texts and 10 of EACH general source, in recipe order;
    # the same source and seed sample the same texts (sets 1 and 3), the test split others
    assert sha[1] == sha[3] and len({sha[0], sha[1], sha[2]}) == 3
    assert rows == [
        f"| math | `organism:math` | `train` | 10 | `{sha[0]}` |  |",
        f"| general | `organism:general` | `train` | 10 | `{sha[1]}` |  |",
        f"| general | `organism:general` | `test` | 10 | `{sha[2]}` |  |",
        f"| general | `organism:general` | `train` | 10 | `{sha[3]}` |  |",
    ]
    assert "| down_proj | 1 | 3 | 400 | 0.75% |" in text
    assert "# organism (MathNeuro edit: pruned (set to 0))" in text
    boost = build_card(
        CardSource(
            recipe=quickstart_recipe(["edit.scale=1.1"]), lock=lock, edit_summary=summarize_edit({}, model_params=1000)
        ),
        "adapter",
        base_model_id=None,
    )
    assert "pruning" not in ModelCard(boost.content).data.to_dict()["tags"]
    assert "This PEFT adapter holds a MathNeuro edit of the model organism shipped with mathneuro-edit" in boost.text


def test_card_of_a_gguf_base_names_the_file_and_its_sha256():
    """The lock's ``base.gguf`` and a GGUF output reach the card (tag, base paragraph, download table)."""
    from huggingface_hub import ModelCard

    from mathneuro_edit.publish.card import CardSource, build_card, summarize_edit

    recipe = quickstart_recipe()
    lock = build_lock(
        recipe,
        base_revision=None,
        data_records={},
        stats_sha256="s",
        mask_sha256="k",
        output_files={"checkpoint/model-Q8_0.gguf": "q8"},
        versions={},
        base_gguf={"file": "base.Q4_1.gguf", "sha256": "b41"},
    )
    card = build_card(
        CardSource(recipe=recipe, lock=lock, edit_summary=summarize_edit({}, model_params=1000)),
        "checkpoint",
        base_model_id=None,
    )
    # the checkpoint's repo holds no GGUF file (the GGUF has a repo of its own): no `gguf` tag on it (issue 39)
    assert "gguf" not in ModelCard(card.content).data.to_dict()["tags"]
    gguf_repo = build_card(
        CardSource(recipe=recipe, lock=lock, edit_summary=summarize_edit({}, model_params=1000)),
        "gguf",
        base_model_id=None,
    )
    assert {"gguf", "llama.cpp"} <= set(ModelCard(gguf_repo.content).data.to_dict()["tags"])
    assert "The base is the GGUF file `base.Q4_1.gguf` (sha256 `b41`), dequantized to float32" in card.text
    assert "| `model-Q8_0.gguf` | `q8` |" in card.text
    plain = build_card(
        CardSource(
            recipe=recipe,
            lock=build_lock(
                recipe,
                base_revision=None,
                data_records={},
                stats_sha256="s",
                mask_sha256="k",
                output_files={},
                versions={},
            ),
            edit_summary=summarize_edit({}, model_params=1000),
        ),
        "checkpoint",
        base_model_id=None,
    )
    assert "gguf" not in ModelCard(plain.content).data.to_dict()["tags"] and "GGUF file" not in plain.text


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
