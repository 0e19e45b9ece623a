"""Baked checkpoint export: loads with plain transformers, equals the in-memory edit, streams, is atomic."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from mathneuro_edit import InputError, Mask, apply_mask
from mathneuro_edit.weights import checkpoint_writer as export_mod
from mathneuro_edit.weights.audit import verify
from mathneuro_edit.weights.checkpoint_writer import export_checkpoint
from mathneuro_edit.weights.shards import Stopped
from tests._models import (
    hash_tree,
    load_tiny,
    sample_ids,
    save_tiny,
    tiny_mask,
)
from tests._tiny import FAMILIES

SCALE = 1.1
COPIED = [
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "notes.txt",
]


class Base:
    """A saved tiny base (unsharded and sharded copies of the same weights), its mask and expectations."""

    def __init__(self, root: Path, family: str) -> None:
        self.family = family
        self.folders = {
            False: save_tiny(root / f"{family}-single", family),
            True: save_tiny(root / f"{family}-sharded", family, sharded=True),
        }
        model = load_tiny(self.folders[False])
        self.base_state = {k: v.clone() for k, v in model.state_dict().items()}
        self.base_logits = model(sample_ids()).logits
        self.mask = tiny_mask(model)
        apply_mask(model, self.mask, SCALE)
        self.edited_state = {k: v.clone() for k, v in model.state_dict().items()}
        self.edited_logits = model(sample_ids()).logits


@pytest.fixture(scope="module")
def bases(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("bases")
    cache: dict[str, Base] = {}

    def get(family: str) -> Base:
        if family not in cache:
            cache[family] = Base(root, family)
        return cache[family]

    return get


def _tensors(folder: Path) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for f in sorted(folder.glob("model*.safetensors")):
        out.update(load_file(str(f)))
    return out


def _bits(t: torch.Tensor) -> torch.Tensor:
    """Each entry's bit pattern (so -0.0 != +0.0): a bit-for-bit comparison per entry."""
    return t.contiguous().view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


@pytest.mark.parametrize("sharded", [False, True], ids=["single", "sharded"])
@pytest.mark.parametrize("family", FAMILIES)
def test_export_loads_with_plain_transformers_and_equals_in_memory_edit(bases, tmp_path, family, sharded):
    b = bases(family)
    base = b.folders[sharded]
    before = hash_tree(base)
    out = export_checkpoint(base, b.mask, SCALE, tmp_path / "out")
    assert hash_tree(base) == before  # the base is only read

    model = load_tiny(out)  # plain transformers
    state = model.state_dict()
    assert state.keys() == b.edited_state.keys()
    for k, v in b.edited_state.items():
        assert torch.equal(state[k], v), k  # bit-for-bit the in-memory apply_mask result
    logits = model(sample_ids()).logits
    assert torch.equal(logits, b.edited_logits)
    assert not torch.equal(logits, b.base_logits)  # the edit did something

    # same tensor names, shapes and dtypes; every entry's bits unchanged except the edited ones: the number of
    # changed entries in the files equals the number changed in memory (files hold each parameter entry once)
    base_t, out_t = _tensors(base), _tensors(out)
    assert base_t.keys() == out_t.keys()
    assert all((base_t[k].dtype, base_t[k].shape) == (out_t[k].dtype, out_t[k].shape) for k in base_t)
    in_files = sum(int((_bits(out_t[k]) != _bits(base_t[k])).sum()) for k in base_t)
    in_memory = sum(int((_bits(b.edited_state[k]) != _bits(v)).sum()) for k, v in b.base_state.items())
    assert in_files == in_memory > 0
    assert sorted(p.name for p in base.glob("*.safetensors")) == sorted(p.name for p in out.glob("*.safetensors"))
    if sharded:
        base_index = json.loads((base / "model.safetensors.index.json").read_text())
        out_index = json.loads((out / "model.safetensors.index.json").read_text())
        assert out_index["weight_map"] == base_index["weight_map"]
        assert out_index["metadata"]["total_size"] == base_index["metadata"]["total_size"]
    else:
        assert not (out / "model.safetensors.index.json").exists()
    report = verify(out, base, b.mask, SCALE)
    assert report.ok, report.summary()
    assert report.edited > 0


