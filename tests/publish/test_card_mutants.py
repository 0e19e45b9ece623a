"""Facts of the model card that the mutation run (scripts/mutation.sh card) found unguarded: which outputs are
listed as GGUF files, the GGUF-base note per card kind, the title for a local base and for a Hub repo, the text
of each selection method, the no-evaluation section and the module-type grouping."""

from __future__ import annotations

import pytest

from mathneuro_edit.publish.card import (
    _gguf_note,
    _gguf_usage,
    _pct,
    build_card,
    summarize_edit,
)
from mathneuro_edit.publish.lock import build_lock
from mathneuro_edit.recipe.io import quickstart_recipe, recipe_from_dict


def _lock(recipe, outputs=None, **kw):  # type: ignore[no-untyped-def]
    return build_lock(
        recipe,
        base_revision=None,
        data_records={},
        stats_sha256="s",
        mask_sha256="k",
        output_files=outputs or {},
        versions={"tool": "0.1.0"},
        **kw,
    )


def _card(recipe, lock, kind="checkpoint", **kw):  # type: ignore[no-untyped-def]
    return build_card(
        recipe=recipe,
        lock=lock,
        base_model_id=None,
        kind=kind,
        edit_summary=summarize_edit({"m.layers.0.mlp.up_proj.weight": (1, 10)}, model_params=100),
        **kw,
    )


def test_only_gguf_files_of_the_checkpoint_folder_are_listed_and_only_in_its_card() -> None:
    recipe = quickstart_recipe()
    lock = _lock(
        recipe,
        {
            "checkpoint/model.safetensors": "st",
            "checkpoint/m-Q8_0.gguf": "q8",
            "adapter/adapter_model.safetensors": "ad",
            "export/other.gguf": "x",
        },
    )
    text = _card(recipe, lock).text
    assert "| `m-Q8_0.gguf` | `q8` |" in text
    assert "| `model.safetensors` | `st` |" not in text and "| `other.gguf` |" not in text
    assert "| `adapter_model.safetensors` |" not in text
    adapter = _card(recipe, lock, kind="adapter").text
    assert "The same weights as GGUF" not in adapter and "| `m-Q8_0.gguf` |" not in adapter


def test_gguf_usage_and_note_exact_text() -> None:
    assert _gguf_usage("me/x", {}) == ""
    usage = _gguf_usage("me/x", {"a.gguf": "h1", "b.gguf": "h2"})
    assert "| `a.gguf` | `h1` |\n| `b.gguf` | `h2` |\n" in usage
    assert "hf download me/x-GGUF a.gguf --local-dir .\nllama-cli -m a.gguf\n```" in usage  # the GGUF's own repo
    assert "```bash\nllama-cli -m a.gguf\n```" in _gguf_usage(None, {"a.gguf": "h1"})
    lock = {"base": {"gguf": {"file": "base.gguf", "sha256": "b"}}}
    assert _gguf_note({"base": {}}, "checkpoint") == ""
    start = "\nThe base is the GGUF file `base.gguf` (sha256 `b`), dequantized to float32 by transformers. "
    end = (
        ". `mathneuro-edit dequantize FILE.gguf` writes the dequantized base folder once and prints its path; its "
        "safetensors sha256 are the lock's `base.weights_sha256`.\n"
    )
    assert _gguf_note(lock, "checkpoint", "float32") == (
        start + "These weights are that dequantized model with the edit (computed in float32; safetensors, not "
        "quantized)" + end
    )
    assert (
        _gguf_note(lock, "checkpoint", "bfloat16")
        == (  # outputs.dtype: auto on a quantized GGUF
            start + "These weights are that dequantized model with the edit (computed in float32, then stored in "
            "bfloat16 (`outputs.dtype`; the evaluation below ran in float32, before that cast); safetensors, "
            "not quantized)" + end
        )
    )
    assert _gguf_note(lock, "adapter") == (
        start + "The adapter applies to that dequantized model (not to a quantized one, nor to the Hub model it "
        "was converted from)" + end
    )


def test_title_for_a_local_base_and_for_a_hub_repo() -> None:
    recipe = quickstart_recipe()
    lock = _lock(recipe)
    lock["recipe"] = {**lock["recipe"], "base": {**lock["recipe"]["base"], "model": "<local>"}}
    assert "\n# local model (MathNeuro edit: pruned (set to 0))\n" in _card(recipe, lock).text
    assert "\n# my-edit\n" in _card(recipe, _lock(recipe), repo_id="someone/my-edit").text
    assert "\n# organism (MathNeuro edit: pruned (set to 0))\n" in _card(recipe, _lock(recipe)).text


