"""Model card and lock file: metadata parses back, the body says what was done, local paths never leak; which
outputs are listed as GGUF files, the GGUF-base note per card kind, the title for a local base and for a Hub repo,
the text of each selection method, the no-evaluation section, the module-type grouping and the base's license
read from a local folder or the Hub cache."""

from __future__ import annotations

import hashlib
from pathlib import Path

import jinja2
import pytest
import torch
import yaml
from huggingface_hub import ModelCard, constants
from safetensors.torch import save_file

from mathneuro_edit.data.sources import load_texts
from mathneuro_edit.errors import InputError, MathNeuroEditError
from mathneuro_edit.evaluation.results import (
    EvalResults,
    GeneralResult,
    MathPrediction,
    MathResult,
)
from mathneuro_edit.layout import LOCK_NAME
from mathneuro_edit.outputs.adapter import ADAPTER
from mathneuro_edit.outputs.checkpoint import CHECKPOINT
from mathneuro_edit.outputs.gguf import beside_checkpoint
from mathneuro_edit.publish.base_card import base_card_fields
from mathneuro_edit.publish.card import (
    TEMPLATE,
    CardSource,
    build_card,
    summarize_edit,
    write_card,
)
from mathneuro_edit.publish.card_sections import pct
from mathneuro_edit.publish.card_weights import gguf_base
from mathneuro_edit.publish.lock import (
    build_lock,
    check_base_weights,
    library_versions,
    output_hashes,
    read_lock,
    recipe_from_lock,
    write_lock,
)
from mathneuro_edit.recipe.io import quickstart_recipe, recipe_from_dict
from mathneuro_edit.recipe.schema import recipe_sha256

COUNTS = {
    "model.layers.0.self_attn.q_proj.weight": (10, 256),
    "model.layers.1.self_attn.q_proj.weight": (6, 256),
    "model.layers.0.mlp.down_proj.weight": (20, 1024),
    "model.layers.0.mlp.experts.gate_up_proj": (4, 2048),
}


def _math(flags: list[bool]) -> MathResult:
    preds = tuple(MathPrediction(f"q{i}", 1, "", 1 if ok else 0) for i, ok in enumerate(flags))
    return MathResult(sum(flags), len(flags), preds)


def _paired(base_right: int, lost: int, gained: int, n: int = 200) -> tuple[MathResult, MathResult]:
    """Base right on the first ``base_right`` problems; the edit loses ``lost`` of them and gains ``gained``."""
    base = [i < base_right for i in range(n)]
    edited = [(ok and i >= lost) or (not ok and i < base_right + gained) for i, ok in enumerate(base)]
    return _math(base), _math(edited)


_B, _E = _paired(124, 4, 20)  # 124/200 -> 140/200; discordant 4 vs 20: McNemar p = 0.00154
EVAL = EvalResults(
    {"gsm8k": _B, "wiki": GeneralResult(2.5, 100, 0.0, "", (100.0, 150.0), (40, 60))},
    {"gsm8k": _E, "wiki": GeneralResult(2.51, 100, 0.004, "", (100.5, 150.5), (40, 60))},
).to_dict()
EVAL["organism"] = {"edited": {"math_accuracy": 0.9}}  # an older eval.json: no counts, no base


def _lock(recipe, **kw):  # noqa: ANN001, ANN202 - small local helper
    args = {
        "base_revision": None,
        "data_records": {},
        "stats_sha256": {"math": "a" * 64, "general": "b" * 64},
        "mask_sha256": "c" * 64,
        "output_files": {"model.safetensors": "d" * 64},
    }
    return build_lock(recipe, **{**args, **kw})


def _card(recipe, lock, **kw):  # noqa: ANN001, ANN202
    args = {
        "base_model_id": None,
        "kind": "checkpoint",
        "edit_summary": summarize_edit(COUNTS, model_params=10_000),
        "eval_results": None,
        "license": None,
    }
    return _build(recipe, lock, **{**args, **kw})


def _build(recipe, lock, kind, base_model_id=None, repo_id=None, base_repo=None, **source):  # noqa: ANN001, ANN202
    """``build_card`` with the card's source given as keywords (what the tests vary)."""
    return build_card(
        CardSource(recipe, lock, **source), kind, base_model_id=base_model_id, repo_id=repo_id, base_repo=base_repo
    )


