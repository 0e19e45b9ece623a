"""The real-model tier (``-m real``) for a release: SmolLM2-135M-Instruct from llama.cpp's Q4_1 GGUF, with
``base.hub_id: HuggingFaceTB/SmolLM2-135M-Instruct``, released as a user finds and loads it:

- the card names ``base_model`` (the Hub's model tree) and has a true title; ``ModelCard.load`` reads back the
  model-index with this model's values only on the named arithmetic source;
- the checkpoint is bfloat16 (``outputs.dtype: auto``: the Q4_1 file does not say its source's dtype), about the
  size of SmolLM2's bf16 release (134,515,008 parameters x 2 bytes), not the 538 MB of the float32 dequantized
  folder; its tokenizer_config.json carries nothing of the local cache;
- the GGUF keeps the source's names as llama.cpp's converter writes them for that Hub model
  (``SmolLM2-135M-Instruct-MathNeuro-Scale1.1-Q8_0.gguf``; basename, size label, organization, languages);
- the adapter's config names no base (its deltas are to the dequantized GGUF, not to the Hub weights); its card
  names the Hub model it stands for and loads it over the GGUF file with transformers and PEFT alone; ``verify``
  passes on every output.
Budget: about 2 minutes on 2 cores after the dequantization (4 calibration texts of 32 tokens, 3 problems).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from tests._gguf_e2e import cli, write_recipe

pytestmark = pytest.mark.real
HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"


@pytest.fixture(scope="module")
def release(smollm2, tmp_path_factory) -> Path:  # noqa: F811
    root = tmp_path_factory.mktemp("real-release")
    path = write_recipe(root, smollm2, samples=4, max_length=32, gguf_out="Q8_0", adapter=True, hub_id=HUB_ID)
    recipe = yaml.safe_load(path.read_text())
    recipe["evaluation"] = {
        "math": "arithmetic",
        "general": [{"path": str(root / "general.txt")}],
        "samples": 3,
        "max_new_tokens": 8,
    }
    path.write_text(yaml.safe_dump(recipe))
    code, text = cli("run", str(path), "--out", str(root / "run"), "-q")
    assert code == 0, text
    return root / "run"


def test_card_names_the_hub_base_and_the_hub_reads_the_results(release: Path) -> None:
    from huggingface_hub import ModelCard

    card = ModelCard.load(release / "checkpoint" / "README.md")
    assert card.data.base_model == HUB_ID and card.data.base_model_relation == "finetune"
    assert "\n# SmolLM2-135M-Instruct (MathNeuro edit: scaled by 1.1)\n" in card.text
    assert (
        f"the GGUF file `SmolLM2-135M-Instruct.Q4_1.gguf` of [{HUB_ID}](https://huggingface.co/{HUB_ID})" in card.text
    )
    ev = json.loads((release / "eval.json").read_text())
    got = {(r.dataset_type, r.metric_name): r.metric_value for r in card.data.eval_results}
    assert got[("mathneuro-edit-arithmetic", "math accuracy")] == round(ev["math"]["edited"]["math_accuracy"], 6)
    assert not any("base model" in name for _, name in got)  # this model's results only
    arithmetic = next(r for r in card.data.eval_results if r.dataset_type == "mathneuro-edit-arithmetic")
    assert arithmetic.source_url.endswith("mathneuro_edit/data/arithmetic.py")
    assert "stored in bfloat16" in card.text and "the evaluation below ran on these bfloat16 weights" in card.text
    assert "| files | safetensors, bfloat16 (not quantized) |" in card.text and card.data.language == ["en"]
    assert "lock_version" not in card.text and card.text.count("```yaml") == 1


def test_checkpoint_is_bf16_the_size_of_the_release_without_local_tokenizer_keys(release: Path) -> None:
    from safetensors import safe_open

    ckpt = release / "checkpoint"
    assert json.loads((ckpt / "config.json").read_text())["dtype"] == "bfloat16"
    with safe_open(ckpt / "model.safetensors", "pt") as f:
        assert {f.get_slice(k).get_dtype() for k in f.keys()} == {"BF16"}
    size = (ckpt / "model.safetensors").stat().st_size
    assert 134_515_008 * 2 <= size < 134_515_008 * 2 + 100_000, size  # the tensors + the header
    tok = json.loads((ckpt / "tokenizer_config.json").read_text())
    assert not {"is_local", "local_files_only"} & set(tok) and tok.get("model_max_length", 0) < 1e29, tok
    code, text = cli("verify", str(release), "--base", os.environ["MATHNEURO_EDIT_SMOLLM2_GGUF"])
    assert code == 0 and "also audited: model-Q8_0.gguf" in text, text


def test_gguf_is_named_like_llama_cpp_names_the_hub_model(release: Path) -> None:
    import gguf

    from mathneuro_edit.outputs.gguf import gguf_repo_name

    lock = yaml.safe_load((release / "mathneuro_recipe.lock.yaml").read_text())
    assert gguf_repo_name(lock, "model-Q8_0.gguf") == "SmolLM2-135M-Instruct-MathNeuro-Scale1.1-Q8_0.gguf"
    fields = gguf.GGUFReader(str(release / "checkpoint" / "model-Q8_0.gguf")).fields
    got = {
        k: fields[f"general.{k}"].contents()
        for k in ("basename", "size_label", "finetune", "organization", "languages", "license", "name")
    }
    assert got == {
        "basename": "SmolLM2",
        "size_label": "135M",
        "finetune": "Instruct-MathNeuro-Scale1.1",
        "organization": "HuggingFaceTB",
        "languages": ["en"],
        "license": "apache-2.0",
        "name": f"{HUB_ID} (MathNeuro edit)",
    }
    assert lock["base"]["gguf"]["general"]["organization"] == "HuggingFaceTB"  # what the source GGUF says


def test_the_adapter_config_names_no_base_and_its_card_loads_it_over_the_gguf_file(release: Path) -> None:
    cfg = json.loads((release / "adapter" / "adapter_config.json").read_text())
    assert cfg["base_model_name_or_path"] is None  # not the Hub id: its deltas are to the dequantized GGUF
    text = (release / "adapter" / "README.md").read_text()
    assert "The adapter holds deltas to the weights of the GGUF file `SmolLM2-135M-Instruct.Q4_1.gguf`" in text
    assert 'os.environ["BASE_MODEL_GGUF"]' in text and "gguf_file=name, dtype=torch.float32" in text
    assert "nor to the Hub model it was converted from" in text
    from huggingface_hub import ModelCard

    card = ModelCard.load(release / "adapter" / "README.md")  # the Hub model it stands for (issue 39 item 3)
    assert card.data.base_model == HUB_ID and f"base_model:adapter:{HUB_ID}" in card.data.tags
