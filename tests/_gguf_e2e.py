"""One end-to-end check of a GGUF base, shared by the tiny-GGUF tests and the real-model (``real``) tier.

:func:`run_gguf_pipeline` runs ``mathneuro-edit run`` on a recipe whose ``base.model`` is a ``.gguf`` file;
:func:`check_gguf_outputs` then checks what a user relies on, against independent references: the lock pins the
GGUF's sha256 and the dequantized folder's; the baked checkpoint (bfloat16 by default: ``outputs.dtype: auto`` on a quantized GGUF) loads with plain
transformers in a subprocess that cannot import mathneuro_edit and gives the same logits as the in-memory edited
model cast to that dtype (bit for bit); tied
embeddings are still tied; the chat template is in the exported tokenizer files; stock PEFT's ``merge_and_unload``
of the adapter, cast to the checkpoint's dtype, equals the checkpoint bit for bit; ``verify`` passes; the card says the base was a GGUF.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import torch
import yaml
from click.testing import CliRunner
from safetensors import safe_open
from safetensors.torch import load_file

from mathneuro_edit.cli.main import main
from tests._tiny import GENERAL, MATH

PROMPT = "Question: 12 + 7?\nAnswer:"


def cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def write_recipe(
    root: Path,
    gguf: Path,
    *,
    samples: int = 8,
    max_length: int = 48,
    evaluate: bool = True,
    gguf_out: str | None = None,
    adapter: bool = True,
    dtype: str = "auto",
    hub_id: str | None = None,
) -> Path:
    """Data files (the tiny test texts) and a recipe over ``gguf`` (``gguf_out``: its ``outputs.gguf``); returns
    the recipe's path; ``dtype`` is its ``outputs.dtype``, ``hub_id`` its ``base.hub_id``."""
    with open(root / "math.jsonl", "w") as f:
        for i, text in enumerate(MATH):
            f.write(json.dumps({"question": f"Question {i}: {text}", "answer": f"{text}\n#### {i}"}) + "\n")
    (root / "general.txt").write_text("\n\n".join(GENERAL) + "\n")
    recipe = {
        "base": {"model": str(gguf), "dtype": "float32", "device": "cpu", "hub_id": hub_id},
        "data": {
            "math": {"path": str(root / "math.jsonl")},
            "general": [{"path": str(root / "general.txt")}],
            "samples": samples,
            "seed": 0,
        },
        "calibration": {"max_length": max_length, "batch_size": 4},
        "mask": {"method": "mathneuro", "top_k": 0.05},
        "edit": {"scale": 1.1},
        "outputs": {"checkpoint": True, "adapter": adapter, "gguf": gguf_out, "dtype": dtype},
    }
    if evaluate:
        recipe["evaluation"] = {
            "math": {"path": str(root / "math.jsonl")},
            "general": [{"path": str(root / "general.txt")}],
            "samples": 2,
            "max_new_tokens": 4,
        }
    path = root / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return path


def data_overrides(root: Path, evaluate: bool = True) -> list[str]:
    """``--set`` arguments giving the redacted data paths back to ``reproduce``."""
    keys = ["data.math.path=math.jsonl", "data.general.0.path=general.txt"]
    if evaluate:
        keys += ["evaluation.math.path=math.jsonl", "evaluation.general.0.path=general.txt"]
    out = []
    for k in keys:
        key, name = k.split("=")
        out += ["--set", f"{key}={root / name}"]
    return out


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


_PLAIN = """
import sys, torch
torch.set_num_threads(1)
assert 'mathneuro_edit' not in sys.modules
from transformers import AutoModelForCausalLM, AutoTokenizer
from safetensors.torch import save_file
folder, prompt, out = sys.argv[1:4]
tok = AutoTokenizer.from_pretrained(folder)
model = AutoModelForCausalLM.from_pretrained(folder).eval()
ids = tok(prompt, return_tensors='pt').input_ids
with torch.no_grad():
    logits = model(ids).logits
tied = model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
chat = tok.apply_chat_template([{'role': 'user', 'content': 'hi'}], tokenize=False, add_generation_prompt=True)
save_file({'logits': logits.contiguous(), 'ids': ids}, out)
assert 'mathneuro_edit' not in sys.modules  # nothing of ours was needed
print(repr((tied, chat, str(model.dtype))))
"""


