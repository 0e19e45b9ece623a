"""A GGUF is written only when config.json agrees with the weights the way llama.cpp checks it (issue 41, class 7).

The GGUF's keys come from config.json and its tensors from the shards: an edited config (3 layers declared, 2
present; ``head_dim: 7``; more experts used than there are; a vocabulary larger than the embedding) gave a file,
with exit 0, that llama.cpp refuses to load. :func:`~mathneuro_edit.weights.gguf_tensors.check_config_agrees` now
refuses such a folder in one line before anything is written (``check_gguf``, ``export --gguf``, a run's export)."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

pytest.importorskip("gguf")

import tests._families as fam  # noqa: E402
from mathneuro_edit.errors import InputError  # noqa: E402
from mathneuro_edit.weights.gguf_writer import check_gguf, export_gguf  # noqa: E402
from tests._family_shapes import family_shape  # noqa: E402
from tests.weights.test_gguf import save_base  # noqa: E402


@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> Path:
    return save_base(tmp_path_factory.mktemp("agree") / "llama", "llama")  # 2 layers, 4 heads of 16, 2 KV, 703 x 64


@pytest.fixture(scope="module")
def mixtral(tmp_path_factory) -> Path:
    shape = family_shape("Mixtral")  # 4 experts
    return fam.save_family_base(tmp_path_factory.mktemp("agree") / "mixtral", dataclasses.replace(shape))


def _edited(base: Path, tmp_path: Path, **changes) -> Path:
    folder = tmp_path / "edited"
    folder.mkdir()
    for f in base.iterdir():
        (folder / f.name).symlink_to(f)  # the same weights and tokenizer
    cfg = json.loads((base / "config.json").read_text())
    for key, value in changes.items():
        if value is None:
            cfg.pop(key, None)
        else:
            cfg[key] = value
    (folder / "config.json").unlink()
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


def test_the_unchanged_folders_are_written(llama: Path, mixtral: Path, tmp_path: Path) -> None:
    check_gguf(llama, "F16")
    check_gguf(mixtral, "F16")


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({"num_hidden_layers": 3}, "num_hidden_layers is 3 but the weights hold the layers 2 (blk.0..1)"),
        ({"head_dim": 7}, "head_dim 7 is odd"),
        ({"head_dim": 8}, "blk.0.attn_q has 64 rows but 4 heads x head_dim 8 = 32"),
        ({"num_attention_heads": 3, "head_dim": None}, "num_attention_heads 3 does not divide hidden_size 64"),
        ({"num_key_value_heads": 3}, "num_key_value_heads 3 does not divide num_attention_heads 4"),
        ({"num_key_value_heads": 4}, "blk.0.attn_k has 32 rows but 4 heads x head_dim 16 = 64"),
        ({"vocab_size": 800}, "vocab_size x hidden_size is 800 x 64 but the embedding is 703 x 64"),
        ({"vocab_size": 600}, "vocab_size x hidden_size is 600 x 64 but the embedding is 703 x 64"),
    ],
)
def test_a_config_that_disagrees_with_the_weights_is_refused_before_writing(
    llama: Path, tmp_path: Path, changes: dict, why: str
) -> None:
    folder = _edited(llama, tmp_path, **changes)
    with pytest.raises(InputError) as e:
        export_gguf(folder, "F16", tmp_path / "m.gguf")
    line = str(e.value)
    assert line.startswith("outputs.gguf: config.json: ") and why in line and "\n" not in line, line
    assert line.endswith("use the model's own")
    assert not list(tmp_path.glob("*.gguf")) and not list(tmp_path.glob(".*tmp"))


@pytest.mark.parametrize(("used", "shown"), [(5, "5"), (0, "0")])
def test_more_experts_used_than_there_are_is_refused(mixtral: Path, tmp_path: Path, used, shown: str) -> None:
    folder = _edited(mixtral, tmp_path, num_experts_per_tok=used)
    with pytest.raises(InputError, match=rf"num_experts_per_tok is {shown} but a token uses 1 to num_experts 4"):
        check_gguf(folder, "F16")


@pytest.mark.parametrize("extra", [0, 40])
def test_a_tokenizer_larger_than_the_embedding_is_refused_before_writing(
    llama: Path, tmp_path: Path, extra: int
) -> None:
    """Issue 48 (open from earlier rounds): a tokenizer.json with ids past the 703 embedding rows exported as a
    GGUF with exit 0 (its token list longer than token_embd: llama.cpp refuses or reads past the table)."""
    folder = _edited(llama, tmp_path)
    tok = json.loads((llama / "tokenizer.json").read_text())
    assert max(tok["model"]["vocab"].values()) < 703  # the unchanged tokenizer fits (see the first test)
    tok["added_tokens"] = [*tok.get("added_tokens", []), {"id": 703 + extra, "content": "<extra>", "special": True}]
    (folder / "tokenizer.json").unlink()
    (folder / "tokenizer.json").write_text(json.dumps(tok))
    why = f"tokenizer.json has token id {703 + extra} ('<extra>'), past the model's 703 embedding rows"
    with pytest.raises(InputError, match=rf"^outputs\.gguf: {re.escape(why)}"):
        check_gguf(folder, "F16")
    with pytest.raises(InputError, match=rf"^outputs\.gguf: {re.escape(why)}") as e:
        export_gguf(folder, "F16", tmp_path / "m.gguf")
    assert "\n" not in str(e.value)
    assert not list(tmp_path.glob("*.gguf")) and not list(tmp_path.glob(".*tmp"))


def _with(base: Path, tmp_path: Path, name: str, change) -> Path:
    folder = _edited(base, tmp_path)
    data = json.loads((base / name).read_text())
    change(data)
    (folder / name).unlink()
    (folder / name).write_text(json.dumps(data))
    return folder


@pytest.mark.parametrize(
    ("name", "change", "why"),
    [
        ("tokenizer.json", lambda t: t["model"].update(merges=[1, 2]), "model.merges[0] is 1, not 'a b' or ['a', 'b']"),
        ("tokenizer.json", lambda t: t["model"].update(merges=[["a", ["b"]]]), "model.merges[0] is ['a', ['b']]"),
        ("tokenizer.json", lambda t: t["model"].update(vocab=["a", "b"]), "model.vocab is ['a', 'b'], not an object"),
        ("tokenizer.json", lambda t: t.update(added_tokens=[{"id": 1, "content": 5}]), "added_tokens[0] is {'id': 1"),
        (
            "tokenizer_config.json",
            lambda c: c.update(chat_template="{% if %}"),
            "chat_template is not a Jinja template",
        ),
        ("tokenizer_config.json", lambda c: c.update(chat_template=[{"name": 1, "template": 5}]), "not a list of"),
        ("tokenizer_config.json", lambda c: c.update(chat_template=5), "chat_template is 5, not a template (text)"),
    ],
)
def test_a_malformed_tokenizer_or_chat_template_is_refused_before_writing(
    llama: Path, tmp_path: Path, name: str, change, why: str
) -> None:
    """Issue 48 (open from earlier rounds): malformed merges or vocabulary at GGUF export were internal errors
    (ValueError, AttributeError), a chat template of numbers an internal TypeError, and a template Jinja cannot
    parse was written into the GGUF (llama.cpp fails on it at chat time)."""
    folder = _with(llama, tmp_path, name, change)
    with pytest.raises(InputError) as e:
        check_gguf(folder, "F16")
    with pytest.raises(InputError) as e:
        export_gguf(folder, "F16", tmp_path / "m.gguf")
    line = str(e.value)
    assert why in line and name in line and "\n" not in line, line
    assert not list(tmp_path.glob("*.gguf")) and not list(tmp_path.glob(".*tmp"))


@pytest.mark.parametrize(
    ("name", "content", "why"),
    [
        ("chat_template.jinja", b"{% if %}", "chat_template is not a Jinja template"),
        ("chat_template.jinja", b"\xff\xfe{{ x }}", "not a template (text)"),
        ("additional_chat_templates/tool_use.jinja", b"{% for %}", "chat_template is not a Jinja template"),
        ("chat_template.json", b'{"chat_template": 5}', "chat_template is 5, not a template (text)"),
    ],
)
def test_a_malformed_chat_template_file_is_refused_before_writing(
    llama: Path, tmp_path: Path, name: str, content: bytes, why: str
) -> None:
    """Issue 48: gguf's SpecialVocab also copies chat_template.jinja (where transformers 5 saves a template),
    additional_chat_templates/*.jinja and chat_template.json into the GGUF; only tokenizer_config.json's template
    was checked, so a broken one was written (llama.cpp fails at chat time) or undecodable bytes were an internal
    error."""
    folder = _edited(llama, tmp_path)
    (folder / name).parent.mkdir(exist_ok=True)
    (folder / name).unlink(missing_ok=True)  # a link to the shared base's file: replace it, never write through it
    (folder / name).write_bytes(content)
    with pytest.raises(InputError) as e:
        export_gguf(folder, "F16", tmp_path / "m.gguf")
    line = str(e.value)
    assert why in line and Path(name).name in line and "\n" not in line, line
    assert not list(tmp_path.glob("*.gguf")) and not list(tmp_path.glob(".*tmp"))