def test_unedited_tensors_byte_identical_and_files_copied(bases, tmp_path):
    b = bases("llama")
    base = b.folders[True]
    # weights in other formats and stray safetensors must not be copied: they would disagree with the edit
    extra = tmp_path / "base"
    import shutil

    shutil.copytree(base, extra)
    (extra / "pytorch_model.bin").write_bytes(b"not really a pickle")
    save_file({"x": torch.zeros(2)}, str(extra / "consolidated.safetensors"))
    (extra / "sub").mkdir()
    (extra / "sub" / "params.json").write_text("{}")
    out = export_checkpoint(extra, b.mask, SCALE, tmp_path / "out")
    for name in COPIED + ["sub/params.json"]:
        if name != "tokenizer_config.json":
            assert (out / name).read_bytes() == (extra / name).read_bytes(), name
    # the published tokenizer config is the base's without what only described its local copy
    base_tok = json.loads((extra / "tokenizer_config.json").read_text())
    assert base_tok.get("is_local") is not None or base_tok.get("model_max_length", 0) >= 1e29  # the fixture has some
    want = {
        k: v
        for k, v in base_tok.items()
        if k not in ("is_local", "local_files_only") and not (k == "model_max_length" and v >= 1e29)
    }
    assert json.loads((out / "tokenizer_config.json").read_text()) == want
    for name in ("README.md", "pytorch_model.bin", "consolidated.safetensors"):
        assert not (out / name).exists(), name
    base_t, out_t = _tensors(extra), _tensors(out)
    for name, t in base_t.items():
        if name not in b.mask:  # llama: checkpoint names are the parameter names
            assert torch.equal(_bits(out_t[name]), _bits(t)), name
        else:
            assert not torch.equal(out_t[name], t), name
    with safe_open(str(next(out.glob("model-*.safetensors"))), "pt") as f:
        meta = f.metadata()
    assert meta["format"] == "pt" and meta["mathneuro_edit_mask_sha256"] == b.mask.sha256
    assert meta["mathneuro_edit_scale"] == repr(SCALE) and meta["mathneuro_edit_version"]
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(out)
    assert tok.chat_template and tok("2 + 2")["input_ids"]


def test_max_shard_size_reshards_and_still_loads(bases, tmp_path):
    b = bases("llama")
    out = export_checkpoint(b.folders[False], b.mask, SCALE, tmp_path / "out", max_shard_size="20KB")
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1
    state = load_tiny(out).state_dict()
    assert all(torch.equal(state[k], v) for k, v in b.edited_state.items())
    assert verify(out, b.folders[False], b.mask, SCALE).ok


def test_gpt2_checkpoint_without_prefix(bases, tmp_path):
    """Old GPT-2 checkpoints store h.0... for transformer.h.0...: the export keeps the base's names."""
    b = bases("gpt2")
    base = tmp_path / "old"
    import shutil

    shutil.copytree(b.folders[False], base)
    tensors = load_file(str(base / "model.safetensors"))
    save_file(
        {k.removeprefix("transformer."): v for k, v in tensors.items()},
        str(base / "model.safetensors"),
        metadata={"format": "pt"},
    )
    out = export_checkpoint(base, b.mask, SCALE, tmp_path / "out")
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        assert not any(k.startswith("transformer.") for k in f.keys())
    state = load_tiny(out).state_dict()
    assert all(torch.equal(state[k], v) for k, v in b.edited_state.items())