@pytest.mark.parametrize(
    "method, sentence",
    [
        (
            "wanda",
            "Weights were selected as the top 5% of each matrix by the same score on math text only (the paper's "
            "Wanda-style baseline, without the general-text subtraction).",
        ),
        ("random", "Weights were selected at random, as many as the top 5% of each matrix (a control for MathNeuro)."),
    ],
)
def test_each_method_is_described(method: str, sentence: str) -> None:
    recipe = recipe_from_dict(quickstart_recipe().resolved_dict(), [f"mask.method={method}"])
    text = _card(recipe, _lock(recipe)).text
    assert sentence in text and "MathNeuro scores every weight" not in text


def test_sections_without_evaluation_and_module_types() -> None:
    recipe = quickstart_recipe()
    text = _card(recipe, _lock(recipe)).text
    assert "## Evaluation\n\nNo evaluation was run for this model.\n" in text
    s = summarize_edit(
        {"lm_head.weight": (1, 4), "m.0.up_proj.bias": (2, 4), "m.0.up_proj.weight": (1, 4), "weight": (0, 4)},
        model_params=100,
    )
    assert s["by_module"] == {
        "lm_head": {"matrices": 1, "selected": 1, "total": 4},
        "up_proj": {"matrices": 2, "selected": 3, "total": 8},
        "weight": {"matrices": 1, "selected": 0, "total": 4},
    }
    assert _pct(1, 0) == "n/a" and _pct(1, 8) == "12.5%"


def _readme(folder, meta: str):  # type: ignore[no-untyped-def]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "README.md").write_text(f"---\n{meta}\n---\n# a model\n", encoding="utf-8")


def test_license_from_a_local_folder_and_from_the_hub_cache(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from huggingface_hub import constants

    from mathneuro_edit.publish.base_card import license_from_base

    _readme(tmp_path / "ok", "license: mit\nmodel-index: 5")  # broken eval metadata is ignored, the license read
    assert license_from_base(tmp_path / "ok") == "mit"
    _readme(tmp_path / "two", "license: [mit, apache-2.0]")  # not one license id: none
    assert license_from_base(tmp_path / "two") is None
    # the Hub cache (no network): refs/<revision> -> snapshots/<commit>/README.md
    cache = tmp_path / "hub"
    repo = cache / "models--org--base"
    for ref, commit, lic in (("main", "a" * 40, "apache-2.0"), ("v1", "b" * 40, "llama3.2")):
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / ref).write_text(commit)
        _readme(repo / "snapshots" / commit, f"license: {lic}")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    assert license_from_base("org/base") == "apache-2.0"
    assert license_from_base("org/base", revision="v1") == "llama3.2"
    assert license_from_base("org/missing") is None and license_from_base("not a repo id!") is None


def test_card_rows_and_lines_exactly() -> None:
    recipe = quickstart_recipe()
    lock = _lock(recipe, {"checkpoint/m-Q8_0.gguf": "q8"}, base_gguf={"file": "base.gguf", "sha256": "b"})
    summary = summarize_edit({"m.0.mlp.down_proj.weight": (1, 10), "m.0.mlp.up_proj.weight": (3, 10)}, model_params=100)
    card = build_card(
        recipe=recipe, lock=lock, base_model_id=None, kind="checkpoint", edit_summary=summary, repo_id="someone/my-edit"
    )
    text = card.text
    assert "\nThis model is a MathNeuro edit of " in text
    assert (
        "Made with [mathneuro-edit](https://github.com/mathneuro-edit/mathneuro-edit) 0.1.0.\n" in text
    )  # no effect sentence
    assert "| scale | 0 (prune) |\n" in text and "| mask sha256 | `k` |\n" in text
    assert "| down_proj | 1 | 1 | 10 | 10% |\n| up_proj | 1 | 3 | 10 | 30% |\n" in text
    assert "\n## Evaluation\n\nNo evaluation was run for this model.\n\n## How to use" in text
    assert "hf download someone/my-edit-GGUF Organism-100-MathNeuro-Prune-Q8_0.gguf --local-dir ." in text
    assert "published in their own repo, [someone/my-edit-GGUF](https://huggingface.co/someone/my-edit-GGUF)" in text
    adapter = build_card(recipe=recipe, lock=lock, base_model_id=None, kind="adapter", edit_summary=summary).text
    assert "\nThis PEFT adapter holds a MathNeuro edit of " in adapter
    assert "The adapter applies to that dequantized model (not to a quantized one, nor to the Hub" in adapter
    boost = recipe_from_dict(quickstart_recipe().resolved_dict(), ["edit={scale: 1.1, prune: false}"])
    assert "| scale | 1.1 |\n" in _card(boost, _lock(boost)).text
    hub = build_card(
        recipe=recipe, lock=_lock(recipe), base_model_id="org/base-name", kind="checkpoint", edit_summary=summary
    ).text
    assert "\n# base-name (MathNeuro edit: pruned (set to 0))\n" in hub


def test_a_base_without_description_has_no_description_key() -> None:
    recipe = recipe_from_dict(quickstart_recipe().resolved_dict(), ["base.model=org/not-cached-anywhere"])
    lock = _lock(recipe)
    assert "description" not in lock["base"] and lock["base"]["model"] == "org/not-cached-anywhere"
