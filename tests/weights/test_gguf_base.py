"""GGUF bases without the real model: a tiny random Llama written as GGUF (tests/_gguf_tiny.py), loaded back.

Checks the dequantized folder against independent references (the original weights for F32 tensors, gguf's own
``GGUFReader`` + ``quants.dequantize`` for Q8_0 ones, llama.cpp's q/k permutation undone), the cache (written once,
byte-identical across runs and folders), the recipe key ``base.gguf_file``, bad input, and the whole pipeline
(run, plain-transformers load, adapter merge, verify, reproduce bit for bit with a fresh cache).
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from mathneuro_edit.cli.main import main
from mathneuro_edit.errors import InputError
from mathneuro_edit.recipe.io import recipe_from_dict
from mathneuro_edit.weights import gguf_reader as gguf_base
from mathneuro_edit.weights import gguf_writer
from tests._gguf_e2e import check_gguf_outputs, cli, data_overrides, write_recipe
from tests._gguf_tiny import CHAT_TEMPLATE, expected_weights, tiny_llama, write_gguf
from tests._models import hash_tree

pytest.importorskip("gguf")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(gguf path, original model, kinds); the module's dequantization cache is its own folder."""
    root = tmp_path_factory.mktemp("gguf")
    model = tiny_llama()
    kinds = write_gguf(model, root / "tiny.Q8_0.gguf")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MATHNEURO_EDIT_CACHE", str(root / "cache"))
        yield root / "tiny.Q8_0.gguf", model, kinds


def test_dequantized_folder_matches_the_gguf(tiny):
    import gguf
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path, model, kinds = tiny
    folder = gguf_base.dequantize_gguf(path)
    assert folder.parent == Path(os.environ["MATHNEURO_EDIT_CACHE"]) / "gguf"
    assert folder.name == gguf_base._sha256(path)
    stored = load_file(folder / "model.safetensors")
    assert "lm_head.weight" not in stored  # tied: saved once
    expected = expected_weights(model, kinds)
    assert set(stored) == set(expected)
    for name, t in expected.items():
        assert stored[name].dtype == torch.float32 and torch.equal(stored[name], t), name
    # independent: gguf's own reader + dequantization of the file's Q8_0 tensors (not permuted ones)
    reader = gguf.GGUFReader(str(path))
    by_name = {t.name: t for t in reader.tensors}
    for gname, hname in (
        ("token_embd.weight", "model.embed_tokens.weight"),
        ("blk.1.ffn_down.weight", "model.layers.1.mlp.down_proj.weight"),
        ("blk.0.attn_v.weight", "model.layers.0.self_attn.v_proj.weight"),
    ):
        t = by_name[gname]
        assert t.tensor_type == gguf.GGMLQuantizationType.Q8_0
        ref = torch.from_numpy(np.ascontiguousarray(gguf.quants.dequantize(t.data, t.tensor_type)))
        assert torch.equal(stored[hname], ref), hname
    # the q rows came back in Hugging Face order: equal to the original (F32 in the file, permuted there)
    q = "model.layers.0.self_attn.q_proj.weight"
    assert torch.equal(stored[q], model.state_dict()[q])
    assert not torch.equal(torch.from_numpy(np.array(by_name["blk.0.attn_q.weight"].data)), stored[q])
    loaded = AutoModelForCausalLM.from_pretrained(folder)
    assert loaded.lm_head.weight.data_ptr() == loaded.model.embed_tokens.weight.data_ptr()
    assert (folder / "chat_template.jinja").read_text() == CHAT_TEMPLATE
    tok = AutoTokenizer.from_pretrained(folder)
    assert (
        tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)
        == "<|im_start|>user\nhi<|im_end|>\n"
    )
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o644 for p in folder.iterdir())
    assert str(path.parent) not in "".join(p.read_text() for p in folder.iterdir() if p.suffix != ".safetensors")