@pytest.fixture()
def local_base(tmp_path: Path) -> Path:
    """A local base model folder under a path that must never be published."""
    base = tmp_path / "home-of-alice-private" / "my-llama"
    base.mkdir(parents=True)
    save_file({"w": torch.ones(4, 4)}, str(base / "model.safetensors"))
    (base / "README.md").write_text("---\nlicense: llama3.2\n---\n# base\n")
    return base


def test_summarize_edit_groups_by_module_type() -> None:
    s = summarize_edit(COUNTS, model_params=10_000)
    assert s["by_module"] == {
        "down_proj": {"matrices": 1, "selected": 20, "total": 1024},
        "gate_up_proj": {"matrices": 1, "selected": 4, "total": 2048},
        "q_proj": {"matrices": 2, "selected": 16, "total": 512},
    }
    assert (s["selected"], s["targeted"], s["matrices"], s["model_params"]) == (40, 3584, 4, 10_000)


def test_checkpoint_card_metadata_parses_back(tmp_path: Path) -> None:
    recipe = recipe_from_dict(
        quickstart_recipe().resolved_dict(),
        [
            "edit.scale=1.1",
            "base.model=meta-llama/Llama-3.2-1B-Instruct",
            "data.math={path: 'hf://datasets/openai/gsm8k', config: main}",
            "hub.repo_id=me/llama-boost",
        ],
    )
    lock = _lock(recipe, base_revision="0" * 40)
    card = _card(recipe, lock, base_model_id="meta-llama/Llama-3.2-1B-Instruct", eval_results=EVAL, license="llama3.2")
    write_card(tmp_path, card)
    meta = ModelCard.load(tmp_path / "README.md").data.to_dict()
    assert meta["base_model"] == "meta-llama/Llama-3.2-1B-Instruct"
    assert meta["base_model_relation"] == "finetune" and meta["library_name"] == "transformers"
    assert meta["pipeline_tag"] == "text-generation" and meta["license"] == "llama3.2"
    assert meta["datasets"] == ["openai/gsm8k"]
    assert {"mathneuro", "model-editing"} <= set(meta["tags"])
    text = (tmp_path / "README.md").read_text()
    assert (
        "scaled by 1.1" in text
        and "| method | mathneuro ([MathNeuro, arXiv 2410.16930]" in text
        and "top_k | 0.05" in text
    )
    assert "| q_proj | 2 | 16 | 512 | 3.12% |" in text
    assert "40 of 3,584 scored (1.12%); 0.4% of the model's 10,000 parameters" in text
    assert 'AutoModelForCausalLM.from_pretrained("me/llama-boost")' in text
    assert "mathneuro-edit reproduce me/llama-boost" in text and "--base" not in text
    # hand-checked: Wilson(124, 200) = 55.1-68.4, Wilson(140, 200) = 63.3-75.9, 2 * P(Bin(24, 1/2) <= 4) = 0.00154
    assert (
        "| `gsm8k` | math accuracy | 62.0% (124/200, 55.1-68.4) | 70.0% (140/200, 63.3-75.9) | "
        "+8.0 pp, p = 0.00154 (significant) |"
    ) in text
    # SE over 2 texts, sqrt(2 * sum (s_i - m c_i)^2) / sum c: base 0 (2.5 per token in both); edited
    # m = 2.51, residuals 0.1 and -0.1 -> sqrt(0.04) / 100 = 0.002; the paired change (0.5, 0.5) the same 0.002
    assert "| `wiki` | general loss (± SE) | 2.5 ± 0 | 2.51 ± 0.002 | +0.01 ± 0.002 |" in text
    assert "| `wiki` | general KL to base | - | 0.004 |  |" in text
    assert "| `organism` | math accuracy | - | 90.0% | - |" in text
    assert "`organism` | general loss" not in text  # missing on both sides: no row
    first = text.split("\n# ", 1)[1].split("\n\n", 2)[1]  # the paragraph under the title
    assert "The edit significantly raised math accuracy (62.0% -> 70.0% on 200 problems of `gsm8k`" in first
    assert "no significant effect" not in text
    assert "@article{christ2024mathneurosurgery," in text and "2410.16930" in text and "Hartvigsen" in text
    # the recipe once, the lock as a file named with its sha256, not embedded
    assert text.count("```yaml\n") == 1 and "lock_version" not in text
    assert "`mathneuro_recipe.lock.yaml` in this repo" in text
    assert f"| recipe sha256 | `{recipe_sha256(recipe)}` |" in text  # the settings table names the recipe too
    recipe_block = yaml.safe_load(text.split("```yaml\n", 1)[1].split("\n```", 1)[0])
    # the recipe's settings that are not defaults, ready to save and run: the same recipe (issue 39: ~145 lines
    # of mostly nulls before)
    assert recipe_from_dict(recipe_block).public_dict() == recipe.public_dict()
    assert recipe_block["edit"] == {"scale": 1.1} and "null" not in yaml.safe_dump(recipe_block)
    assert "mask" not in recipe_block and recipe_block["hub"] == {"repo_id": "me/llama-boost"}
    # model-index: this model's results only (the Hub reads each one as this model's); the base's are in the text
    names = [r.metric_name for r in ModelCard.load(tmp_path / "README.md").data.eval_results]
    assert names and not any("base" in n and "KL" not in n for n in names), names
    assert "pip install mathneuro-edit" not in text and "PATH/TO" not in text


