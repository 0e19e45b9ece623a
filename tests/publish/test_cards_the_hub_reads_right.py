"""Each repo's card, as ``huggingface_hub.ModelCard`` reads it (issue 39 item 3), on a release of a tiny GGUF base:

- ``model-index`` holds this model's results only (the Hub reads every entry as the card's model's: the base's
  scores were listed as the edited model's); the GGUF repo's card lists none (its Q8_0 weights were not evaluated);
- each card describes the files its repo holds: the checkpoint's dtype, the GGUF repo's quantization type (never
  "safetensors, not quantized" beside a Q8_0 file);
- tags true per repo: ``gguf`` only on the GGUF repo, ``base_model:<relation>:<id>`` on every card with a
  ``base_model``; ``language`` from a GGUF base's own ``general.languages`` when its card gives none;
- the recipe as the settings that differ from the defaults, which validate back to the lock's recipe;
- an instruct model's snippet generates a chat reply (``apply_chat_template``), and runs as printed;
- the adapter of a GGUF base names the Hub model it stands for (``base.hub_id``) and loads, as its card prints,
  with transformers and PEFT only, equal to the checkpoint.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import torch
import yaml
from huggingface_hub import ModelCard

from mathneuro_edit.outputs.common import folder_dtype
from mathneuro_edit.publish.card import (
    CardSource,
    build_card,
    card_for_folder,
    summarize_edit,
    write_card,
)
from mathneuro_edit.publish.lock import build_lock
from mathneuro_edit.recipe.io import quickstart_recipe, recipe_from_dict
from tests._gguf_e2e import cli, write_recipe

pytest.importorskip("gguf")

HUB_ID = "org/tiny-base"
REPO = "me/tiny-edit"


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run over a tiny Q8_0/F32 GGUF base named by ``base.hub_id``, with a checkpoint, an adapter and a GGUF."""
    from tests._gguf_tiny import tiny_llama, write_gguf

    root = tmp_path_factory.mktemp("cards")
    gguf = root / "tiny.gguf"
    write_gguf(tiny_llama(), gguf)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MATHNEURO_EDIT_CACHE", str(root / "cache"))
        code, text = cli(
            "run", str(write_recipe(root, gguf, gguf_out="Q8_0", hub_id=HUB_ID)), "--out", str(root / "out")
        )
    assert code == 0, text
    return root


def _card(folder: Path, tmp_path: Path, **kw: object) -> ModelCard:
    """The card ``push`` would publish for ``folder``, as ``ModelCard.load`` reads it back from a file."""
    name = tmp_path / f"{kw.get('kind', 'folder')}-{len(list(tmp_path.iterdir()))}"
    name.mkdir()
    write_card(name, card_for_folder(folder, **kw))  # type: ignore[arg-type]
    return ModelCard.load(name / "README.md")


def _cards(release: Path, tmp_path: Path) -> dict[str, ModelCard]:
    out = release / "out"
    return {
        "checkpoint": _card(out / "checkpoint", tmp_path, repo_id=REPO),
        "adapter": _card(out / "adapter", tmp_path, repo_id=f"{REPO}-adapter"),
        "gguf": _card(out / "checkpoint", tmp_path, repo_id=f"{REPO}-GGUF", kind="gguf", base_repo=REPO),
    }


def _python(card_text: str) -> str:
    (code,) = [c for c in re.findall(r"```python\n(.*?)```", card_text, re.DOTALL) if "from_pretrained" in c]
    return code


def test_model_index_holds_this_model_s_results_only(release: Path, tmp_path: Path) -> None:
    cards = _cards(release, tmp_path)
    ev = json.loads((release / "out" / "eval.json").read_text())
    keys = {  # model-index name -> eval.json task and key
        "math accuracy": ("math", "math_accuracy"),
        "general next-token loss": ("general", "general_loss"),
        "general perplexity": ("general", "general_perplexity"),
        "KL(base || edited) per token": ("general", "general_kl"),
    }
    assert ev["general"]["base"]["general_loss"] != ev["general"]["edited"]["general_loss"]  # the two differ here
    for kind in ("checkpoint", "adapter"):
        results = [(r.metric_name, r.metric_value) for r in cards[kind].data.eval_results]
        assert sorted(name for name, _ in results) == sorted(keys), results  # each once: no base value beside it
        for name, value in results:  # each the edited model's own value
            task, key = keys[name]
            assert value == round(ev[task]["edited"][key], 6), (kind, name)
    assert not cards["gguf"].data.eval_results  # its quantized weights were not evaluated: no results as its own