def test_mask_on_a_tied_lm_head_edits_the_stored_embedding(bases, tmp_path):
    """Gemma2 saves a tied lm_head once (as the embedding): the edit goes there, as apply_mask's does in memory."""
    b = bases("gemma2")
    model = load_tiny(b.folders[True])
    shape = tuple(model.lm_head.weight.shape)
    mask = Mask({"lm_head.weight": torch.rand(shape, generator=torch.Generator().manual_seed(0)) < 0.2})
    out = export_checkpoint(b.folders[True], mask, 0.0, tmp_path / "out")
    apply_mask(model, mask, 0.0)
    loaded = load_tiny(out)
    assert loaded.lm_head.weight is loaded.model.embed_tokens.weight  # still tied
    assert torch.equal(loaded.model.embed_tokens.weight, model.model.embed_tokens.weight)
    assert torch.equal(loaded(sample_ids()).logits, model(sample_ids()).logits)
    assert verify(out, b.folders[True], mask, 0.0).ok


def test_base_that_is_neither_a_folder_nor_reachable_is_one_clear_error(bases, tmp_path, monkeypatch):
    import huggingface_hub.constants

    b = bases("llama")
    with pytest.raises(InputError, match="no such local folder"):
        export_checkpoint(str(tmp_path / "missing" / "dir"), b.mask, SCALE, tmp_path / "out")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # the Hub code path, offline
    with pytest.raises(InputError, match="Hugging Face Hub") as err:
        export_checkpoint("some-org/some-model", b.mask, SCALE, tmp_path / "out")
    assert "\n" not in str(err.value)
    assert not (tmp_path / "out").exists()