def test_card_says_when_an_edit_has_no_significant_effect() -> None:
    recipe = quickstart_recipe(["edit.scale=1.1"])
    saturated = _math([True] * 100)  # a boost of a model that already solves everything: 100% -> 100%
    same = EvalResults({"math": saturated}, {"math": saturated}).to_dict()
    first = _card(recipe, _lock(recipe), eval_results=same).text.split("\n# ", 1)[1].split("\n\n", 2)[1]
    assert first.endswith(
        "**The edit has no significant effect on math accuracy** (100.0% -> 100.0% on 100 problems "
        "of `math`, 0 problems right only before, 0 only after; paired exact McNemar p = 1): do not "
        "present it as a math improvement (or loss) over the base."
    )
    b, e = _paired(100, 3, 9)  # +6 pp but p = 0.146: not significant either
    text = _card(recipe, _lock(recipe), eval_results=EvalResults({"math": b}, {"math": e}).to_dict()).text
    assert "| +3.0 pp, p = 0.146 (not significant) |" in text and "**The edit has no significant effect" in text
    assert "significant" not in _card(recipe, _lock(recipe)).text  # no evaluation: no claim either way


def test_adapter_card() -> None:
    recipe = quickstart_recipe()
    card = _card(recipe, _lock(recipe), base_model_id="org/base-model", kind="adapter")
    assert card.data.library_name == "peft" and card.data.base_model_relation == "adapter"
    assert 'PeftModel.from_pretrained(base, ".")' in card.text  # this folder, until `push` renders it for a repo
    assert (
        'PeftModel.from_pretrained(base, "me/x")'
        in _card(recipe, _lock(recipe), base_model_id="org/base-model", kind="adapter", repo_id="me/x").text
    )
    assert 'AutoModelForCausalLM.from_pretrained("org/base-model")' in card.text
    assert "No evaluation was run" in card.text
    # rendered before the push, with hub.repo_id set: the adapter's own repo (one repo per output), not the checkpoint's
    with_hub = recipe_from_dict({**recipe.model_dump(mode="json", exclude_none=True), "hub": {"repo_id": "me/boost"}})
    local = _card(with_hub, _lock(with_hub), base_model_id="org/base-model", kind="adapter").text
    assert 'PeftModel.from_pretrained(base, "me/boost-adapter")' in local and '"me/boost")' not in local
    organism_card = _card(recipe, _lock(recipe), kind="adapter")  # the organism has no Hub id: load it by path
    assert "from mathneuro_edit.organism import organism_path" in organism_card.text
    assert "AutoModelForCausalLM.from_pretrained(organism_path())" in organism_card.text
    assert "base_model" not in organism_card.data.to_dict()