def plain_transformers(folder: Path, scratch: Path) -> tuple[dict, tuple]:
    """Load ``folder`` with plain transformers in a fresh interpreter whose path holds no mathneuro_edit copy."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = scratch / "plain_logits.safetensors"
    # -I: isolated mode (no cwd, no user site, no PYTHON* variables): mathneuro_edit only if installed in the venv
    proc = subprocess.run(
        [sys.executable, "-I", "-c", _PLAIN, str(folder), PROMPT, str(out)],
        capture_output=True,
        text=True,
        env=env,
        cwd=scratch,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    import ast

    return load_file(out), ast.literal_eval(lines[-1])


def check_gguf_outputs(
    out: Path, gguf: Path, scratch: Path, *, chat_template: str | None, dtype_of_checkpoint: str = "bfloat16"
) -> None:
    """Every check of the module docstring on a finished ``run`` folder."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from mathneuro_edit.engine.apply import apply_mask
    from mathneuro_edit.engine.mask import Mask
    from mathneuro_edit.weights.gguf_reader import dequantize_gguf
    from mathneuro_edit.weights.loading import load_model

    folder = dequantize_gguf(gguf)  # cached: the folder the run used
    lock = yaml.safe_load((out / "mathneuro_recipe.lock.yaml").read_text())
    assert lock["recipe"]["base"]["model"] == "<local>"
    assert {k: lock["base"]["gguf"][k] for k in ("file", "sha256")} == {"file": gguf.name, "sha256": sha256(gguf)}
    assert set(lock["base"]["gguf"]) <= {"file", "sha256", "general"}  # general: what the GGUF names itself
    assert lock["base"]["weights_sha256"] == {"model.safetensors": sha256(folder / "model.safetensors")}
    assert str(gguf.parent) not in (out / "checkpoint" / "README.md").read_text()

    # tied embeddings: stored once, tied in the config, tied when loaded
    ckpt = out / "checkpoint"
    with safe_open(ckpt / "model.safetensors", "pt") as f:
        names = set(f.keys())
    assert "lm_head.weight" not in names and "model.embed_tokens.weight" in names
    assert json.loads((ckpt / "config.json").read_text())["tie_word_embeddings"] is True
    assert "quantization_config" not in json.loads((ckpt / "config.json").read_text())
    # the chat template survived (transformers writes it as chat_template.jinja)
    if chat_template is not None:
        assert (ckpt / "chat_template.jinja").read_text() == chat_template
        assert (out / "adapter").is_dir() and (folder / "chat_template.jinja").read_text() == chat_template

    # the in-memory edited model (loaded from the GGUF path, edited by apply_mask in float32, then cast to the
    # checkpoint's dtype: outputs.dtype auto on a quantized GGUF is bfloat16) == plain transformers' load
    mask = Mask.load(out / "mask.safetensors")
    scale = 1.1
    model, tok = load_model(str(gguf), dtype="float32", device="cpu")
    apply_mask(model, mask, scale)
    stored = json.loads((ckpt / "config.json").read_text())["dtype"]
    assert stored == dtype_of_checkpoint and json.loads((folder / "config.json").read_text())["dtype"] == "float32"
    model = model.to(getattr(torch, stored))
    plain, (tied, chat, dtype) = plain_transformers(ckpt, scratch)
    assert tied and dtype == f"torch.{stored}"
    assert (
        (ckpt / "model.safetensors").stat().st_size < 0.6 * (folder / "model.safetensors").stat().st_size
        if stored != "float32"
        else True
    )  # half the dequantized float32 folder, plus the header
    if chat_template is not None:
        assert "<|im_start|>user\nhi<|im_end|>\n" in chat and chat.endswith("<|im_start|>assistant\n"), chat
    with torch.no_grad():
        logits = model(plain["ids"]).logits
    if stored == "float32":
        assert torch.equal(logits, plain["logits"])
    else:  # the weights are compared bit for bit below; here the whole forward agrees within 16-bit rounding
        # (model.to() also casts the rotary buffer, which a 16-bit from_pretrained keeps in float32)
        diff = (logits.float() - plain["logits"].float()).abs().max().item()
        assert diff <= 0.05 * plain["logits"].float().abs().max().item(), diff
    baked = AutoModelForCausalLM.from_pretrained(ckpt).state_dict()
    edited = model.state_dict()
    assert baked.keys() == edited.keys() and all(torch.equal(baked[k], edited[k]) for k in baked)
    del model

    # stock PEFT over the dequantized base folder: merge_and_unload, cast to the checkpoint's dtype == the baked
    # checkpoint, bit for bit (the edit is made in float32 and cast, by the export as here)
    merged = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(folder), out / "adapter").merge_and_unload()
    merged_sd = merged.to(getattr(torch, stored)).state_dict()
    assert merged_sd.keys() == baked.keys()
    bad = [
        k
        for k in baked
        if not torch.equal(
            merged_sd[k].view(torch.int16 if merged_sd[k].element_size() == 2 else torch.int32),
            baked[k].view(torch.int16 if baked[k].element_size() == 2 else torch.int32),
        )
    ]
    assert not bad, bad[:3]

    # verify with the GGUF file as the base (the lock redacts the local path)
    code, text = cli("verify", str(out), "--base", str(gguf))
    assert code == 0, text
    from huggingface_hub import ModelCard

    assert ModelCard.load(ckpt / "README.md").data.license == "apache-2.0"  # the GGUF's general.license
    card = (ckpt / "README.md").read_text()
    assert f"GGUF file `{gguf.name}`" in card and "dequantized to float32" in card
    assert "applies to that dequantized model" in (out / "adapter" / "README.md").read_text()