def test_failure_midway_leaves_nothing_and_base_intact(bases, tmp_path, monkeypatch):
    b = bases("qwen2")
    base = b.folders[True]
    before = hash_tree(base)
    real, calls = export_mod._write_shard, []

    def failing(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise OSError("disk full (injected)")
        return real(*args, **kwargs)

    monkeypatch.setattr(export_mod, "_write_shard", failing)
    with pytest.raises(OSError, match="injected"):
        export_checkpoint(base, b.mask, SCALE, tmp_path / "out")
    assert len(calls) == 2
    assert not (tmp_path / "out").exists()
    assert [p.name for p in tmp_path.iterdir()] == []  # no temporary folder left behind
    assert hash_tree(base) == before


def _pickle_base(b: Base, folder: Path) -> Path:
    """The unsharded base's weights saved as one ``pytorch_model.bin`` (plus its support files)."""
    folder.mkdir()
    for name in COPIED:
        (folder / name).write_bytes((b.folders[False] / name).read_bytes())
    torch.save(load_file(str(b.folders[False] / "model.safetensors")), folder / "pytorch_model.bin")
    return folder


@pytest.mark.parametrize("case", ["qwen2-sharded", "qwen3_moe-sharded", "mixtral-reshard", "llama-pickle-reshard"])
def test_parallel_export_is_byte_identical_to_sequential(bases, tmp_path, case):
    """workers=3 writes the same files, bytes and index as workers=1 (fused MoE masks span several shards)."""
    family, kind = case.split("-", 1)
    b = bases(family)
    kwargs: dict = {"max_shard_size": "20KB"} if kind.endswith("reshard") else {}
    base = b.folders[kind == "sharded"]
    if kind.startswith("pickle"):
        base, kwargs["allow_pickle"] = _pickle_base(b, tmp_path / "pickle"), True
    before = hash_tree(base)
    seq = export_checkpoint(base, b.mask, SCALE, tmp_path / "seq", **kwargs)
    par = export_checkpoint(base, b.mask, SCALE, tmp_path / "par", workers=3, **kwargs)
    assert hash_tree(base) == before
    assert len(list(seq.glob("model-*.safetensors"))) > 3  # enough shards for 3 workers
    assert hash_tree(par) == hash_tree(seq)  # same file names, same bytes (shards, index, copied files)
    state = load_tiny(par).state_dict()
    assert all(torch.equal(state[k], v) for k, v in b.edited_state.items())


def test_parallel_export_runs_at_most_workers_shards_at_once(bases, tmp_path, monkeypatch):
    b = bases("qwen2")
    real, lock, calls, active, peak = export_mod._write_shard, threading.Lock(), [], [0], [0]
    together = threading.Barrier(3, timeout=30)  # breaks (fails the export) unless the first 3 shards run at once

    def counting(*args, **kwargs):
        with lock:
            calls.append(args[0].name)
            k = len(calls)
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        try:
            if k <= 3:
                together.wait()
            return real(*args, **kwargs)
        finally:
            with lock:
                active[0] -= 1

    monkeypatch.setattr(export_mod, "_write_shard", counting)
    out = export_checkpoint(b.folders[True], b.mask, SCALE, tmp_path / "out", workers=3)
    assert peak[0] == 3  # 3 at once, never more
    assert sorted(calls) == sorted(p.name for p in b.folders[True].glob("model-*.safetensors"))  # each shard once
    assert verify(out, b.folders[True], b.mask, SCALE).ok


def test_failure_in_one_worker_stops_the_others_and_leaves_nothing(bases, tmp_path, monkeypatch):
    b = bases("qwen2")
    base = b.folders[True]
    before = hash_tree(base)
    n_shards = len(list(base.glob("model-*.safetensors")))
    real, lock, calls, stopped = export_mod._write_shard, threading.Lock(), [], []

    def failing(*args, stop, **kwargs):
        with lock:
            calls.append(args[0].name)
            k = len(calls)
        if k == 2:
            time.sleep(0.1)  # let the other workers start their shards
            raise OSError("disk full (injected)")
        assert stop.wait(30), "the failure did not stop this worker"
        try:
            real(*args, stop=stop, **kwargs)  # sees the stop flag before its first tensor
        except Stopped:
            stopped.append(k)
            raise

    monkeypatch.setattr(export_mod, "_write_shard", failing)
    with pytest.raises(OSError, match="injected"):
        export_checkpoint(base, b.mask, SCALE, tmp_path / "out", workers=3)
    assert n_shards > 4 and 3 <= len(calls) <= 4  # running shards stopped, queued ones never started
    assert len(stopped) == len(calls) - 1
    assert not [t for t in threading.enumerate() if t.name.startswith("mathneuro-edit-shard")]  # all joined
    assert [p.name for p in tmp_path.iterdir()] == []  # no output, no temporary folder left behind
    assert hash_tree(base) == before


@pytest.mark.parametrize("workers", [0, -2, 2.0, "3", True, None])
def test_bad_workers_is_one_clear_error(bases, tmp_path, workers):
    b = bases("qwen2")
    with pytest.raises(InputError, match="workers: must be an integer >= 1") as err:
        export_checkpoint(b.folders[True], b.mask, SCALE, tmp_path / "out", workers=workers)
    assert "\n" not in str(err.value)
    assert not (tmp_path / "out").exists()


def test_refuses_existing_output_unless_overwrite(bases, tmp_path):
    b = bases("qwen2")
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.txt").write_text("old")
    with pytest.raises(InputError, match="already exists"):
        export_checkpoint(b.folders[False], b.mask, SCALE, out)
    assert (out / "old.txt").exists()
    export_checkpoint(b.folders[False], b.mask, SCALE, out, overwrite=True)
    assert not (out / "old.txt").exists() and (out / "model.safetensors").exists()
    with pytest.raises(InputError, match="overlaps"):
        export_checkpoint(b.folders[False], b.mask, SCALE, b.folders[False] / "inside", overwrite=True)


def test_pickle_base_refused_unless_allowed(bases, tmp_path):
    b = bases("llama")
    base = _pickle_base(b, tmp_path / "pickle")
    with pytest.raises(InputError, match="safe_serialization=True"):
        export_checkpoint(base, b.mask, SCALE, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    out = export_checkpoint(base, b.mask, SCALE, tmp_path / "out", allow_pickle=True)
    assert (out / "model.safetensors").exists() and not (out / "pytorch_model.bin").exists()
    state = load_tiny(out).state_dict()
    assert all(torch.equal(state[k], v) for k, v in b.edited_state.items())


def test_mask_that_does_not_fit_or_map_is_an_error_naming_the_parameter(bases, tmp_path):
    b = bases("llama")
    with pytest.raises(InputError, match="c_attn"):  # another family's mask
        export_checkpoint(b.folders[False], bases("gpt2").mask, SCALE, tmp_path / "out1")
    wrong_shape = Mask({"model.layers.0.self_attn.q_proj.weight": torch.ones(3, 3, dtype=torch.bool)})
    with pytest.raises(InputError, match="q_proj"):
        export_checkpoint(b.folders[False], wrong_shape, SCALE, tmp_path / "out1")
    # a checkpoint lacking a tensor the mask edits: a clear error, never a silent skip
    base = tmp_path / "broken"
    import shutil

    shutil.copytree(b.folders[False], base)
    tensors = load_file(str(base / "model.safetensors"))
    missing = "model.layers.1.mlp.down_proj.weight"
    del tensors[missing]
    save_file(tensors, str(base / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(InputError, match=missing.replace(".", r"\.")):
        export_checkpoint(base, b.mask, SCALE, tmp_path / "out2")
    assert not (tmp_path / "out2").exists()


def test_verify_reports_every_difference(bases, tmp_path):
    b = bases("mixtral")  # per-expert checkpoint tensors mapped from fused masks
    base = b.folders[False]
    out = export_checkpoint(base, b.mask, SCALE, tmp_path / "out")
    assert verify(out, base, b.mask, SCALE).ok
    assert not verify(out, base, b.mask, 1.2).ok  # another scale is not this export
    tensors = load_file(str(out / "model.safetensors"))
    edited = "model.layers.0.block_sparse_moe.experts.1.w1.weight"
    untouched = "model.norm.weight"
    tensors[edited] = tensors[edited].clone()
    tensors[edited].view(-1)[0] += 1
    tensors[untouched] = tensors[untouched] + 1
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        meta = f.metadata()
    save_file(tensors, str(out / "model.safetensors"), metadata=meta)
    (out / "notes.txt").unlink()
    (out / "tokenizer.json").write_text("{}")
    report = verify(out, base, b.mask, SCALE)
    assert not report.ok
    text = report.summary()
    for needle in (edited, untouched, "notes.txt", "tokenizer.json"):
        assert needle in text, (needle, text)


CHECK = r"""
import sys, torch
from transformers import AutoModelForCausalLM
from peft import PeftModel
from safetensors.torch import load_file
base, baked, adapter, expected = sys.argv[1:5]
ids = load_file(expected)["ids"]
want = load_file(expected)["logits"]
m = AutoModelForCausalLM.from_pretrained(baked).eval()
assert torch.equal(m(ids).logits, want), "baked logits differ"
p = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), adapter).eval()
assert torch.allclose(p(ids).logits, want, atol=1e-5), "adapter logits differ"
merged = p.merge_and_unload()
sd = m.state_dict()
assert all(torch.equal(v, sd[k]) for k, v in merged.state_dict().items()), "merged weights differ"
assert "mathneuro_edit" not in sys.modules
print("OK")
"""


def test_outputs_load_in_a_process_without_mathneuro_edit(bases, tmp_path):
    from mathneuro_edit.weights.adapter import export_adapter

    b = bases("qwen2")
    base = b.folders[True]
    baked = export_checkpoint(base, b.mask, SCALE, tmp_path / "baked")
    adapter = export_adapter(base, b.mask, SCALE, tmp_path / "adapter").path
    save_file({"ids": sample_ids(), "logits": b.edited_logits.detach()}, str(tmp_path / "expected.safetensors"))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": ""}
    proc = subprocess.run(
        [sys.executable, "-c", CHECK, str(base), str(baked), str(adapter), str(tmp_path / "expected.safetensors")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stderr[-2000:]
