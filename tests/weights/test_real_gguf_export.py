"""The real-model tier (``-m real``) for GGUF export: SmolLM2-135M-Instruct (llama.cpp's own Q4_1 file) edited and
written back as GGUF, read back by two independent readers.

- ``run`` with ``outputs.gguf: base`` writes ``checkpoint/model-Q4_1.gguf``: the base's own type, tensor by tensor
  the base's tensor types, and the base's ``tokenizer.ggml.pre`` (``smollm``), which transformers' dequantized
  tokenizer does not keep; ``export --gguf Q8_0`` writes the same edit as Q8_0; ``verify`` audits the GGUF.
- transformers' GGUF loader gives back the edited checkpoint within the type's quantization step (exactly for the
  F32 norms), and the edit itself: on the masked entries, the change read back over the intended change.
- llama.cpp (``llama-cpp-python``, the ``gguf-test`` extra; skipped where it is not installed unless
  ``MATHNEURO_EDIT_REQUIRE_LLAMA_CPP=1``, which .ci/run sets when its cached wheel is there) loads both files,
  tokenizes the chat prompt like the checkpoint's tokenizer, and greedily continues it like transformers on the
  same GGUF's weights.
Budget: ~2 minutes on 2 cores after the dequantization (4 calibration texts of 32 tokens; two quantizations).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests._gguf_e2e import cli, write_recipe
from tests.weights.test_gguf import (
    _llama,  # llama.cpp's loader (skips without llama-cpp-python)
)

pytestmark = pytest.mark.real

PROMPTS = [
    "What is 12 + 7?",
    "Tom has 3 apples and buys 4 more. How many apples does he have?",
    "Write the number that comes after 99.",
]


@pytest.fixture(scope="module")
def edited(smollm2, tmp_path_factory) -> dict[str, Path]:  # noqa: F811
    """``{"Q4_1": gguf, "Q8_0": gguf, "checkpoint": folder, "run": run folder}`` of one x1.1 edit of SmolLM2."""
    root = tmp_path_factory.mktemp("real-gguf-export")
    # float32 checkpoint (not the bf16 default): the GGUF is compared with the checkpoint's exact dequantized values
    recipe = write_recipe(
        root, smollm2, samples=4, max_length=32, evaluate=False, gguf_out="base", adapter=False, dtype="float32"
    )
    code, text = cli("run", str(recipe), "--out", str(root / "run"), "-q")
    assert code == 0, text
    code, text = cli(
        "export",
        str(recipe),
        "--mask",
        str(root / "run" / "mask.safetensors"),
        "--out",
        str(root / "q8"),
        "--gguf",
        "Q8_0",
    )
    assert code == 0, text
    return {
        "Q4_1": root / "run" / "checkpoint" / "model-Q4_1.gguf",
        "Q8_0": root / "q8" / "model-Q8_0.gguf",
        "checkpoint": root / "run" / "checkpoint",
        "run": root / "run",
    }


def test_base_type_keeps_the_base_s_tensor_types_and_pre_tokenizer(edited, smollm2) -> None:  # noqa: F811
    import gguf
    import yaml

    from mathneuro_edit.weights.gguf_writer import gguf_file_type

    ours, theirs = gguf.GGUFReader(str(edited["Q4_1"])), gguf.GGUFReader(str(smollm2))
    assert gguf_file_type(edited["Q4_1"]) == gguf_file_type(smollm2) == "Q4_1"
    assert [(t.name, t.tensor_type.name) for t in ours.tensors] == [
        (t.name, t.tensor_type.name) for t in theirs.tensors
    ]  # token_embd Q8_0, norms F32, the rest Q4_1
    for key in ("tokenizer.ggml.pre", "tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.chat_template"):
        assert ours.fields[key].contents() == theirs.fields[key].contents(), key
    assert ours.fields["tokenizer.ggml.pre"].contents() == "smollm"
    assert gguf.GGUFReader(str(edited["Q8_0"])).fields["tokenizer.ggml.pre"].contents() == "smollm"
    lock = yaml.safe_load((edited["run"] / "mathneuro_recipe.lock.yaml").read_text())
    import hashlib

    assert lock["outputs"]["checkpoint/model-Q4_1.gguf"] == hashlib.sha256(edited["Q4_1"].read_bytes()).hexdigest()
    code, text = cli("verify", str(edited["run"]), "--base", str(smollm2))
    assert code == 0 and "also audited: model-Q4_1.gguf (272 tensors, against the checkpoint)" in text, text


def _transformers_weights(path: Path) -> dict[str, torch.Tensor]:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name).state_dict()


# one quantization step relative to the tensor's largest entry (a bound on each block's own step: see
# gguf_export._STEP); token_embd is Q8_0 in both files (llama.cpp's and our rule for 4/5-bit types)
STEP = {"Q8_0": 1 / 127, "Q4_1": 2 / 15}


@pytest.mark.parametrize("qtype", ["Q4_1", "Q8_0"])
def test_transformers_reads_back_the_edited_weights(edited, qtype) -> None:
    from safetensors.torch import load_file

    from mathneuro_edit.engine.mask import Mask

    ckpt = load_file(edited["checkpoint"] / "model.safetensors")
    read = _transformers_weights(edited[qtype])
    assert set(read) - {"lm_head.weight"} == set(ckpt)  # tied: transformers re-creates the head from token_embd
    for name, want in ckpt.items():
        got = read[name]
        if want.dim() == 1:
            assert torch.equal(got, want), name  # norms are F32 in the file
            continue
        step = STEP["Q8_0" if "embed_tokens" in name else qtype]
        err = float((got - want).abs().max())
        assert err <= step * float(want.abs().max()) * 1.01, (name, err)  # 1%: fp16 block scales
    # the edit itself, read back: on the masked entries of every matrix, (read - base) / (intended change), where
    # base = checkpoint / 1.1 (x1.1 on masked entries, everything else untouched)
    mask = Mask.load(edited["run"] / "mask.safetensors")
    ratios = []
    for name in mask:
        sel = mask[name]
        want = ckpt[name][sel]
        ratios.append((read[name][sel] - want / 1.1) / (want - want / 1.1))
    moved = torch.cat(ratios)
    lost = float((moved == 0).float().mean())  # entries rounded back to exactly the base's value
    # measured (2,213,156 edited entries, top_k 0.05 of 4 texts): Q8_0 median 1.000, IQR 0.978-1.021, none lost;
    # Q4_1 median 1.001, IQR 0.995-1.406, 20.0% lost (its step, up to 2/15 of a block's range, is often larger
    # than a 10% change; the base's values are on that grid already, so most edits land one step away)
    if qtype == "Q8_0":  # its step is ~1/127 of a block's max: far below a 10% change
        assert float(moved.median()) == pytest.approx(1.0, abs=0.02) and lost < 0.01, (float(moved.median()), lost)
    else:
        assert float(moved.median()) == pytest.approx(1.0, abs=0.1) and lost < 0.3, (float(moved.median()), lost)


@pytest.mark.parametrize("qtype", ["Q4_1", "Q8_0"])
def test_llama_cpp_loads_and_continues_like_transformers(edited, qtype) -> None:
    """llama.cpp tokenizes the chat prompt like the checkpoint's tokenizer and greedily continues it like
    transformers on the same GGUF (llama.cpp computes with the quantized blocks and quantized activations,
    transformers with the dequantized float32 weights)."""
    llm = _llama(edited[qtype], n_ctx=256)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(edited["checkpoint"])
    model = AutoModelForCausalLM.from_pretrained(edited[qtype].parent, gguf_file=edited[qtype].name).eval()
    n_new, agree = 8, []
    for q in PROMPTS:
        text = tok.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
        ids = tok(text, add_special_tokens=False).input_ids
        assert llm.tokenize(text.encode(), add_bos=False, special=True) == ids, q
        with torch.no_grad():
            hf = model.generate(torch.tensor([ids]), max_new_tokens=n_new, do_sample=False)[0, len(ids) :].tolist()
        cpp: list[int] = []
        for t in llm.generate(ids, temp=0.0, top_k=1, reset=True):
            cpp.append(int(t))
            if len(cpp) == len(hf):
                break
        same = next((i for i, (a, b) in enumerate(zip(hf, cpp)) if a != b), len(hf))
        agree.append(same)
    # measured: all 8 tokens agree on all 3 prompts, for Q4_1 and Q8_0; the bound leaves room for another CPU's
    # SIMD path flipping a near-tie late in a continuation
    assert min(agree) >= 4 and sum(agree) >= 20, agree
