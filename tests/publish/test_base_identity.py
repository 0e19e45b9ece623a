"""Releases people can find, load and compare: ``base.hub_id`` on a local base, ``outputs.dtype``, the
published tokenizer config, and model-index entries the Hub reads, each checked the way a user meets it.

- A local copy of a Hub model with ``base.hub_id`` -> the card's ``base_model`` and title, the adapter's
  ``base_model_name_or_path``, and the GGUF's llama.cpp names; the adapter is pushed to the fake Hub and loaded
  with ``AutoPeftModelForCausalLM`` from its repo id alone (PEFT downloads the base the adapter names), equal to
  the checkpoint; ``ModelCard.load`` reads back base and edited values with their dataset.
- Without ``base.hub_id`` the card says where the base came from, and has no ``base_model``.
- ``outputs.dtype: bfloat16`` on a float32 base: the checkpoint's tensors and config.json are bfloat16, its
  tensors are the float32 edit cast (== the adapter merged over the base, then cast), and ``verify`` checks it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import yaml
from click.testing import CliRunner
from huggingface_hub import CommitOperationAdd, HfApi, ModelCard

from mathneuro_edit.cli.main import main
from mathneuro_edit.errors import InputError
from mathneuro_edit.organism import organism_path
from mathneuro_edit.recipe.io import quickstart_recipe
from tests._fakehub import TOKEN, FakeHub

SMALL = ["data.samples=4", "evaluation.samples=3", "evaluation.max_new_tokens=4"]
IDS = torch.tensor([[1, 40, 41, 42, 43, 44]])
BASE_CARD = "---\nlicense: apache-2.0\nlanguage:\n- en\n---\n# organism base\n"


def _cli(*args: object, env: dict | None = None) -> tuple[int, str]:
    result = CliRunner(env=env).invoke(main, [str(a) for a in args])
    return result.exit_code, result.output


def _local_copy(tmp_path: Path) -> Path:
    """The organism as a local folder (with a base card), as a user's download of a Hub model is."""
    folder = tmp_path / "models" / "my-copy"
    shutil.copytree(organism_path(), folder)
    (folder / "README.md").write_text(BASE_CARD)
    return folder


def _run(out: Path, *sets: str) -> None:
    code, text = _cli("run", "--out", out, "-q", *[a for s in (*SMALL, *sets) for a in ("--set", s)])
    assert code == 0, text


def test_hub_id_is_refused_where_model_already_names_the_base() -> None:
    with pytest.raises(InputError, match=r"base: hub_id names the Hub origin.*is a Hub id already: remove hub_id"):
        quickstart_recipe(["base.model=org/base", "base.hub_id=org/base"])
    with pytest.raises(InputError, match=r"is the shipped organism: remove hub_id"):
        quickstart_recipe(["base.hub_id=org/base"])
    with pytest.raises(InputError, match=r"hub_revision needs hub_id"):
        quickstart_recipe(["base.hub_revision=main"])
    with pytest.raises(InputError, match=r"base.hub_id: must be a Hub repo id"):
        quickstart_recipe(["base.model=./x.gguf", "base.hub_id=not a repo id"])
    assert quickstart_recipe(["base.model=./x.gguf", "base.hub_id=org/base"]).base.hub_id == "org/base"


