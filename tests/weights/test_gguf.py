"""GGUF export (outputs.gguf): two independent readers get the edited model back.

- transformers' GGUF loader (its own un-permutation, dequantization and tokenizer conversion) must give back the
  baked checkpoint's weights exactly for F32 (and BF16 of a bf16 checkpoint), and for quantized types exactly
  ``dequantize(quantize(edited weight))`` computed here with gguf.quants on the Hugging Face tensor;
- llama.cpp itself (llama-cpp-python, optional extra ``gguf-test``; skipped when not importable) must load the
  file and give transformers' greedy continuation and, within a tolerance, its logits.

Models: tiny random Llama (untied and tied), Mistral, Qwen2 and Qwen3 built from configs, with the shipped
organism's byte-level BPE tokenizer (SmolLM2's pre-tokenizer), exported through ``export_checkpoint`` then ``export_gguf``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

gguf = pytest.importorskip("gguf")

from mathneuro_edit import InputError  # noqa: E402
from mathneuro_edit.organism import organism_path  # noqa: E402
from mathneuro_edit.recipe.edit_sections import OutputsConfig  # noqa: E402
from mathneuro_edit.weights.audit import verify  # noqa: E402
from mathneuro_edit.weights.checkpoint_writer import export_checkpoint  # noqa: E402
from mathneuro_edit.weights.gguf_tensors import GGUF_TYPES  # noqa: E402
from mathneuro_edit.weights.gguf_writer import (  # noqa: E402
    audit_gguf,
    check_gguf,
    export_gguf,
    gguf_file_type,
    gguf_public_name,
    write_gguf,
)
from tests._llama_cpp import logit_gap  # noqa: E402
from tests._models import CHAT_TEMPLATE, load_tiny, save_tiny, tiny_mask  # noqa: E402

SCALE = 1.1
ROOT = Path(__file__).resolve().parents[2]
Q = gguf.GGMLQuantizationType


def _export_with_gguf(base, mask, out, qtype):
    """The checkpoint, then its GGUF from the finished folder (what a run's export step does)."""
    ckpt = export_checkpoint(base, mask, SCALE, out)
    export_gguf(ckpt, qtype, name=gguf_public_name(base))
    return ckpt


def _config(family: str, tied: bool):
    import transformers as tf

    common = dict(
        vocab_size=703,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=96,
        max_position_embeddings=256,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=tied,
        rms_norm_eps=1e-5,
    )
    if family == "llama":
        return tf.LlamaConfig(rope_theta=50000.0, **common)
    if family == "llama3":  # Llama 3.1+ rope scaling: llama.cpp's rope_freqs tensor
        return tf.LlamaConfig(
            rope_parameters={
                "rope_type": "llama3",
                "rope_theta": 500000.0,
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64,
            },
            **common,
        )
    if family == "mistral":
        return tf.MistralConfig(sliding_window=None, **common)
    if family == "qwen2":
        return tf.Qwen2Config(**common)
    if family == "qwen3":
        # head_dim != hidden/heads (the key_length keys); 128 as in real Qwen3: transformers' GGUF reader ignores
        # qwen3.attention.key_length and uses Qwen3Config's default 128
        return tf.Qwen3Config(head_dim=128, **common)
    raise ValueError(family)


def save_base(folder: Path, family: str, *, tied: bool = False, dtype: torch.dtype = torch.float32) -> Path:
    """A tiny random model of ``family`` with the organism's byte-level BPE tokenizer and a chat template."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(_config(family, tied)).to(dtype).eval()
    with torch.no_grad():  # random norms too, so a mixed-up norm tensor would show
        for p in model.parameters():
            if p.ndim == 1:
                p.copy_(1 + 0.1 * torch.randn_like(p))
    model.save_pretrained(folder)
    tok = AutoTokenizer.from_pretrained(organism_path())
    tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def baked(tmp_path_factory):
    """family -> (baked checkpoint folder with model-F32.gguf, its edited state dict)."""
    root = tmp_path_factory.mktemp("gguf")
    out = {}
    for family, tied in (
        ("llama", False),
        ("llama-tied", True),
        ("llama3", True),
        ("mistral", False),
        ("qwen2", True),
        ("qwen3", False),
    ):
        base = save_base(root / f"{family}-base", family.split("-")[0], tied=tied)
        mask = tiny_mask(load_tiny(base), top_k=0.2)
        ckpt = _export_with_gguf(base, mask, root / family, "F32")
        out[family] = (ckpt, {k: v.clone() for k, v in load_tiny(ckpt).state_dict().items()})
    return out


def _from_gguf(folder: Path, name: str):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder, gguf_file=name).eval()


@pytest.mark.parametrize("family", ["llama", "llama-tied", "llama3", "mistral", "qwen2", "qwen3"])
def test_transformers_reads_back_the_edited_weights_exactly(baked, family) -> None:
    ckpt, state = baked[family]
    got = _from_gguf(ckpt, "model-F32.gguf").state_dict()
    assert set(got) == set(state)  # (transformers skips llama3's rope_freqs: it recomputes rotary from config)
    for k, v in state.items():
        assert torch.equal(got[k], v), k  # F32: bit for bit, after transformers' own un-permutation of q/k
    names = {t.name for t in gguf.GGUFReader(str(ckpt / "model-F32.gguf")).tensors}
    assert ("output.weight" in names) == (family in ("llama", "mistral", "qwen3"))  # tied: no output.weight


@pytest.mark.parametrize("qtype", ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "F16"])
def test_quantized_types_are_the_quantization_of_the_edited_weights(baked, tmp_path, qtype) -> None:
    ckpt, state = baked["llama"]
    write_gguf(ckpt, tmp_path / "m.gguf", qtype)
    shutil.copy(ckpt / "config.json", tmp_path)
    got = _from_gguf(tmp_path, "m.gguf").state_dict()
    for k, v in state.items():
        if v.ndim == 1:
            want = v  # norms stay F32
        elif qtype == "F16":
            want = v.half().float()
        else:  # rows are quantized independently, so quantizing HF's row order = un-permuting llama.cpp's
            t = Q.Q8_0 if qtype in ("Q4_0", "Q4_1", "Q5_0", "Q5_1") and ("embed" in k or "lm_head" in k) else Q[qtype]
            want = torch.from_numpy(gguf.quants.dequantize(gguf.quants.quantize(v.numpy(), t), t))
        assert torch.equal(got[k], want), k
        assert (got[k] - v).abs().max() <= v.abs().max() / 6, k  # and it is close to the edit (not a mix-up)
    assert gguf_file_type(tmp_path / "m.gguf") == qtype


def test_bf16_checkpoint_round_trips_exactly(tmp_path) -> None:
    base = save_base(tmp_path / "base", "llama", dtype=torch.bfloat16)
    mask = tiny_mask(load_tiny(base).float(), top_k=0.2)
    ckpt = _export_with_gguf(base, mask, tmp_path / "out", "BF16")
    state = load_tiny(ckpt).state_dict()
    got = _from_gguf(ckpt, "model-BF16.gguf").state_dict()  # transformers reads BF16 GGUF (dequantized to f32)
    for k, v in state.items():
        assert torch.equal(got[k].to(torch.bfloat16), v) and torch.equal(got[k], v.float()), k


def test_metadata_follows_llama_cpp(baked) -> None:
    ckpt, _ = baked["llama"]
    r = gguf.GGUFReader(str(ckpt / "model-F32.gguf"))
    f = {k: v.contents() for k, v in r.fields.items() if not k.startswith("GGUF.")}
    cfg = json.loads((ckpt / "config.json").read_text())
    tok = json.loads((ckpt / "tokenizer.json").read_text())
    assert f["general.architecture"] == "llama" and f["general.file_type"] == 0
    assert "/" not in f["general.name"]  # never a local path
    assert (
        f["llama.context_length"],
        f["llama.embedding_length"],
        f["llama.block_count"],
        f["llama.feed_forward_length"],
        f["llama.attention.head_count"],
        f["llama.attention.head_count_kv"],
        f["llama.vocab_size"],
        f["llama.rope.dimension_count"],
    ) == (256, 64, 2, 96, 4, 2, 703, 16)
    assert f["llama.rope.freq_base"] == 50000.0 and f["llama.attention.layer_norm_rms_epsilon"] == np.float32(1e-5)
    assert f["tokenizer.ggml.model"] == "gpt2" and f["tokenizer.ggml.pre"] == "smollm"
    vocab = {i: t for t, i in tok["model"]["vocab"].items()} | {a["id"]: a["content"] for a in tok["added_tokens"]}
    assert f["tokenizer.ggml.tokens"] == [vocab[i] for i in range(cfg["vocab_size"])]
    assert len(f["tokenizer.ggml.merges"]) == len(tok["model"]["merges"])
    special = {a["id"] for a in tok["added_tokens"] if a["special"]}
    assert [i for i, t in enumerate(f["tokenizer.ggml.token_type"]) if t == gguf.TokenType.CONTROL] == sorted(special)
    assert (f["tokenizer.ggml.bos_token_id"], f["tokenizer.ggml.eos_token_id"]) == (1, 2)
    assert f["tokenizer.ggml.add_bos_token"] == True  # noqa: E712  (the organism's tokenizer.json adds <s>)
    assert f["tokenizer.chat_template"] == CHAT_TEMPLATE
    # transformers' GGUF tokenizer (built from these keys alone) tokenizes like the original tokenizer
    from transformers import AutoTokenizer

    mine, orig = AutoTokenizer.from_pretrained(ckpt, gguf_file="model-F32.gguf"), AutoTokenizer.from_pretrained(ckpt)
    for text in ["Question: 12 * 34 = 408?\n#### 408", "The quiet river wound through the valley."]:
        assert mine(text).input_ids == orig(text).input_ids


def test_llama3_rope_freqs_are_transformers_frequencies(baked) -> None:
    from transformers import AutoConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    ckpt = baked["llama3"][0]
    r = gguf.GGUFReader(str(ckpt / "model-F32.gguf"))
    factors = next(t for t in r.tensors if t.name == "rope_freqs.weight")
    assert factors.tensor_type == Q.F32
    cfg = AutoConfig.from_pretrained(ckpt)
    scaled = ROPE_INIT_FUNCTIONS["llama3"](cfg, "cpu")[0]
    plain = 1.0 / 500000.0 ** (torch.arange(0, 16, 2, dtype=torch.float64) / 16)
    # llama.cpp divides each rotary frequency by its factor: plain / factor must be transformers' llama3 frequency
    assert torch.allclose(
        plain / torch.from_numpy(np.array(factors.data, dtype=np.float64)), scaled.double(), rtol=1e-6
    )
    assert not torch.allclose(scaled.double(), plain)  # the scaling does something at these sizes


def test_qwen3_and_qwen2_keys(baked) -> None:
    f = {k: v.contents() for k, v in gguf.GGUFReader(str(baked["qwen3"][0] / "model-F32.gguf")).fields.items()}
    assert f["general.architecture"] == "qwen3" and f["qwen3.attention.key_length"] == 128
    names = {t.name for t in gguf.GGUFReader(str(baked["qwen2"][0] / "model-F32.gguf")).tensors}
    assert {"blk.0.attn_q.bias", "blk.0.attn_k.bias", "blk.0.attn_v.bias"} <= names


def test_same_recipe_same_bytes_anywhere(baked, tmp_path) -> None:
    ckpt, _ = baked["llama"]
    moved = shutil.copytree(ckpt, tmp_path / "elsewhere" / "other-name")
    a, b = write_gguf(ckpt, tmp_path / "a.gguf", "Q4_1"), write_gguf(moved, tmp_path / "b.gguf", "Q4_1")
    assert a.read_bytes() == b.read_bytes()
    code = (
        "import sys; from mathneuro_edit.weights.gguf_writer import write_gguf; "
        "write_gguf(sys.argv[1], sys.argv[2], 'Q4_1')"
    )
    subprocess.run(
        [sys.executable, "-c", code, str(moved), str(tmp_path / "c.gguf")],
        check=True,
        cwd=ROOT,
        env={"PYTHONHASHSEED": "123", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
    )
    assert (tmp_path / "c.gguf").read_bytes() == a.read_bytes()


def test_verify_audits_the_gguf(baked, tmp_path) -> None:
    ckpt, _ = baked["llama"]
    copy = shutil.copytree(ckpt, tmp_path / "ckpt")
    write_gguf(copy, copy / "model-Q4_1.gguf", "Q4_1")
    assert audit_gguf(copy / "model-Q4_1.gguf", copy) == (
        len(gguf.GGUFReader(str(copy / "model-Q4_1.gguf")).tensors),
        [],
    )
    path = copy / "model-F32.gguf"
    r = gguf.GGUFReader(str(path))
    t = next(t for t in r.tensors if t.name == "blk.1.attn_k.weight")
    data = bytearray(path.read_bytes())
    data[int(t.data_offset) + 4 * 3] ^= 0x01  # one bit of one entry
    path.write_bytes(bytes(data))
    checked, bad = audit_gguf(path, copy)
    assert bad == ["blk.1.attn_k.weight: not the F32 encoding of the checkpoint's tensor"]


def test_gguf_audit_reads_the_file_a_row_block_at_a_time(baked, tmp_path, monkeypatch) -> None:
    """With one-row blocks (the audit reads each block from the file, not through a map of the whole file) the
    audit still passes a good file and finds one flipped bit in a later row of a quantized tensor."""
    from mathneuro_edit.weights import gguf_tensors

    ckpt, _ = baked["llama"]
    copy = shutil.copytree(ckpt, tmp_path / "ckpt")
    path = copy / "model-Q8_0.gguf"
    write_gguf(copy, path, "Q8_0")
    monkeypatch.setattr(gguf_tensors, "_CHUNK", 1)  # one row per block
    assert audit_gguf(path, copy) == (len(gguf.GGUFReader(str(path)).tensors), [])
    t = next(t for t in gguf.GGUFReader(str(path)).tensors if t.name == "blk.1.attn_k.weight")
    rows = int(np.prod([int(d) for d in t.shape][1:]))
    data = bytearray(path.read_bytes())
    data[int(t.data_offset) + (rows - 1) * (t.n_bytes // rows) + 5] ^= 0x01  # a quant of the last row
    path.write_bytes(bytes(data))
    assert audit_gguf(path, copy)[1] == ["blk.1.attn_k.weight: not the Q8_0 encoding of the checkpoint's tensor"]


def test_verify_covers_the_gguf(tmp_path) -> None:
    base = save_base(tmp_path / "base", "llama")
    mask = tiny_mask(load_tiny(base), top_k=0.2)
    out = _export_with_gguf(base, mask, tmp_path / "out", "Q8_0")
    report = verify(out, base, mask, SCALE)
    assert report.ok and any("model-Q8_0.gguf" in n for n in report.audited)
    (out / "model-Q8_0.gguf").write_bytes((out / "model-Q8_0.gguf").read_bytes()[:-64] + bytes(64))
    assert not verify(out, base, mask, SCALE).ok


def test_refusals_are_one_clear_line(tmp_path) -> None:
    from tests._families import save_family_base
    from tests._family_shapes import family_shape

    jetmoe = save_family_base(tmp_path / "jetmoe", family_shape("JetMoE"))  # llama.cpp has no such architecture
    with pytest.raises(
        InputError,
        match=r"^outputs\.gguf: model_type 'jetmoe' has no GGUF: llama\.cpp has no JetMoE "
        r"architecture .*; set outputs\.gguf: null \(the checkpoint holds the edit\)$",
    ):
        check_gguf(jetmoe, "F16")
    chars = save_tiny(tmp_path / "llama-chars", "llama")  # a character BPE: llama.cpp would mis-tokenize it
    with pytest.raises(InputError, match="only byte-level BPE tokenizers"):
        check_gguf(chars, "F16")
    with pytest.raises(InputError, match="Q6_K"):  # llama.cpp's quantizer makes it, never the gguf package
        write_gguf(chars, tmp_path / "x.gguf", "Q6_K")
    with pytest.raises(ValueError, match="gguf is written from the checkpoint"):
        OutputsConfig(checkpoint=False, adapter=True, gguf="F16")
    # the recipe accepts exactly the types write_gguf writes, llama.cpp's quantizer's, and "base" (a GGUF base's
    # own type, resolved first)
    from typing import get_args

    from mathneuro_edit.recipe.edit_sections import GgufType
    from mathneuro_edit.weights.gguf_quantize import LLAMA_CPP_TYPES

    accepted = {v for part in get_args(GgufType) for v in get_args(part)}
    assert accepted == {*GGUF_TYPES, *LLAMA_CPP_TYPES, "base"}


def test_cli_export_gguf(tmp_path) -> None:
    from click.testing import CliRunner

    from mathneuro_edit.cli.main import main
    from mathneuro_edit.engine.mask import Mask

    base = save_base(tmp_path / "base", "llama", tied=True)
    tiny_mask(load_tiny(base), top_k=0.2).save(tmp_path / "m.mask.safetensors")
    args = [
        "export",
        "--mask",
        str(tmp_path / "m.mask.safetensors"),
        "--set",
        f"base.model={base}",
        "--set",
        "edit.scale=1.1",
    ]  # the quickstart prunes: a boost here
    res = CliRunner().invoke(main, [*args, "--out", str(tmp_path / "out"), "--gguf", "Q8_0"])
    assert res.exit_code == 0, res.output
    assert gguf_file_type(tmp_path / "out" / "model-Q8_0.gguf") == "Q8_0"
    assert verify(tmp_path / "out", base, Mask.load(tmp_path / "m.mask.safetensors"), 1.1).ok
    res = CliRunner().invoke(main, [*args, "--out", str(tmp_path / "bad"), "--gguf", "Q7_K"])  # no such type
    assert res.exit_code == 2 and "outputs.gguf" in res.output and len(res.output.strip().splitlines()) == 1
    assert not (tmp_path / "bad").exists()


@pytest.mark.real
def test_gguf_file_type_of_a_llama_cpp_file(smollm2) -> None:  # noqa: F811
    assert gguf_file_type(smollm2) == "Q4_1"  # 210 Q4_1 matrices, token_embd Q8_0, norms F32


# ---------------------------------------------------------------------------------------------- llama.cpp


def _llama(path: Path, n_ctx: int = 128):
    """llama.cpp's own loader on ``path``. Skips without llama-cpp-python (the ``gguf-test`` extra), except where
    ``MATHNEURO_EDIT_REQUIRE_LLAMA_CPP=1`` (.ci/run sets it when it installed the package): a failure then."""
    from tests._llama_cpp import llama_cpp_or_skip

    llama_cpp = llama_cpp_or_skip()
    # type_k/type_v 0 = GGML_TYPE_F32: a float32 KV cache (llama.cpp's default F16 cache would round K and V)
    return llama_cpp.Llama(
        model_path=str(path), n_ctx=n_ctx, n_threads=1, logits_all=True, verbose=False, seed=0, type_k=0, type_v=0
    )


def _until_eos(ids: list[int], eos: int = 2) -> list[int]:
    return ids[: ids.index(eos) + 1] if eos in ids else ids


def _greedy(model, ids: list[int], n: int) -> list[int]:
    out = model.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False, pad_token_id=0)
    return _until_eos(out[0, len(ids) :].tolist())


def _cpp_greedy(llm, ids: list[int], n: int) -> list[int]:
    llm.reset()
    got: list[int] = []
    for tok in llm.generate(ids, temp=0.0, top_k=1, reset=True):  # temp 0: llama.cpp's greedy sampler
        got.append(int(tok))
        if len(got) == n or got[-1] == 2:  # the organism's eos (transformers stops there too)
            break
    return got


@pytest.mark.parametrize("qtype", ["F32", "F16"])
def test_llama_cpp_continues_like_transformers(tmp_path, qtype) -> None:
    """The trained organism (Llama, tied): llama.cpp's greedy continuation == transformers' on every prompt."""
    from transformers import AutoTokenizer

    base = organism_path()
    mask = tiny_mask(load_tiny(base), top_k=0.05)
    ckpt = _export_with_gguf(base, mask, tmp_path / "ckpt", qtype)
    ref = load_tiny(ckpt) if qtype == "F32" else _from_gguf(ckpt, f"model-{qtype}.gguf")  # F16-rounded weights
    llm = _llama(ckpt / f"model-{qtype}.gguf")
    tok = AutoTokenizer.from_pretrained(ckpt)
    for prompt in ["Question: Tom has 3 apples and buys 4 more.", "The quiet river", "Question: 12 * 3?\nAnswer:"]:
        ids = tok(prompt).input_ids
        assert llm.tokenize(prompt.encode(), add_bos=True, special=False) == ids  # llama.cpp's own tokenizer
        assert _cpp_greedy(llm, ids, 12) == _greedy(ref, ids, 12), prompt
        llm.reset()
        llm.eval(ids)
        cpp = torch.tensor(np.array(llm.scores[: len(ids)]))
        hf = ref(torch.tensor([ids])).logits[0]
        assert (cpp - hf).abs().max() < (2e-3 if qtype == "F32" else 5e-2) * hf.abs().max()


@pytest.mark.parametrize("family", ["llama", "llama3", "qwen2", "qwen3", "mistral"])
def test_llama_cpp_logits_match_on_random_models(baked, family) -> None:
    """Each architecture (permuted Llama/Mistral q/k, NeoX Qwen, Qwen3 q/k norms): llama.cpp's logits ~ transformers'."""
    llm = _llama(baked[family][0] / "model-F32.gguf")
    ref = load_tiny(baked[family][0])
    ids = [1, 305, 28, 223, 19, 20, 342, 223, 21, 271, 40, 50]
    assert logit_gap(llm, ref, ids) < 1e-3


def test_card_lock_and_push_carry_the_gguf(baked, tmp_path, fake_hub) -> None:
    """The lock and card record the GGUF's sha256; `push --gguf` uploads it byte for byte to its own repo, under
    llama.cpp's naming, with its card; the checkpoint's push leaves it out."""
    from mathneuro_edit.publish.card import CardSource, build_card, summarize_edit, write_card
    from mathneuro_edit.publish.hub import push_to_hub
    from mathneuro_edit.publish.lock import build_lock, output_hashes, write_lock
    from mathneuro_edit.recipe.io import quickstart_recipe
    from mathneuro_edit.util.hashing import sha256_file
    from tests._fakehub import TOKEN, _committed

    out = shutil.copytree(baked["llama-tied"][0], tmp_path / "checkpoint")
    recipe = quickstart_recipe(["outputs.gguf=F32"])
    summary = summarize_edit({"a.q_proj.weight": (3, 64)}, model_params=64)
    lock = build_lock(
        recipe,
        base_revision=None,
        data_records={},
        stats_sha256="s" * 64,
        mask_sha256="d" * 64,
        output_files={f"checkpoint/{k}": v for k, v in output_hashes(out).items()},
        base_weights={},
        edit_summary=summary,
    )  # what push renders the card for the target repo from
    write_lock(out, lock)
    card = build_card(CardSource(recipe=recipe, lock=lock, edit_summary=summary), "checkpoint", base_model_id=None)
    write_card(out, card)
    sha = sha256_file(out / "model-F32.gguf")
    assert lock["outputs"]["checkpoint/model-F32.gguf"] == sha
    # named in the checkpoint's card, but the checkpoint's repo holds none: its `gguf` tag is on the GGUF repo
    assert f"| `model-F32.gguf` | `{sha}` |" in card.content and "gguf" not in card.data.tags
    push_to_hub(out, "me/tiny", token=TOKEN)
    assert not any(name.endswith(".gguf") for name in _committed(fake_hub))
    fake_hub.commits.clear()
    push_to_hub(out, "me/tiny-GGUF", kind="gguf", token=TOKEN)
    files = _committed(fake_hub)
    assert files["Organism-64-MathNeuro-Prune-F32.gguf"] == (out / "model-F32.gguf").read_bytes()
    assert set(files) == {"Organism-64-MathNeuro-Prune-F32.gguf", "README.md", "mathneuro_recipe.lock.yaml"}
    from huggingface_hub import ModelCard

    assert "gguf" in ModelCard(files["README.md"].decode()).data.tags


@pytest.mark.slow
def test_streaming_peak_memory_is_well_below_the_model(tmp_path) -> None:
    """Peak RSS of write_gguf (its own process, VmHWM) grows by well under the model's size: one tensor at a time."""
    import transformers as tf

    torch.manual_seed(0)
    cfg = tf.LlamaConfig(
        vocab_size=703,
        hidden_size=512,
        intermediate_size=2048,
        num_hidden_layers=6,
        num_attention_heads=8,
        num_key_value_heads=8,
        tie_word_embeddings=True,
    )
    model = tf.AutoModelForCausalLM.from_config(cfg)
    model.save_pretrained(tmp_path / "m")
    shutil.copy(organism_path() / "tokenizer.json", tmp_path / "m")
    size = sum(p.numel() * 4 for p in model.parameters())  # ~100 MB of float32
    del model
    code = f"""
import re, numpy, torch, gguf, safetensors
from mathneuro_edit.weights.gguf_writer import write_gguf
hwm = lambda: int(re.search(r"VmHWM:\\s+(\\d+)", open("/proc/self/status").read()).group(1)) * 1024
before = hwm()
write_gguf({str(tmp_path / "m")!r}, {str(tmp_path / "m.gguf")!r}, "Q8_0")
print(before, hwm())
"""
    res = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
    )
    before, after = map(int, res.stdout.split())
    largest = 2048 * 512 * 4  # the largest tensor in float32
    assert after - before < 0.25 * size, (after - before, size)
    assert after - before < 8 * largest + (64 << 20)


