"""What ``push`` uploads of a tokenizer loads and tokenizes as the original (issue 39, item 1).

The local-path scrubber once blanked every JSON string shaped like a path: SmolLM2's BPE merges ``["//", ...]`` and
``["~~", "~~"]`` (``//`` even exists here), and Gemma 3's 334 such merges, became ``""`` in the uploaded copy and
``tokenizers`` refused the file. Redaction now goes by meaning (the fields that can hold a path); tokenizer files
and token fields are uploaded byte for byte. Checked here on a hand-made tokenizer (fast) and, in the real tier
(``-m real``), on SmolLM2's and Gemma 3's tokenizers (from their GGUF files) and the released Llama 2 / Gemma 3
SentencePiece tokenizer.json: pushed to the local fake Hub, loaded back from it with ``AutoTokenizer``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mathneuro_edit.util.scrub import scrub_json
from tests._fakehub import TOKEN, _committed, relock
from tests._real_model import spm_tokenizer

TEXTS = [
    "12 + 7 = 19 // the answer ~~ done",
    "see https://huggingface.co/HuggingFaceTB and ~/models or /srv/x/y",
    "x = a // b; y = ~~z; //// ~~~~ /// ~~~",
    "Natalia sold clips to 48 of her friends in April.\n\tThen half as many in May.",
]


def _push(out: Path, repo_id: str, hub) -> dict[str, bytes]:
    """Push ``out`` (its files recorded in the lock first, as a run would have) to the fake Hub: what was sent."""
    from mathneuro_edit.publish.hub import push_to_hub

    relock(out)
    push_to_hub(out, repo_id, token=TOKEN)
    return _committed(hub)


def _hand_made_tokenizer(folder: Path) -> None:
    """A byte-level BPE tokenizer whose merges, vocabulary and added tokens look like paths (``//``, ``~~``,
    ``/srv/x/y``), with a tokenizer_config.json that also names a real local path (which must be blanked)."""
    vocab = {c: i for i, c in enumerate(["/", "~", "a", "b", " ", "//", "~~", "////", "~~~~", "ab"])}
    merges = [["/", "/"], ["~", "~"], ["//", "//"], ["~~", "~~"], ["a", "b"]]
    tok = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {
                "id": 10,
                "content": "/srv/x/y",
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            },
            {
                "id": 11,
                "content": "~~~",
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            },
        ],  # fmt: skip
        "normalizer": None,
        "pre_tokenizer": None,
        "post_processor": None,
        "decoder": None,
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": merges,
        },
    }
    (folder / "tokenizer.json").write_text(json.dumps(tok, indent=1))
    cfg = {
        "name_or_path": str(folder),  # a real local path: blanked in the uploaded copy
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": "~~~",
        "sep_token": "//",
        "additional_special_tokens": ["/srv/x/y"],
        "chat_template": "{% for m in messages %}//{{ m['content'] }}~~{% endfor %}",
        "added_tokens_decoder": {
            "10": {"content": "/srv/x/y", "special": True},
            "11": {"content": "~~~", "special": True},
        },
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg, indent=1))
    (folder / "special_tokens_map.json").write_text(json.dumps({"eos_token": "~~~", "sep_token": "//"}))


def test_scrub_blanks_path_fields_only() -> None:
    """A path key's local path is blanked (at any depth, in lists); tokens, merges and templates never are."""
    data = {
        "_name_or_path": "/srv/models/llama",
        "text_config": {"tokenizer_file": "~/tok.json", "layers": [{"path": "~/x"}], "sep": "/srv/a/b"},
        "data_files": ["/srv/d/train.json", "organism:math"],
        "model": {"merges": [["/", "/"], ["~~", "~~"]], "vocab": {"//": 1}},
        "eos_token": "~~",
        "chat_template": "{{ a // b }}",
        "added_tokens_decoder": {"1": {"content": "/srv/x/y"}},
    }
    new, found = scrub_json(data)
    assert found == ["_name_or_path", "text_config.tokenizer_file", "text_config.layers[0].path", "data_files[0]"]
    assert new["text_config"]["sep"] == "/srv/a/b" and new["data_files"] == ["", "organism:math"]
    assert {k: new[k] for k in ("model", "eos_token", "chat_template", "added_tokens_decoder")} == {
        k: data[k] for k in ("model", "eos_token", "chat_template", "added_tokens_decoder")
    }


