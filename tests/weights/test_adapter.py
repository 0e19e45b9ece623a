"""Sparse delta adapter: stock PEFT loads it, merging gives the baked checkpoint bit for bit, refusals are loud."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from peft import PeftModel
from safetensors.torch import load_file, save_file

from mathneuro_edit import InputError, Mask
from mathneuro_edit.engine.apply import edited_values
from mathneuro_edit.weights.adapter import exact_delta, export_adapter, load_edited
from mathneuro_edit.weights.audit import verify
from mathneuro_edit.weights.checkpoint_writer import export_checkpoint
from tests._models import hash_tree, load_tiny, sample_ids, save_tiny, tiny_mask

INT = {2: torch.int16, 4: torch.int32, 8: torch.int64}


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(INT[t.element_size()])


class Case:
    """A saved base, its mask and the baked reference (export_checkpoint loaded with plain transformers)."""

    def __init__(self, root: Path, family: str, dtype: torch.dtype) -> None:
        self.base = save_tiny(root / f"{family}-{str(dtype)[6:]}", family, dtype=dtype, sharded=True)
        self.mask = tiny_mask(load_tiny(self.base))
        self.root = root
        self._baked: dict[tuple[float, tuple[str, ...]], tuple[dict, torch.Tensor]] = {}

    def baked(self, scale: float, mask: Mask | None = None) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        mask = mask or self.mask
        key = (scale, tuple(mask))
        if key not in self._baked:
            out = export_checkpoint(self.base, mask, scale, self.root / f"baked-{len(os.listdir(self.root))}")
            model = load_tiny(out)
            self._baked[key] = ({k: v.clone() for k, v in model.state_dict().items()}, model(sample_ids()).logits)
        return self._baked[key]


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("adapter-bases")
    cache: dict[tuple[str, torch.dtype], Case] = {}

    def get(family: str, dtype: torch.dtype = torch.float32) -> Case:
        if (family, dtype) not in cache:
            cache[(family, dtype)] = Case(root, family, dtype)
        return cache[(family, dtype)]

    return get


def _assert_same_state(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert got.keys() == want.keys()
    for k, v in want.items():
        assert torch.equal(_bits(got[k]), _bits(v)), k


@pytest.mark.parametrize(
    "family,dtype,scale",
    [
        ("llama", torch.float32, 1.1),
        ("llama", torch.bfloat16, 1.1),
        ("qwen2", torch.bfloat16, 0.0),
        ("gemma2", torch.float32, 1.1),
        ("gemma2", torch.bfloat16, 1.5),
    ],
)
def test_peft_adapter_round_trip_is_exact(cases, tmp_path, family, dtype, scale):
    c = cases(family, dtype)
    before = hash_tree(c.base)
    info = export_adapter(c.base, c.mask, scale, tmp_path / "adapter")
    assert hash_tree(c.base) == before
    assert info.format == "peft" and sorted(os.listdir(info.path)) == [
        "adapter_config.json",
        "adapter_model.safetensors",
    ]
    assert 0 < info.adapter_bytes < info.checkpoint_bytes and info.size_ratio < 1
    assert info.edited_entries == c.mask.total()[0] <= info.stored_entries
    baked_state, baked_logits = c.baked(scale)

    peft_model = PeftModel.from_pretrained(load_tiny(c.base), info.path).eval()  # stock PEFT
    logits = peft_model(sample_ids()).logits  # unmerged forward
    assert torch.allclose(logits.float(), baked_logits.float(), rtol=0, atol=1e-6)
    _assert_same_state(peft_model.merge_and_unload().state_dict(), baked_state)
    # PEFT without upcasting the adapter (16-bit deltas added in the base dtype) is exact too
    plain = PeftModel.from_pretrained(load_tiny(c.base), info.path, autocast_adapter_dtype=False)
    _assert_same_state(plain.merge_and_unload().state_dict(), baked_state)
    _assert_same_state(load_edited(c.base, info.path).state_dict(), baked_state)
    report = verify(info.path, c.base, c.mask, scale)
    assert report.ok and report.kind == "peft", report.summary()


def test_shira_layout_padding_is_negative_zero_at_unmasked_positions(cases, tmp_path):
    c = cases("llama", torch.bfloat16)
    info = export_adapter(c.base, c.mask, 1.1, tmp_path / "adapter")
    tensors = load_file(str(info.path / "adapter_model.safetensors"))
    counts = c.mask.counts()
    layers = [n for n in c.mask if counts[n][0]]
    assert info.r is not None and len(tensors) == 2 * len(layers)
    for name in layers:
        prefix = "base_model.model." + name.removesuffix(".weight")
        idx, val = tensors[f"{prefix}.shira_indices"].long(), tensors[f"{prefix}.shira_weight"]
        m = c.mask[name]
        assert idx.dtype == torch.int64 and val.dtype == torch.bfloat16
        assert val.numel() == info.r * sum(m.shape) and idx.shape == (2, val.numel())
        flat = idx[0] * m.shape[1] + idx[1]
        assert flat.unique().numel() == flat.numel()  # no duplicate positions
        at_mask = m[idx[0], idx[1]]
        assert int(at_mask.sum()) == counts[name][0]  # every masked entry stored
        pad = val[~at_mask]
        assert torch.all(pad == 0) and torch.all(torch.signbit(pad.float()))  # -0.0: x + (-0.0) == x


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("scale", [0.0, 0.5, 0.9, 1.1, 1.5, 2.0])
def test_exact_delta_against_plain_arithmetic(dtype, scale):
    g = torch.Generator().manual_seed(0)
    # magnitudes over many binades (normal numbers in every dtype) and signed zeros: where rounding bites
    w = (torch.randn(64, 48, generator=g) * torch.logspace(-3, 3, 48)).to(dtype)
    w[0, :4] = torch.tensor([0.0, -0.0, 1.0, -1.0], dtype=dtype)
    e = w.clone()
    m = torch.rand(64, 48, generator=g) < 0.3
    m[0, :4] = True
    e[m] = edited_values(w[m], scale)
    idx = m.nonzero()
    d = exact_delta(w, e, idx)
    assert d.dtype == dtype
    w_sel, e_sel = w[m], e[m]
    # independent of PEFT: the sum rounded once to the dtype, computed in float32 and in the dtype itself
    assert torch.equal(_bits((w_sel.float() + d.float()).to(dtype)), _bits(e_sel))
    assert torch.equal(_bits(w_sel + d), _bits(e_sel))


@pytest.mark.parametrize(
    "value,dtype,scale",
    [
        (0.7, torch.float32, 1e-3),  # w + d cannot land on 0.0007 exactly: d's rounding error is ~1e-8
        (-6e-8, torch.float16, 0.5),
    ],  # a subnormal that underflows to -0.0: no x + d (x != 0) gives -0.0
)
def test_no_exact_delta_is_refused_not_approximated(value, dtype, scale):
    w = torch.full((4, 4), value, dtype=dtype)
    e = w.clone()
    m = torch.ones(4, 4, dtype=torch.bool)
    e[m] = edited_values(w[m], scale)
    with pytest.raises(InputError, match="no exact delta"):
        exact_delta(w, e, m.nonzero(), "layer.weight")


@pytest.mark.parametrize("family,needle", [("gpt2", "Conv1D"), ("mixtral", "gate_up_proj")])
def test_peft_refuses_what_it_cannot_express(cases, tmp_path, family, needle):
    c = cases(family)
    with pytest.raises(InputError, match=needle) as err:
        export_adapter(c.base, c.mask, 1.1, tmp_path / "adapter")
    assert "export_checkpoint" in str(err.value) and "format='mathneuro'" in str(err.value)
    assert not (tmp_path / "adapter").exists()


def test_moe_attention_only_mask_is_a_peft_adapter(cases, tmp_path):
    c = cases("mixtral")
    sub = Mask({k: c.mask[k] for k in c.mask if ".self_attn." in k})
    info = export_adapter(c.base, sub, 1.1, tmp_path / "adapter")
    merged = PeftModel.from_pretrained(load_tiny(c.base), info.path).merge_and_unload()
    _assert_same_state(merged.state_dict(), c.baked(1.1, sub)[0])


@pytest.mark.parametrize("family", ["gpt2", "qwen3_moe"])
def test_mathneuro_format_loads_with_load_edited_only(cases, tmp_path, family):
    c = cases(family)
    info = export_adapter(c.base, c.mask, 1.1, tmp_path / "adapter", format="mathneuro")
    assert info.format == "mathneuro" and info.adapter_bytes < info.checkpoint_bytes
    assert not (info.path / "adapter_config.json").exists()  # stock PEFT refuses it: never half applied
    with pytest.raises(ValueError, match="adapter_config.json"):
        PeftModel.from_pretrained(load_tiny(c.base), info.path)
    _assert_same_state(load_edited(c.base, info.path).state_dict(), c.baked(1.1)[0])
    assert verify(info.path, c.base, c.mask, 1.1).ok
    assert not verify(info.path, c.base, c.mask, 0.0).ok


def test_verify_catches_a_tampered_adapter(cases, tmp_path):
    c = cases("llama")
    info = export_adapter(c.base, c.mask, 1.1, tmp_path / "adapter")
    path = info.path / "adapter_model.safetensors"
    tensors = load_file(str(path))
    key = next(k for k in tensors if k.endswith("shira_weight"))
    tensors[key] = tensors[key].clone()
    tensors[key][tensors[key] != 0] += 0.5  # change real deltas, not padding
    save_file(tensors, str(path), metadata={"format": "pt"})
    report = verify(info.path, c.base, c.mask, 1.1)
    assert not report.ok and key.removeprefix("base_model.model.").split(".shira")[0] in report.summary()


def test_adapter_refuses_existing_output(cases, tmp_path):
    c = cases("llama")
    (tmp_path / "adapter").mkdir()
    with pytest.raises(InputError, match="already exists"):
        export_adapter(c.base, c.mask, 1.1, tmp_path / "adapter")
    with pytest.raises(InputError, match="format"):
        export_adapter(c.base, c.mask, 1.1, tmp_path / "other", format="lora")  # type: ignore[arg-type]


def test_adapter_records_the_hub_id_of_a_base_in_the_hub_cache(cases, tmp_path):
    import json
    import shutil

    c = cases("llama")
    cached = tmp_path / "hub" / "models--some-org--some-model" / "snapshots" / "0123abcd"
    shutil.copytree(c.base, cached)
    info = export_adapter(cached, c.mask, 1.1, tmp_path / "adapter")
    cfg = json.loads((info.path / "adapter_config.json").read_text())
    assert cfg["base_model_name_or_path"] == "some-org/some-model" and cfg["peft_type"] == "SHIRA"
    assert cfg["task_type"] == "CAUSAL_LM" and cfg["mask_type"] == "mathneuro_edit"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_exports_and_audits_a_row_at_a_time_give_the_same_bytes_and_verdicts(cases, tmp_path, monkeypatch, dtype):
    """The adapter writer and both audits read a block of rows at a time (bounded memory on an 8B lm_head);
    one-row blocks must give the files and verdicts of whole-matrix blocks, and still catch one changed entry."""
    from mathneuro_edit.weights import edit_plan

    c = cases("llama", dtype)
    whole = export_adapter(c.base, c.mask, 1.1, tmp_path / "whole")
    baked = export_checkpoint(c.base, c.mask, 1.1, tmp_path / "baked")
    monkeypatch.setattr(edit_plan, "ROW_BLOCK_BYTES", 1)  # one row per block
    rows = export_adapter(c.base, c.mask, 1.1, tmp_path / "rows")
    assert hash_tree(rows.path) == hash_tree(whole.path)
    assert verify(rows.path, c.base, c.mask, 1.1).ok
    assert verify(baked, c.base, c.mask, 1.1).ok

    # one delta of the last selected row, and one entry of the last row of an edited baked tensor
    path = rows.path / "adapter_model.safetensors"
    tensors = load_file(str(path))
    key = next(k for k in sorted(tensors) if k.endswith("shira_indices"))
    idx, values = tensors[key], tensors[key.replace("indices", "weight")]
    last = int((values != 0).nonzero()[-1])
    values[last] += 0.5
    save_file(tensors, str(path), metadata={"format": "pt"})
    report = verify(rows.path, c.base, c.mask, 1.1)
    assert not report.ok and key.removeprefix("base_model.model.").split(".shira")[0] in report.summary()
    assert int(idx[0, last]) > 0  # the changed entry is not in the first row block

    name = next(n for n in c.mask if n.endswith("q_proj.weight"))
    shard = next(p for p in sorted(Path(baked).glob("*.safetensors")) if name in load_file(str(p)))
    state = load_file(str(shard))
    state[name][-1, -1] += 1.0
    save_file(state, str(shard), metadata=dict(safe_open_metadata(shard)))
    report = verify(baked, c.base, c.mask, 1.1)
    assert not report.ok and f"{name}: 1 of" in report.summary()


def safe_open_metadata(path: Path) -> dict[str, str]:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        return f.metadata() or {}