def test_card_argument_errors() -> None:
    recipe = quickstart_recipe()
    with pytest.raises(InputError, match="kind: must be 'checkpoint', 'adapter' or 'gguf'"):
        _card(recipe, _lock(recipe), kind="merged")
    with pytest.raises(InputError, match="base_model_id: '/models/x' is not a Hub repo id"):
        _card(recipe, _lock(recipe), base_model_id="/models/x")


def test_local_base_path_never_reaches_card_or_lock(tmp_path: Path, local_base: Path) -> None:
    data_file = local_base.parent / "math.jsonl"
    data_file.write_text('{"question": "1+1?", "answer": "#### 2"}\n')
    recipe = recipe_from_dict(
        quickstart_recipe().resolved_dict(), [f"base.model={local_base}", f"data.math={{path: '{data_file}'}}"]
    )
    records = {"math": [load_texts(recipe.data.math, 1, 0).record]}
    lock = _lock(recipe, data_records=records)
    out = tmp_path / "out"
    out.mkdir()
    write_lock(out, lock)
    card = _card(recipe, lock, license=license_from_base(local_base))
    write_card(out, card)
    for published in (out / "README.md", out / LOCK_NAME):
        text = published.read_text()
        assert "home-of-alice-private" not in text and str(tmp_path) not in text, published.name
    meta = ModelCard.load(out / "README.md").data.to_dict()
    assert "base_model" not in meta and "base_model_relation" not in meta and meta["license"] == "llama3.2"
    assert lock["recipe"]["base"]["model"] == "<local>"
    assert lock["recipe"]["data"]["math"]["path"] == "<local>/math.jsonl"
    assert lock["base"]["weights_sha256"] == {
        "model.safetensors": hashlib.sha256((local_base / "model.safetensors").read_bytes()).hexdigest()
    }
    assert (
        "a local model folder whose Hub origin is not recorded (the recipe has no `base.hub_id`)" in card.text
        and '--base "$BASE_MODEL_DIR"' in card.text
    )
    assert "--set data.math.path=math.jsonl" in card.text and lock["files"]["data.math.path"]["name"] == "math.jsonl"
    with pytest.raises(InputError, match=r"give them again: base.model \(--base PATH\), data.math.path"):
        recipe_from_lock(read_lock(out))
    again = recipe_from_lock(read_lock(out), [f"base.model={local_base}", f"data.math.path={data_file}"])
    assert again == recipe and recipe_sha256(again) == lock["recipe_sha256"]


def test_a_leaking_lock_is_refused(local_base: Path) -> None:
    recipe = recipe_from_dict(quickstart_recipe().resolved_dict(), [f"base.model={local_base}"])
    # a data record naming the local path (the card's data table prints each source's path)
    records = {"math": [{"source": {"path": str(local_base / "math.jsonl")}, "n_sampled": 1, "sha256": "e" * 64}]}
    with pytest.raises(MathNeuroEditError, match="would reveal the local path"):
        _card(recipe, _lock(recipe, data_records=records))
    lock = {**_lock(recipe), "note": f"loaded from {local_base}"}  # the lock is a file, not in the card
    assert str(local_base) not in _card(recipe, lock).text


def license_from_base(base: str | Path, revision: str | None = None) -> str | None:
    """The ``license`` id of a base model's card, as the card carries it."""
    return base_card_fields(base, revision).get("license")