@pytest.mark.slow
def test_a_local_copy_named_by_hub_id_is_found_and_loads_from_the_hub(
    fake_hub: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gguf
    from peft import AutoPeftModelForCausalLM
    from transformers import AutoModelForCausalLM

    from mathneuro_edit.outputs.gguf import gguf_repo_name

    api = HfApi(token=TOKEN)
    api.create_repo("org/base")  # the Hub model the local folder is a copy of
    api.create_commit(
        "org/base",
        [
            CommitOperationAdd(p.name, str(p))
            for p in sorted(organism_path().iterdir())
            if p.is_file() and p.name != "README.md"
        ]
        + [CommitOperationAdd("README.md", BASE_CARD.encode())],
        commit_message="base",
    )
    monkeypatch.chdir(tmp_path)
    folder = _local_copy(tmp_path)
    out = tmp_path / "run"
    _run(out, f"base.model={folder}", "base.hub_id=org/base", "base.hub_revision=main", "outputs.gguf=F32")

    # the card: base_model, relation, a true title, the Hub link; no local path
    card = ModelCard.load(out / "checkpoint" / "README.md")
    assert card.data.base_model == "org/base" and card.data.base_model_relation == "finetune"
    assert "\n# base (MathNeuro edit: pruned (set to 0))\n" in card.text
    assert "a local copy of [org/base](https://huggingface.co/org/base) (revision `main`)" in card.text
    assert str(tmp_path) not in card.text and "my-copy" not in card.text
    # model-index: this model's value per metric, on the named built-in source; never the base's (the Hub reads
    # every model-index result as this model's)
    results = {(r.dataset_type, r.metric_name): r.metric_value for r in card.data.eval_results}
    ev = json.loads((out / "eval.json").read_text())
    assert results[("mathneuro-edit-organism-math", "math accuracy")] == round(ev["math"]["edited"]["math_accuracy"], 6)
    assert not any("base model" in name or "(edited)" in name for _, name in results)

    # the adapter names the Hub model, so PEFT finds the base from the adapter's repo id alone
    cfg = json.loads((out / "adapter" / "adapter_config.json").read_text())
    assert (cfg["base_model_name_or_path"], cfg["revision"]) == ("org/base", "main")
    adapter_card = (out / "adapter" / "README.md").read_text()
    assert 'AutoModelForCausalLM.from_pretrained("org/base", revision="main")' in adapter_card
    code, text = _cli("push", out, "--adapter", "--repo-id", "me/edit-adapter", env={"HF_TOKEN": TOKEN})
    assert code == 0, text
    peft_model = AutoPeftModelForCausalLM.from_pretrained("me/edit-adapter").merge_and_unload()
    ckpt = AutoModelForCausalLM.from_pretrained(out / "checkpoint")
    with torch.no_grad():
        assert torch.equal(peft_model(IDS).logits, ckpt(IDS).logits)

    # the GGUF: llama.cpp's names from the Hub id (organization, languages of the base card)
    lock = yaml.safe_load((out / "mathneuro_recipe.lock.yaml").read_text())
    name = gguf_repo_name(lock, "model-F32.gguf")
    assert name.startswith("Base-") and name.endswith("-MathNeuro-Prune-F32.gguf"), name
    fields = gguf.GGUFReader(str(out / "checkpoint" / "model-F32.gguf")).fields
    assert fields["general.organization"].contents() == "org"
    assert fields["general.basename"].contents() == "Base"
    assert fields["general.languages"].contents() == ["en"]
    assert fields["general.base_model.0.repo_url"].contents() == "https://huggingface.co/org/base"


def test_without_hub_id_the_card_says_where_the_base_came_from(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    folder = _local_copy(tmp_path)
    out = tmp_path / "run"
    _run(out, f"base.model={folder}", "outputs.adapter=false", "evaluation=null")
    card = ModelCard.load(out / "checkpoint" / "README.md")
    assert card.data.base_model is None
    assert "a local model folder whose Hub origin is not recorded (the recipe has no `base.hub_id`)" in card.text


@pytest.mark.slow
def test_outputs_dtype_casts_after_the_edit_and_verify_checks_it(tmp_path: Path) -> None:
    from peft import PeftModel
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM

    out = tmp_path / "run"
    _run(out, "outputs.dtype=bfloat16", "evaluation=null")
    ckpt = out / "checkpoint"
    assert json.loads((ckpt / "config.json").read_text())["dtype"] == "bfloat16"
    with safe_open(ckpt / "model.safetensors", "pt") as f:
        assert {f.get_slice(k).get_dtype() for k in f.keys()} == {"BF16"}
        assert f.metadata()["mathneuro_edit_dtype"] == "BF16"
    base_bytes = (organism_path() / "model.safetensors").stat().st_size
    assert (ckpt / "model.safetensors").stat().st_size < 0.55 * base_bytes  # float32 base: half, plus the header
    baked = AutoModelForCausalLM.from_pretrained(ckpt)
    assert baked.dtype == torch.bfloat16
    # the adapter (over the float32 base), merged, then cast == the checkpoint, bit for bit
    merged = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(organism_path()), out / "adapter")
    merged = merged.merge_and_unload().to(torch.bfloat16).state_dict()
    sd = baked.state_dict()
    assert merged.keys() == sd.keys()
    assert all(torch.equal(merged[k].view(torch.int16), sd[k].view(torch.int16)) for k in sd)
    code, text = _cli("verify", out)
    assert code == 0 and "checkpoint" in text, text
    # verify recomputes the cast: one changed bf16 entry is found
    from safetensors.torch import load_file, save_file

    with safe_open(ckpt / "model.safetensors", "pt") as f:
        meta = f.metadata()
    tensors = load_file(ckpt / "model.safetensors")
    name = next(k for k in sorted(tensors) if "embed" in k)
    tensors[name] = tensors[name].clone()
    tensors[name].view(-1)[0] = tensors[name].view(-1)[0] + 1
    save_file(tensors, str(ckpt / "model.safetensors"), metadata=meta)
    code, text = _cli("verify", out)
    assert code == 1 and f"{name}: 1 of" in text and "cast to BF16" in text, text


def test_model_index_names_hub_datasets_and_the_hub_reads_it_back(tmp_path: Path) -> None:
    """GSM8K by its Hub id (config, split), a local WikiText subset by the Hub dataset it was taken from
    (``hub_dataset``); this model's value and the base's under plain metric names; KL once."""
    from mathneuro_edit.publish.card import CardSource, build_card, summarize_edit, write_card
    from mathneuro_edit.publish.lock import build_lock

    for name in ("calib.txt", "valid.txt"):
        (tmp_path / name).write_text("some general text\n\nmore of it\n")
    recipe = quickstart_recipe(
        [
            "evaluation.math={path: 'hf://datasets/openai/gsm8k', config: main, split: test}",
            f"evaluation.general=[{{path: '{tmp_path / 'valid.txt'}', hub_dataset: Salesforce/wikitext}}]",
            f"data.general=[{{path: '{tmp_path / 'calib.txt'}', hub_dataset: Salesforce/wikitext}}]",
        ]
    )
    lock = build_lock(
        recipe, base_revision=None, data_records={}, stats_sha256="a" * 64, mask_sha256="b" * 64, output_files={}
    )
    evaluation = {
        "math": {"base": {"math_accuracy": 0.3}, "edited": {"math_accuracy": 0.35}},
        "general": {"base": {"general_loss": 3.0}, "edited": {"general_loss": 3.01, "general_kl": 0.002}},
    }
    card = build_card(
        CardSource(
            recipe=recipe,
            lock=lock,
            edit_summary=summarize_edit({"m.q_proj.weight": (1, 4)}, model_params=10),
            eval_results=evaluation,
        ),
        "checkpoint",
        base_model_id=None,
    )
    write_card(tmp_path, card)
    data = ModelCard.load(tmp_path / "README.md").data
    got = {
        (r.dataset_type, r.dataset_config, r.dataset_split, r.metric_name, r.metric_value) for r in data.eval_results
    }
    assert got == {
        ("openai/gsm8k", "main", "test", "math accuracy", 0.35),
        ("Salesforce/wikitext", None, None, "general next-token loss", 3.01),
        ("Salesforce/wikitext", None, None, "KL(base || edited) per token", 0.002),
    }
    assert "Salesforce/wikitext" in data.datasets and str(tmp_path) not in card.text
    with pytest.raises(InputError, match=r"hub_dataset does not apply to a organism source"):
        quickstart_recipe(["data.math.hub_dataset=openai/gsm8k"])