def test_each_repo_s_card_describes_its_own_files_and_has_its_own_tags(release: Path, tmp_path: Path) -> None:
    cards = _cards(release, tmp_path)
    ckpt, adapter, gguf = (cards[k] for k in ("checkpoint", "adapter", "gguf"))
    assert "| files | safetensors, bfloat16 (not quantized) |" in ckpt.text
    assert "| files | GGUF: Q8_0 |" in gguf.text and "not quantized" not in gguf.text
    assert "quantized to Q8_0: close to the checkpoint's numbers, not equal to them" in gguf.text
    assert "the same weights as that checkpoint" not in gguf.text
    assert "| files | PEFT SHiRA adapter (safetensors)" in adapter.text
    # tags: what each repo holds, and the Hub's base_model tag beside base_model
    assert "gguf" not in ckpt.data.tags and "gguf" not in adapter.data.tags and "gguf" in gguf.data.tags
    assert ckpt.data.base_model == HUB_ID and f"base_model:finetune:{HUB_ID}" in ckpt.data.tags
    assert gguf.data.base_model == REPO and f"base_model:quantized:{REPO}" in gguf.data.tags
    # the adapter of a GGUF base names the Hub model it stands for; its body says which weights its deltas are to
    assert adapter.data.base_model == HUB_ID and f"base_model:adapter:{HUB_ID}" in adapter.data.tags
    assert "The adapter holds deltas to the weights of the GGUF file `tiny.gguf`" in adapter.text
    # a GGUF base's reproduce command and base section name its .gguf file, not a folder (docs/releasing.md passes
    # the .gguf to --base)
    for card in cards.values():
        assert '--base "$BASE_MODEL_GGUF"' in card.text and "BASE_MODEL_DIR" not in card.text
        assert "point `BASE_MODEL_GGUF` at it" in card.text
        assert "lock file below" not in card.text and "`mathneuro_recipe.lock.yaml` in the Hub repo" in card.text


def test_the_card_s_recipe_is_its_non_default_settings(release: Path, tmp_path: Path) -> None:
    card = _cards(release, tmp_path)["checkpoint"]
    lock = yaml.safe_load((release / "out" / "mathneuro_recipe.lock.yaml").read_text())
    (block,) = re.findall(r"```yaml\n(.*?)```", card.text, re.DOTALL)
    short = yaml.safe_load(block)
    assert recipe_from_dict(short).public_dict() == lock["recipe"]  # the same recipe, every default restored
    assert "null" not in block and len(block.splitlines()) < 40 and short["edit"] == {"scale": 1.1}