def test_dequantize_is_cached_and_byte_identical(tiny, tmp_path, monkeypatch):
    path, _, _ = tiny
    first = gguf_base.dequantize_gguf(path)

    def boom(*a, **k):
        raise AssertionError("dequantized again")

    monkeypatch.setattr(gguf_base, "_materialise", boom)
    assert gguf_base.dequantize_gguf(path) == first  # cached by the file's sha256
    monkeypatch.undo()
    copy = tmp_path / "elsewhere" / "renamed.gguf"  # another folder, another name, another cache
    copy.parent.mkdir()
    copy.write_bytes(path.read_bytes())
    # in another process, with another hash seed, from another working directory
    code = (
        "import sys; from mathneuro_edit.weights.gguf_reader import dequantize_gguf; print(dequantize_gguf(*sys.argv[1:2], "
        "cache_dir=sys.argv[2]))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "123", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.run(
        [sys.executable, "-c", code, str(copy), str(tmp_path / "cache2")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    again = Path(proc.stdout.strip().splitlines()[-1])
    assert again == tmp_path / "cache2" / "gguf" / first.name
    assert again.name == first.name
    first_tree, again_tree = hash_tree(first), hash_tree(again)
    assert {k for k in first_tree if first_tree[k] != again_tree[k]} <= {"README.md"}  # it names the source file
    assert not list((tmp_path / "cache2" / "gguf").glob(".*tmp*"))  # no temporary folder left behind


def test_recipe_key_gguf_file_and_sources(tiny, tmp_path, monkeypatch):
    path, _, _ = tiny
    base = {"model": str(path.parent), "gguf_file": path.name}
    r = recipe_from_dict(
        {"base": base, "data": {"math": "organism:math", "general": "organism:general"}, "edit": {"scale": 1.1}}
    )
    assert r.base.is_gguf and r.public_dict()["base"] == {
        **r.public_dict()["base"],
        "model": "<local>",
        "gguf_file": path.name,
    }
    assert gguf_base.base_folder(r.base) == gguf_base.dequantize_gguf(path)
    for bad in ({"model": "org/repo", "gguf_file": "model.safetensors"}, {"model": str(path), "gguf_file": "x.gguf"}):
        with pytest.raises(InputError, match="gguf_file"):
            recipe_from_dict(
                {"base": bad, "data": {"math": "organism:math", "general": "organism:general"}, "edit": {"scale": 1.1}}
            )
    with pytest.raises(InputError, match="not in the folder"):
        gguf_base.gguf_source(str(tmp_path), "missing.gguf")
    # a Hub repo: hf_hub_download's snapshot path gives the commit recorded in the lock (the file already in the
    # Hub cache, as after a first download: no connection is needed to use it)
    import huggingface_hub
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    snap = tmp_path / "models--org--repo" / "snapshots" / ("c" * 40)
    snap.mkdir(parents=True)
    (snap / "m.gguf").write_bytes(b"x")
    (tmp_path / "models--org--repo" / "refs").mkdir()
    (tmp_path / "models--org--repo" / "refs" / "main").write_text("c" * 40)

    calls = []
    monkeypatch.setattr(
        huggingface_hub,
        "hf_hub_download",
        lambda repo, name, revision=None: calls.append((repo, name, revision)) or str(snap / name),
    )
    assert gguf_base.gguf_source("org/repo", "m.gguf", "main") == (snap / "m.gguf", "c" * 40)
    assert calls == [("org/repo", "m.gguf", "main")]


def test_bad_gguf_input_is_one_line_exit_2(tiny, tmp_path):
    path, _, _ = tiny
    recipe = write_recipe(tmp_path, tmp_path / "missing.gguf", evaluate=False)
    code, text = cli("run", str(recipe), "--out", str(tmp_path / "out"), "-q")
    assert code == 2 and "no such GGUF file" in text and len(text.strip().splitlines()) == 1, text
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"GGUF but not really")
    code, text = cli("dequantize", str(junk))
    assert code == 2 and "not a GGUF file (no GGUF header)" in text and "Traceback" not in text, text
    assert not (tmp_path / "out").exists()
    code, text = cli("dequantize", str(path))
    assert code == 0 and text.strip() == str(gguf_base.dequantize_gguf(path))


@pytest.mark.slow
def test_run_on_a_gguf_base_end_to_end_then_reproduce(tiny, tmp_path, monkeypatch):
    import gguf

    path, _, _ = tiny
    recipe = write_recipe(tmp_path, path, gguf_out="base")  # the base's own type (Q8_0) and pre-tokenizer
    out = tmp_path / "out"
    code, text = cli("run", str(recipe), "--out", str(out), "-q")
    assert code == 0, text
    check_gguf_outputs(out, path, tmp_path, chat_template=CHAT_TEMPLATE)  # verify audits the GGUF too
    written = gguf.GGUFReader(str(out / "checkpoint" / "model-Q8_0.gguf"))
    assert written.fields["tokenizer.ggml.pre"].contents() == "smollm"  # not the dequantized tokenizer's gpt-2
    code, text = cli("plan", str(recipe))  # the plan reads the dequantized folder's config.json
    n = sum(p.numel() for p in tiny_llama().parameters())
    assert code == 0 and f"model: llama, {n / 1000:.1f}K parameters, float32" in text, text
    # reproduce from the GGUF with an empty cache: dequantized again, every output byte-identical
    monkeypatch.setenv("MATHNEURO_EDIT_CACHE", str(tmp_path / "fresh-cache"))
    code, text = cli(
        "reproduce", str(out), "--base", str(path), "--out", str(tmp_path / "again"), "-q", *data_overrides(tmp_path)
    )
    assert code == 0 and "bit for bit" in text and "differs" not in text, text
    assert (tmp_path / "fresh-cache" / "gguf" / gguf_base._sha256(path) / "model.safetensors").is_file()
    # reproduce refuses another GGUF file
    other = tmp_path / "other.gguf"
    other.write_bytes(path.read_bytes()[:-1] + b"\0")
    code, text = cli(
        "reproduce", str(out), "--base", str(other), "--out", str(tmp_path / "no"), "-q", *data_overrides(tmp_path)
    )
    assert code == 2 and "expected the GGUF file" in text, text


def test_outputs_gguf_base_is_the_base_s_own_type_and_pre_tokenizer(tiny, monkeypatch):
    path, _, _ = tiny
    data = {"math": "organism:math", "general": "organism:general"}
    r = recipe_from_dict(
        {"base": {"model": str(path)}, "data": data, "edit": {"scale": 1.1}, "outputs": {"gguf": "base"}}
    )
    # the tiny file has no general.file_type: its dominant matrix type, Q8_0; its pre-tokenizer, smollm
    assert gguf_base.gguf_output(r.base, "base") == ("Q8_0", "smollm")
    assert gguf_base.gguf_output(r.base, "F16") == ("F16", "smollm")  # any type keeps the base's pre-tokenizer
    assert gguf_base.gguf_output(r.base, None) == (None, None)
    plain = recipe_from_dict(
        {"base": {"model": "organism"}, "data": data, "edit": {"scale": 1.1}, "outputs": {"gguf": "F16"}}
    )
    assert gguf_base.gguf_output(plain.base, "F16") == ("F16", None)  # read from tokenizer.json then
    with pytest.raises(InputError, match=r"outputs.gguf: base means the GGUF base's own type.*choose a type"):
        recipe_from_dict(
            {"base": {"model": "organism"}, "data": data, "edit": {"scale": 1.1}, "outputs": {"gguf": "base"}}
        )
    monkeypatch.setattr(gguf_writer, "gguf_file_type", lambda p: "Q4_K")  # a k-quant: gguf cannot write it
    with pytest.raises(InputError, match=r"tiny.Q8_0.gguf is Q4_K, which the gguf package cannot write; choose one"):
        gguf_base.gguf_output(r.base, "base")


def test_check_base_weights_pins_the_gguf_file(tiny, tmp_path):
    from mathneuro_edit.publish.lock import check_base_weights

    path, _, _ = tiny
    lock = {"base": {"gguf": {"file": path.name, "sha256": gguf_base._sha256(path)}}}
    check_base_weights(lock, path)  # the file itself
    check_base_weights(lock, path.parent)  # the folder holding it (a base.gguf_file recipe)
    other = tmp_path / path.name
    other.write_bytes(path.read_bytes()[:-1] + b"\1")
    with pytest.raises(InputError, match="expected the GGUF file"):
        check_base_weights(lock, other)
    with pytest.raises(InputError, match="none recorded"):  # a lock made from a safetensors base
        check_base_weights({"base": {"weights_sha256": {}}}, path)


def test_dequantizing_a_gguf_base_prints_nothing_before_the_first_stage_line(tiny, tmp_path, monkeypatch):
    """transformers draws a bar per GGUF tensor while it dequantizes (272 updates for SmolLM2); a run's stderr
    starts with its first stage line, the bar only under --verbose (the libraries' own bars)."""
    path, _, _ = tiny
    recipe = write_recipe(tmp_path, path, evaluate=False, adapter=False)
    for verbose in (False, True):
        monkeypatch.setenv("MATHNEURO_EDIT_CACHE", str(tmp_path / f"cache-{verbose}"))  # dequantized afresh
        result = CliRunner().invoke(
            main, ["run", str(recipe), "--out", str(tmp_path / f"out-{verbose}"), *(["--verbose"] if verbose else [])]
        )
        assert result.exit_code == 0, result.output
        assert ("de-quantizing GGUF tensors" in result.stderr) is verbose, result.stderr[:300]
        if not verbose:
            assert result.stderr.startswith("[1/"), result.stderr[:300]