def test_tokenizer_files_are_never_read(tmp_path: Path) -> None:
    """A file that holds only tokens is uploaded as it is, whatever its keys: a tokenizer format of tomorrow may
    name a field ``*_file`` whose tokens look like paths."""
    from mathneuro_edit.util.scrub import TOKENIZER_FILES, scrub_json_bytes

    for name in sorted(TOKENIZER_FILES):
        (tmp_path / name).write_text(json.dumps({"vocab_file": "~~", "source": ["/srv/x/y"]}))
        assert scrub_json_bytes(tmp_path / name) == (None, []), name
    (tmp_path / "config.json").write_text(json.dumps({"vocab_file": "~~", "source": ["/srv/x/y"]}))
    assert scrub_json_bytes(tmp_path / "config.json")[1] == ["vocab_file", "source[0]"]


def test_a_tokenizer_whose_merges_look_like_paths_is_uploaded_byte_for_byte(fake_hub, out_dir: Path) -> None:
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    _hand_made_tokenizer(out_dir)
    before = {n: (out_dir / n).read_bytes() for n in ("tokenizer.json", "special_tokens_map.json")}
    sent = _push(out_dir, "me/tok", fake_hub)
    assert {n: sent[n] for n in before} == before  # byte for byte: the merges "//" and "~~" are kept
    cfg, local_cfg = (
        json.loads(sent["tokenizer_config.json"]),
        json.loads((out_dir / "tokenizer_config.json").read_text()),
    )
    assert cfg["name_or_path"] == "" and str(out_dir) not in sent["tokenizer_config.json"].decode()
    assert {k: v for k, v in cfg.items() if k != "name_or_path"} == {
        k: v for k, v in local_cfg.items() if k != "name_or_path"
    }
    ref, uploaded = (
        Tokenizer.from_file(str(out_dir / "tokenizer.json")),
        Tokenizer.from_str(sent["tokenizer.json"].decode()),
    )
    original = AutoTokenizer.from_pretrained(str(out_dir))
    got = AutoTokenizer.from_pretrained("me/tok")  # from the fake Hub: what was uploaded
    for text in ("////~~~~ab", "//~~/~", "a/srv/x/yb~~~"):
        assert uploaded.encode(text).ids == ref.encode(text).ids, text
        assert got(text)["input_ids"] == original(text)["input_ids"], text
    assert got.eos_token == "~~~" and got.sep_token == "//"


# ------------------------------------------------------------------------------------------------ real tier


def _real_tokenizer(which: str, request: pytest.FixtureRequest, into: Path) -> None:
    """Save the real tokenizer ``which`` into ``into`` as a checkpoint folder holds it."""
    import shutil

    from transformers import AutoTokenizer

    if which in ("smollm2", "gemma3"):
        gguf = request.getfixturevalue(which)  # the GGUF file: transformers' own conversion, as the checkpoint's
        AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name).save_pretrained(str(into))
    else:
        src = spm_tokenizer(which.removesuffix("-spm"))
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(src / name, into / name)


@pytest.mark.real
@pytest.mark.parametrize("which", ["smollm2", "gemma3", "llama2-spm", "gemma3-spm"])
def test_a_pushed_real_tokenizer_loads_and_encodes_as_the_original(
    which: str, request: pytest.FixtureRequest, fake_hub, out_dir: Path
) -> None:
    """SmolLM2 (14 merges of ``//`` / ``~~``), Gemma 3 from its GGUF and as released (334 such merges) and Llama 2:
    the uploaded tokenizer.json is the local file, and ``AutoTokenizer`` from the Hub encodes like the original."""
    from transformers import AutoTokenizer

    _real_tokenizer(which, request, out_dir)
    cfg_path = out_dir / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    cfg["name_or_path"] = str(out_dir)  # as a tokenizer saved from a local folder may carry: blanked when pushed
    cfg_path.write_text(json.dumps(cfg, indent=2, ensure_ascii=False), encoding="utf-8")
    merges = json.loads((out_dir / "tokenizer.json").read_text(encoding="utf-8"))["model"].get("merges") or []
    looks_like_path = [m for m in merges if any(str(p).startswith(("//", "~")) for p in m)]
    if which != "llama2-spm":  # the merges the shape rule blanked are there: the test would have caught it
        assert looks_like_path, which
    original = AutoTokenizer.from_pretrained(str(out_dir))
    sent = _push(out_dir, f"me/{which}", fake_hub)
    assert sent["tokenizer.json"] == (out_dir / "tokenizer.json").read_bytes()
    assert str(out_dir) not in sent["tokenizer_config.json"].decode("utf-8")
    pushed = AutoTokenizer.from_pretrained(f"me/{which}")  # from the fake Hub: what was uploaded
    for text in TEXTS:
        assert pushed(text)["input_ids"] == original(text)["input_ids"], text
        assert pushed.decode(pushed(text)["input_ids"]) == original.decode(original(text)["input_ids"]), text
    if original.chat_template:
        chat = [{"role": "user", "content": TEXTS[0]}]
        assert pushed.apply_chat_template(chat, tokenize=False) == original.apply_chat_template(chat, tokenize=False)