@pytest.mark.slow
@pytest.mark.real
def test_real_smollm2_round_trip_is_llama_cpp_s_own_file(smollm2, tmp_path) -> None:  # noqa: F811
    """SmolLM2-135M-Instruct Q4_1 (written by llama.cpp): transformers loads it, we save it as HF and write it back
    as Q4_1: every tensor (names, order, types: token_embd Q8_0, shapes, q/k permutation) is byte-identical to
    llama.cpp's, and so are the vocabulary, merges, token types, special ids, chat template and hyperparameters."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    loaded = AutoModelForCausalLM.from_pretrained(smollm2.parent, gguf_file=smollm2.name)
    fresh = AutoModelForCausalLM.from_config(loaded.config)
    fresh.load_state_dict(loaded.state_dict())
    fresh.save_pretrained(tmp_path / "hf")
    AutoTokenizer.from_pretrained(smollm2.parent, gguf_file=smollm2.name).save_pretrained(tmp_path / "hf")
    del loaded, fresh
    theirs = gguf.GGUFReader(str(smollm2))
    # transformers' GGUF tokenizer drops SmolLM2's digit split (its tokenizer.json reads as "gpt-2"): pass the base's
    pre = theirs.fields["tokenizer.ggml.pre"].contents()
    assert pre == "smollm"
    ours = gguf.GGUFReader(str(write_gguf(tmp_path / "hf", tmp_path / "ours.gguf", "Q4_1", pre=pre)))
    assert [t.name for t in ours.tensors] == [t.name for t in theirs.tensors]
    for a, b in zip(ours.tensors, theirs.tensors):
        assert a.tensor_type == b.tensor_type and list(a.shape) == list(b.shape), a.name
        assert np.array_equal(np.asarray(a.data).view(np.uint8), np.asarray(b.data).view(np.uint8)), a.name
    same = [k for k in theirs.fields if k.startswith(("llama.", "tokenizer.")) and k in ours.fields]
    for k in same:
        assert ours.fields[k].contents() == theirs.fields[k].contents(), k
    assert len(same) >= 20 and "tokenizer.ggml.add_bos_token" in same
    assert gguf_file_type(tmp_path / "ours.gguf") == "Q4_1"


# ---------------------------------------------------------------------------------------------- Gemma 3


def _gemma3_base(folder: Path, **kwargs) -> Path:
    """The family matrix's tiny Gemma 3 (text) (google/gemma-3-1b-it's shape), with ``kwargs`` over its config."""
    from dataclasses import replace

    from tests._families import save_family_base
    from tests._family_shapes import family_shape

    shape = family_shape("Gemma 3 (text)")
    return save_family_base(folder, replace(shape, kwargs={**shape.kwargs, **kwargs}))


def test_llama_cpp_scales_gemma3_s_global_layers_only(tmp_path) -> None:
    """Gemma 3 4B+ (linear factor 8 on the global layers, none on the sliding ones): llama.cpp applies
    ``rope.scaling.factor`` to the non-sliding layers only, as transformers does; logits and greedy agree."""
    from transformers import AutoModelForCausalLM

    rope = {
        "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1_000_000.0},
        "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
    }
    base = _gemma3_base(tmp_path / "base", rope_parameters=rope)
    llm = _llama(write_gguf(base, tmp_path / "model-F32.gguf", "F32"))
    ref = AutoModelForCausalLM.from_pretrained(base).eval()
    ids = [1, 305, 28, 223, 19, 20, 342, 223, 21, 271, 40, 50, 305, 28, 223, 19]  # longer than the window (8)
    llm.eval(ids)
    cpp = torch.tensor(np.array(llm.scores[: len(ids)]))
    with torch.no_grad():
        hf = ref(torch.tensor([ids])).logits[0]
    assert (cpp - hf).abs().max() < 1e-3 * max(1.0, float(hf.abs().max()))
    assert _cpp_greedy(llm, ids, 8) == _greedy(ref, ids, 8)


_G3_FIX = "; set outputs.gguf: null (the checkpoint holds the edit)"


@pytest.mark.parametrize(
    "change, why",
    [
        (
            {"query_pre_attn_scalar": 64},
            "query_pre_attn_scalar 64: llama.cpp's gemma3 scales queries by 1/sqrt(32) "
            "(head_dim, or hidden/heads for 62 layers) and reads no attention scale",
        ),
        ({"attn_logit_softcapping": 50.0}, "attn_logit_softcapping: llama.cpp's gemma3 has no attention soft-capping"),
        (
            {"use_bidirectional_attention": True},
            "use_bidirectional_attention (EmbeddingGemma): llama.cpp's gemma3 is causal",
        ),
        (
            {"hidden_activation": "gelu"},
            "hidden_activation 'gelu': llama.cpp's gemma3 uses the tanh-approximated GELU (gelu_pytorch_tanh)",
        ),
        (
            {
                "rope_parameters": {
                    "full_attention": {
                        "rope_type": "yarn",
                        "factor": 4.0,
                        "rope_theta": 1e6,
                        "original_max_position_embeddings": 64,
                    },
                    "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
                }
            },
            "rope 'yarn' on the global and 'default' on the sliding layers: llama.cpp's gemma3 applies only linear "
            "scaling, and only to the global layers",
        ),
        (
            {
                "rope_parameters": {
                    "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
                    "sliding_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e4},
                }
            },
            "rope 'linear' on the global and 'linear' on the sliding layers: llama.cpp's gemma3 applies only linear "
            "scaling, and only to the global layers",
        ),
    ],
)
def test_gemma3_refusals_are_the_exact_line_from_config_alone(tmp_path, change, why) -> None:
    """What llama.cpp's gemma3 fixes instead of reading is refused, from config.json alone, with one line."""
    from mathneuro_edit.weights.gguf_arch import gguf_refusal
    from tests._family_shapes import family_shape

    line = f"outputs.gguf: this gemma3_text config is not written: {why}{_G3_FIX}"
    cfg = {**family_shape("Gemma 3 (text)").config().to_dict(), **change}
    assert gguf_refusal(cfg) == line
    folder = tmp_path / "only-config"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(InputError) as err:
        write_gguf(folder, tmp_path / "x.gguf", "F32")
    assert str(err.value) == line and not (tmp_path / "x.gguf").exists()