def test_license_from_base(tmp_path: Path, local_base: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert license_from_base(local_base) == "llama3.2"
    assert license_from_base(tmp_path) is None  # a folder without a card
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    assert license_from_base("org/not-cached") is None
    snapshot = tmp_path / "hub" / "models--org--cached" / "snapshots" / ("e" * 40)
    snapshot.mkdir(parents=True)
    (snapshot / "README.md").write_text("---\nlicense: apache-2.0\n---\n")
    (tmp_path / "hub" / "models--org--cached" / "refs").mkdir()
    (tmp_path / "hub" / "models--org--cached" / "refs" / "main").write_text("e" * 40)
    assert license_from_base("org/cached") == "apache-2.0"


def test_lock_round_trip(tmp_path: Path) -> None:
    recipe = quickstart_recipe()
    lock = _lock(recipe, versions={"tool": "0.1.0"})
    path = write_lock(tmp_path, lock)
    assert path == tmp_path / LOCK_NAME and path.read_text().startswith("# Written by mathneuro-edit")
    assert read_lock(tmp_path) == lock == read_lock(path)
    assert [p.name for p in tmp_path.iterdir()] == [LOCK_NAME]  # no temp file left behind
    assert recipe_from_lock(read_lock(tmp_path)) == recipe
    assert lock["recipe_sha256"] == recipe_sha256(recipe) and lock["mask_sha256"] == "c" * 64
    assert set(library_versions()) == {
        "tool",
        "torch",
        "transformers",
        "peft",
        "safetensors",
        "huggingface_hub",
        "python",
    }


def test_reproducing_a_local_base_needs_its_path_and_checks_its_weights(tmp_path: Path, local_base: Path) -> None:
    recipe = recipe_from_dict(quickstart_recipe().resolved_dict(), [f"base.model={local_base}"])
    lock = _lock(recipe)
    with pytest.raises(InputError, match=r"redacted for privacy; give them again: base.model \(--base PATH\)"):
        recipe_from_lock(lock)
    assert recipe_from_lock(lock, [f"base.model={local_base}"]) == recipe
    check_base_weights(lock, local_base)
    save_file({"w": torch.zeros(4, 4)}, str(local_base / "model.safetensors"))
    with pytest.raises(InputError, match=r"model\.safetensors: sha256 .* expected .*not the base model"):
        check_base_weights(lock, local_base)
    (local_base / "model.safetensors").unlink()
    with pytest.raises(InputError, match=r"model\.safetensors: missing"):
        check_base_weights(lock, local_base)


def test_output_hashes(tmp_path: Path) -> None:
    (tmp_path / "adapter").mkdir()
    (tmp_path / "adapter" / "a.bin").write_bytes(b"abc")
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "README.md").write_text("card")
    (tmp_path / LOCK_NAME).write_text("lock")
    (tmp_path / ".cache").mkdir()
    (tmp_path / ".cache" / "x").write_text("hidden")
    assert output_hashes(tmp_path) == {
        "adapter/a.bin": hashlib.sha256(b"abc").hexdigest(),
        "config.json": hashlib.sha256(b"{}").hexdigest(),
    }


def test_read_lock_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="lock file not found"):
        read_lock(tmp_path)
    (tmp_path / LOCK_NAME).write_text("just: yaml\n")
    with pytest.raises(InputError, match="not a mathneuro-edit lock file"):
        read_lock(tmp_path)
    (tmp_path / LOCK_NAME).write_text("lock_version: 99\nrecipe: {}\n")
    with pytest.raises(InputError, match="lock_version 99 is not supported"):
        read_lock(tmp_path)
    with pytest.raises(InputError, match="output folder does not exist"):
        write_lock(tmp_path / "missing", {"lock_version": 1})