def test_an_instruct_model_s_snippets_generate_a_chat_reply_as_printed(
    release: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The checkpoint's snippet (this folder: ``"."``) and the adapter's over the GGUF file itself (transformers and
    PEFT only), executed as the card prints them; the adapter merged equals the checkpoint."""
    out = release / "out"
    local = card_for_folder(out / "checkpoint").text  # a card in its folder loads "."
    code = _python(local)
    assert "tokenizer.apply_chat_template(messages, add_generation_prompt=True" in code
    monkeypatch.chdir(out / "checkpoint")
    namespace: dict = {}
    exec(compile(code, "checkpoint card", "exec"), namespace)  # noqa: S102 - the card's own code is the test
    assert namespace["output"].shape[1] > namespace["inputs"]["input_ids"].shape[1]  # it generated
    checkpoint = namespace["model"]

    adapter_code = _python(card_for_folder(out / "adapter").text)
    assert "gguf_file=name" in adapter_code and "mathneuro" not in adapter_code  # no mathneuro-edit needed
    monkeypatch.chdir(out / "adapter")
    monkeypatch.setenv("BASE_MODEL_GGUF", str(release / "tiny.gguf"))
    namespace = {}
    exec(compile(adapter_code, "adapter card", "exec"), namespace)  # noqa: S102
    merged, stored = namespace["model"].state_dict(), checkpoint.state_dict()
    assert set(merged) == set(stored)
    files = getattr(
        torch, str(folder_dtype(out / "checkpoint"))
    )  # the snippet loads them in float32: compare as stored
    for name, tensor in stored.items():  # the edit as the checkpoint stores it (cast to its dtype)
        assert torch.equal(merged[name].to(files), tensor.to(files)), name
    assert os.environ["BASE_MODEL_GGUF"].endswith("tiny.gguf")


def test_the_card_s_figures_come_back_from_its_files_loaded_as_its_snippet_loads_them(
    release: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 46 item 4: the numbers are for the compute the user gets. The checkpoint stores bfloat16 weights (a
    default transformers 5 load computes in bfloat16) while its figures were computed in float32 over them; the
    card's snippet loads in float32, and its own lines, executed, give a model whose evaluation is the card's, to
    the bit. The default load gives other figures (why the snippet says the dtype)."""
    from transformers import AutoModelForCausalLM

    from mathneuro_edit.evaluation.runner import evaluate
    from mathneuro_edit.recipe.io import load_recipe
    from mathneuro_edit.runs.steps.evaluate import eval_tasks

    out = release / "out" / "checkpoint"
    card = card_for_folder(out)
    code = _python(card.text)
    load = "\n".join(
        line for line in code.splitlines() if line.startswith(("import", "from", "model =", "tokenizer ="))
    )
    assert 'from_pretrained(".", dtype=torch.float32)' in load  # float32 over the stored bfloat16 weights
    monkeypatch.chdir(out)
    namespace: dict = {}
    exec(compile(load, "checkpoint card", "exec"), namespace)  # noqa: S102 - the card's own lines are the test
    tasks = eval_tasks(load_recipe(release / "recipe.yaml"))
    got = evaluate(namespace["model"].eval(), namespace["tokenizer"], tasks, progress=False).to_dict()
    shown = json.loads((out / "eval.json").read_text())  # what the card's table and metadata are rendered from
    for task, key in (("math", "math_accuracy"), ("general", "general_loss"), ("general", "general_perplexity")):
        assert got[task]["base"][key] == shown[task]["edited"][key], (task, key)
    assert f"{shown['general']['edited']['general_loss']:.4g}" in card.text
    default = AutoModelForCausalLM.from_pretrained(".").eval()  # as a default load computes: bfloat16
    assert default.dtype == torch.bfloat16
    general = [t for t in tasks if t.name == "general"]
    other = evaluate(default, namespace["tokenizer"], general, progress=False).to_dict()
    assert other["general"]["base"]["general_loss"] != shown["general"]["edited"]["general_loss"]


def test_language_comes_from_a_gguf_base_s_own_metadata_on_every_card() -> None:
    """SmolLM2's Q4_1 says ``general.languages: [en]`` and its exported GGUF carries it: so do the cards, unless
    the base card gives a language of its own."""
    recipe = quickstart_recipe()
    gguf = {"file": "b.gguf", "sha256": "b", "general": {"languages": ["en"]}}
    lock = build_lock(
        recipe,
        base_revision=None,
        data_records={},
        stats_sha256="s",
        mask_sha256="k",
        output_files={"checkpoint/model-Q8_0.gguf": "q8"},
        versions={},
        base_gguf=gguf,
    )
    summary = summarize_edit({}, model_params=10)
    for kind in ("checkpoint", "adapter", "gguf"):
        card = build_card(CardSource(recipe=recipe, lock=lock, edit_summary=summary), kind, base_model_id=None)
        assert ModelCard(card.content).data.language == ["en"], kind
        own = build_card(
            CardSource(recipe=recipe, lock=lock, edit_summary=summary, license={"language": "fr"}),
            kind,
            base_model_id=None,
        )
        assert ModelCard(own.content).data.language == ["fr"], kind