def test_gemma3_hub_config_of_transformers_4_is_read_like_transformers() -> None:
    """A Hub config.json of transformers 4 (google/gemma-3-4b-it's keys): the layer pattern from
    ``sliding_window_pattern``, the local base from ``rope_local_base_freq``, the scaling on the global layers."""
    from mathneuro_edit.weights.gguf_arch import (
        gguf_refusal,
        layer_types,
        rope_by_layer_type,
    )

    cfg = {
        "model_type": "gemma3_text",
        "hidden_size": 2560,
        "num_attention_heads": 8,
        "num_hidden_layers": 34,
        "head_dim": 256,
        "query_pre_attn_scalar": 256,
        "sliding_window": 1024,
        "sliding_window_pattern": 6,
        "rope_theta": 1000000.0,
        "rope_local_base_freq": 10000.0,
        "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
    }
    assert gguf_refusal(cfg) is None
    kinds = layer_types(cfg)
    assert [i for i, k in enumerate(kinds) if k == "full_attention"] == [5, 11, 17, 23, 29]
    rope = rope_by_layer_type(cfg)
    assert rope["full_attention"] == {"factor": 8.0, "rope_type": "linear", "rope_theta": 1e6}
    assert rope["sliding_attention"] == {"rope_type": "default", "rope_theta": 1e4}