def test_reproduce_reads_the_lock_of_a_hub_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`mathneuro-edit reproduce me/name`, as the pushed card says: the lock is downloaded from the repo."""
    import huggingface_hub
    from huggingface_hub.errors import LocalEntryNotFoundError

    from mathneuro_edit.runs.reproduce import read_any_lock

    lock = _lock(quickstart_recipe())
    write_lock(tmp_path, lock)
    asked = []
    monkeypatch.setattr(
        huggingface_hub,
        "hf_hub_download",
        lambda repo, name, **kw: asked.append((repo, name)) or str(tmp_path / LOCK_NAME),
    )
    monkeypatch.chdir(tmp_path)  # "me/name" is no local folder here
    assert read_any_lock("me/name") == lock and asked == [("me/name", LOCK_NAME)]

    def offline(*a, **k):
        raise LocalEntryNotFoundError("offline")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", offline)
    with pytest.raises(InputError, match="me/name: not a local path, and the Hub cannot be reached"):
        read_any_lock("me/name")


def test_check_local_files_names_a_wrong_file(tmp_path: Path) -> None:
    from mathneuro_edit.publish.lock import check_local_files

    right, wrong = tmp_path / "a" / "math.jsonl", tmp_path / "b" / "math.jsonl"
    for p, answer in ((right, 2), (wrong, 3)):
        p.parent.mkdir()
        p.write_text(f'{{"question": "1+1?", "answer": "#### {answer}"}}\n')
    recipe = recipe_from_dict(quickstart_recipe().resolved_dict(), [f"data.math={{path: '{right}'}}"])
    lock = _lock(recipe)
    assert lock["files"] == {
        "data.math.path": {"name": "math.jsonl", "sha256": hashlib.sha256(right.read_bytes()).hexdigest()}
    }
    check_local_files(lock, recipe)  # the right file: silent, wherever it lives
    moved = recipe_from_dict(quickstart_recipe().resolved_dict(), [f"data.math={{path: '{wrong}'}}"])
    with pytest.raises(
        InputError,
        match=r"data\.math\.path=.*b/math\.jsonl: sha256 .*the lock expects .*"
        r"\(math\.jsonl\); this is not the file the run used",
    ):
        check_local_files(lock, moved)


def test_base_card_fields_eval_results_and_adapter_tags(tmp_path: Path) -> None:
    """license: other + license_name + license_link, language and datasets of the base card are carried; the
    evaluation is Hub metadata that ModelCard.load parses back; the adapter has PEFT's tags; re-rendering the card
    from its folder keeps all of it."""
    from mathneuro_edit.publish.base_card import base_card_fields
    from mathneuro_edit.publish.card import card_for_folder

    base = tmp_path / "base"
    base.mkdir()
    (base / "README.md").write_text(
        "---\nlicense: other\nlicense_name: my-license\nlicense_link: LICENSE.md\n"
        "language: en\ndatasets:\n- org/corpus\n---\n# base\n"
    )
    fields = base_card_fields(base)
    assert fields == {
        "license": "other",
        "license_name": "my-license",
        "license_link": "LICENSE.md",
        "language": ["en"],
        "datasets": ["org/corpus"],
    }
    recipe = quickstart_recipe(["base.model=org/base-model"])
    lock = _lock(recipe, edit_summary=summarize_edit(COUNTS, model_params=10_000))
    evaluation = {"math": {"edited": {"math_accuracy": 0.75}}, "general": {"edited": {"general_loss": 2.5}}}
    for kind in ("checkpoint", "adapter"):
        card = _card(recipe, lock, kind=kind, license=fields, eval_results=evaluation, base_model_id="org/base-model")
        (tmp_path / kind).mkdir()
        write_card(tmp_path / kind, card)
        parsed = ModelCard.load(tmp_path / kind / "README.md")
        meta = parsed.data.to_dict()
        assert {k: meta[k] for k in fields if k != "datasets"} == {k: v for k, v in fields.items() if k != "datasets"}
        assert "org/corpus" in meta["datasets"]
        results = {(r.dataset_type, r.metric_name): r.metric_value for r in parsed.data.eval_results}
        assert results == {
            ("mathneuro-edit-organism-math", "math accuracy"): 0.75,
            ("mathneuro-edit-organism-general", "general next-token loss"): 2.5,
        }
        tags = set(meta["tags"])
        assert ({"base_model:adapter:org/base-model", "shira", "peft"} <= tags) == (kind == "adapter")
        write_lock(tmp_path / kind, lock)
        if kind == "adapter":
            (tmp_path / kind / "adapter_config.json").write_text("{}")
        rerendered = card_for_folder(tmp_path / kind)  # no eval.json here: only the license fields must survive
        assert {
            k: rerendered.data.to_dict().get(k) for k in ("license", "license_name", "license_link", "language")
        } == {k: meta[k] for k in ("license", "license_name", "license_link", "language")}
    assert "PEFT only" in card.text and "use the edited checkpoint" in card.text


@pytest.mark.parametrize(
    ("model", "params", "edit", "want"),
    [
        (
            "HuggingFaceTB/SmolLM2-135M-Instruct",
            134_515_008,
            {"prune": True},
            "SmolLM2-135M-Instruct-MathNeuro-Prune-Q8_0.gguf",
        ),
        ("meta-llama/Llama-3.2-1B", 1_235_814_400, {"scale": 1.1}, "Llama-3.2-1B-MathNeuro-Scale1.1-Q8_0.gguf"),
        ("organism", 1_139_712, {"prune": True}, "Organism-1.1M-MathNeuro-Prune-Q8_0.gguf"),
        ("<local>", 8_030_261_248, {"scale": 1.05}, "Llama-8.0B-MathNeuro-Scale1.05-Q8_0.gguf"),
    ],
)
def test_gguf_repo_names_follow_llama_cpp(model: str, params: int, edit: dict, want: str) -> None:
    """<Base>-<Size>-<Variant>-<Type>.gguf, from the lock's public names only (never a local path)."""
    from mathneuro_edit.outputs.gguf import gguf_general, gguf_repo_name

    lock = {
        "base": {"model": model, "description": {"architecture": "LlamaForCausalLM"}},
        "recipe": {"edit": edit},
        "edit_summary": {"model_params": params},
    }
    assert gguf_repo_name(lock, "checkpoint/model-Q8_0.gguf") == want
    meta = gguf_general(lock, {"license": "other", "license_name": "x", "language": "en"})
    assert "-".join([meta["basename"], meta["size_label"], meta["finetune"], "Q8_0"]) + ".gguf" == want
    assert meta["license"] == "other" and meta["license_name"] == "x" and meta["languages"] == ["en"]
    assert ("base_models" in meta) == ("/" in model)


def _stub_lock(recipe, outputs=None, **kw):  # type: ignore[no-untyped-def]
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


def _stub_card(recipe, lock, kind="checkpoint", **kw):  # type: ignore[no-untyped-def]
    summary = summarize_edit({"m.layers.0.mlp.up_proj.weight": (1, 10)}, model_params=100)
    return _build(recipe, lock, kind, edit_summary=summary, **kw)


def test_only_gguf_files_of_the_checkpoint_folder_are_listed_and_only_in_its_card() -> None:
    recipe = quickstart_recipe()
    lock = _stub_lock(
        recipe,
        {
            "checkpoint/model.safetensors": "st",
            "checkpoint/m-Q8_0.gguf": "q8",
            "adapter/adapter_model.safetensors": "ad",
            "export/other.gguf": "x",
        },
    )
    text = _stub_card(recipe, lock).text
    assert "| `m-Q8_0.gguf` | `q8` |" in text
    assert "| `model.safetensors` | `st` |" not in text and "| `other.gguf` |" not in text
    assert "| `adapter_model.safetensors` |" not in text
    adapter = _stub_card(recipe, lock, kind="adapter").text
    assert "The edit as GGUF" not in adapter and "| `m-Q8_0.gguf` |" not in adapter


def _part(macro: str, *data: object) -> str:
    """One part of card_template.md (a macro) rendered alone from its data, as the card renders it."""
    template = jinja2.Environment(undefined=jinja2.ChainableUndefined).from_string(TEMPLATE.read_text())
    return getattr(template.module, macro)(*data)


def test_gguf_paragraph_and_note_exact_text() -> None:
    assert beside_checkpoint("me/x", {}) is None
    usage = _part("gguf_beside", beside_checkpoint("me/x", {"a.gguf": "h1", "b.gguf": "h2"}))
    assert "| `a.gguf` | `h1` |\n| `b.gguf` | `h2` |\n" in usage
    assert "hf download me/x-GGUF a.gguf --local-dir .\nllama-cli -m a.gguf\n```" in usage  # the GGUF's own repo
    assert "```bash\nllama-cli -m a.gguf\n```" in _part("gguf_beside", beside_checkpoint(None, {"a.gguf": "h1"}))
    lock = {"base": {"gguf": {"file": "base.gguf", "sha256": "b"}}}
    assert gguf_base({"base": {}}, CHECKPOINT) is None
    assert gguf_base(lock, CHECKPOINT, "float32") == {
        "file": "base.gguf",
        "sha256": "b",
        "what": "These weights are that dequantized model with the edit (computed in float32; safetensors, not "
        "quantized)",
    }
    assert gguf_base(lock, CHECKPOINT, "bfloat16")["what"] == (  # outputs.dtype: auto on a quantized GGUF
        "These weights are that dequantized model with the edit (computed in float32, then stored in bfloat16 "
        "(`outputs.dtype`; the evaluation below ran on these bfloat16 weights, in float32); safetensors, not "
        "quantized)"
    )
    assert gguf_base(lock, ADAPTER)["what"] == (
        "The adapter applies to that dequantized model (not to a quantized one, nor to the Hub model it was "
        "converted from)"
    )
    # the paragraph in the card, exactly, between the first paragraph and "What was edited"
    recipe = quickstart_recipe()
    card = _stub_card(recipe, _stub_lock(recipe, base_gguf={"file": "base.gguf", "sha256": "b"})).text
    assert (
        "\n\nThe base is the GGUF file `base.gguf` (sha256 `b`), dequantized to float32 by transformers. These "
        "weights are that dequantized model with the edit (computed in float32; safetensors, not quantized). "
        "`mathneuro-edit dequantize FILE.gguf` writes the dequantized base folder once and prints its path; its "
        "safetensors sha256 are the lock's `base.weights_sha256`.\n\n## What was edited\n"
    ) in card


def test_title_for_a_local_base_and_for_a_hub_repo() -> None:
    recipe = quickstart_recipe()
    lock = _stub_lock(recipe)
    lock["recipe"] = {**lock["recipe"], "base": {**lock["recipe"]["base"], "model": "<local>"}}
    assert "\n# local model (MathNeuro edit: pruned (set to 0))\n" in _stub_card(recipe, lock).text
    assert "\n# my-edit\n" in _stub_card(recipe, _stub_lock(recipe), repo_id="someone/my-edit").text
    assert "\n# organism (MathNeuro edit: pruned (set to 0))\n" in _stub_card(recipe, _stub_lock(recipe)).text


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
    text = _stub_card(recipe, _stub_lock(recipe)).text
    assert sentence in text and "MathNeuro scores every weight" not in text


def test_sections_without_evaluation_and_module_types() -> None:
    recipe = quickstart_recipe()
    text = _stub_card(recipe, _stub_lock(recipe)).text
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
    assert pct(1, 0, ".3g", "n/a") == "n/a" and pct(1, 8, ".3g", "n/a") == "12.5%"


def _readme(folder, meta: str):  # type: ignore[no-untyped-def]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "README.md").write_text(f"---\n{meta}\n---\n# a model\n", encoding="utf-8")


def test_license_from_a_local_folder_and_from_the_hub_cache(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from huggingface_hub import constants

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
    lock = _stub_lock(recipe, {"checkpoint/m-Q8_0.gguf": "q8"}, base_gguf={"file": "base.gguf", "sha256": "b"})
    summary = summarize_edit({"m.0.mlp.down_proj.weight": (1, 10), "m.0.mlp.up_proj.weight": (3, 10)}, model_params=100)
    card = build_card(
        CardSource(recipe=recipe, lock=lock, edit_summary=summary),
        "checkpoint",
        base_model_id=None,
        repo_id="someone/my-edit",
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
    adapter = build_card(CardSource(recipe=recipe, lock=lock, edit_summary=summary), "adapter", base_model_id=None).text
    assert "\nThis PEFT adapter holds a MathNeuro edit of " in adapter
    assert "The adapter applies to that dequantized model (not to a quantized one, nor to the Hub" in adapter
    boost = recipe_from_dict(quickstart_recipe().resolved_dict(), ["edit={scale: 1.1, prune: false}"])
    assert "| scale | 1.1 |\n" in _stub_card(boost, _stub_lock(boost)).text
    hub = build_card(
        CardSource(recipe=recipe, lock=_stub_lock(recipe), edit_summary=summary),
        "checkpoint",
        base_model_id="org/base-name",
    ).text
    assert "\n# base-name (MathNeuro edit: pruned (set to 0))\n" in hub


def test_a_base_without_description_has_no_description_key() -> None:
    recipe = recipe_from_dict(quickstart_recipe().resolved_dict(), ["base.model=org/not-cached-anywhere"])
    lock = _stub_lock(recipe)
    assert "description" not in lock["base"] and lock["base"]["model"] == "org/not-cached-anywhere"
