"""A mask file is an input: its data is checked against the shapes it claims before anything is built from them
(issue 41, classes 11 and 12).

- A 304-byte mask claiming a 60000 x 60000 entry took 4.1 GB before it was refused (``inspect``, ``plan --mask``,
  ``export``): the loader unpacked the claimed shape to count or hash it. Now a bit-packed entry must hold exactly
  ``ceil(numel / 8)`` bytes, and an index-stored entry is hashed block by block: a forged file costs its own size.
- A mask listing one index 500 times was exported and the card counted 500 edited weights: indices must be
  strictly increasing and inside the shape, as ``Mask.save`` writes them.

Every refusal is one line naming the file and the entry (exit 2). docs/reliability.md lists what each test
promises.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from mathneuro_edit.cli.main import main
from mathneuro_edit.engine.mask import Mask
from mathneuro_edit.engine.stats import write_safetensors_with_meta
from mathneuro_edit.errors import InputError

FORMAT = "mathneuro-edit/mask/v1"


def _packed_sha(entries: dict[str, tuple[tuple[int, ...], list[int]]]) -> str:
    """The content hash Mask.save records, computed here on its own: per name (sorted), the shape, then the packed
    bits (little bit order) of the selected positions, streamed so that a huge claimed shape costs nothing."""
    h = hashlib.sha256(FORMAT.encode())
    for name in sorted(entries):
        shape, selected = entries[name]
        h.update(f"\n{name}:{shape}\n".encode())
        numel = 1
        for d in shape:
            numel *= d
        nbytes, chunk = (numel + 7) // 8, 1 << 22
        for lo in range(0, nbytes, chunk):
            block = bytearray(min(chunk, nbytes - lo))
            for i in selected:
                if lo * 8 <= i < (lo + len(block)) * 8:
                    block[i // 8 - lo] |= 1 << (i % 8)
            h.update(bytes(block))
    return h.hexdigest()


def _forge(
    path: Path,
    tensors: dict[str, torch.Tensor],
    shapes: dict[str, list[int]],
    sha: str | None = None,
    selected: dict[str, list[int]] | None = None,
) -> Path:
    """A mask file as an attacker writes it: any stored data, any claimed shapes, a valid hash unless ``sha``."""
    if sha is None:
        sha = _packed_sha({n: (tuple(s), (selected or {}).get(n, [])) for n, s in shapes.items()})
    header = {"shapes": shapes, "meta": {"method": "mathneuro"}, "sha256": sha}
    return write_safetensors_with_meta(path, tensors, FORMAT, header)


def test_the_independent_hash_is_the_one_mask_save_records(tmp_path: Path) -> None:
    dense = torch.zeros(13, 7, dtype=torch.bool)
    dense.view(-1)[[0, 8, 90]] = True
    assert Mask({"w": dense}).sha256 == _packed_sha({"w": ((13, 7), [0, 8, 90])})


def test_a_few_bytes_claiming_a_huge_bit_packed_entry_are_refused_at_once(tmp_path: Path) -> None:
    path = _forge(tmp_path / "m.safetensors", {"bits/w": torch.zeros(8, dtype=torch.uint8)}, {"w": [60000, 60000]})
    assert path.stat().st_size < 400
    with pytest.raises(InputError) as caught:
        Mask.load(path)
    assert str(caught.value) == (
        f"{path}: mask entry 'w' claims shape [60000, 60000] (3,600,000,000 weights: 450,000,000 bytes of bits) "
        "but stores 8 uint8 values; the file is corrupt or was edited: recreate it with `mathneuro-edit mask`"
    )


@pytest.mark.parametrize(
    "stored,shape,phrase",
    [
        (torch.tensor([5] * 500, dtype=torch.int32), [64, 64], "lists index 5 more than once"),
        (torch.tensor([3, 9, 1], dtype=torch.int32), [64, 64], "lists index 1 after 9"),
        (torch.tensor([7, 4096], dtype=torch.int64), [64, 64], "lists index 4,096, outside its 4,096 weights"),
        (torch.tensor([-1, 7], dtype=torch.int32), [64, 64], "lists index -1, outside its 4,096 weights"),
        (torch.arange(65, dtype=torch.int32), [8, 8], "lists 65 indices for its 64 weights"),
        (torch.tensor([1.0, 2.0]), [64, 64], "stores its indices as a torch.float32 tensor"),
        (torch.tensor([[1, 2]], dtype=torch.int32), [64, 64], "tensor of shape [1, 2]"),
        (torch.tensor([1], dtype=torch.int32), [-4, 8], "a negative size"),
    ],
)
def test_index_lists_must_name_each_weight_once_inside_the_shape(
    tmp_path: Path, stored: torch.Tensor, shape: list[int], phrase: str
) -> None:
    chosen = sorted({int(i) for i in stored.reshape(-1).tolist() if 0 <= i < 4096}) if shape == [64, 64] else []
    path = _forge(tmp_path / "m.safetensors", {"idx/w": stored}, {"w": shape}, selected={"w": chosen})
    with pytest.raises(InputError, match=r"^\S+m\.safetensors: mask entry 'w' ") as caught:
        Mask.load(path)
    assert phrase in str(caught.value) and "recreate it with `mathneuro-edit mask`" in str(caught.value)


@pytest.mark.parametrize(
    "stored,phrase",
    [
        (torch.tensor([0, 0b100], dtype=torch.uint8), "selects bits past its 10 weights"),  # bit 10 of 10
        (torch.tensor([0, 0, 0], dtype=torch.uint8), "stores 3 uint8 values"),
        (torch.tensor([0, 1], dtype=torch.int32), "stores 2 int32 values"),
    ],
)
def test_bit_packed_entries_must_fit_their_shape_exactly(tmp_path: Path, stored: torch.Tensor, phrase: str) -> None:
    path = _forge(tmp_path / "m.safetensors", {"bits/w": stored}, {"w": [2, 5]}, sha="0" * 64)
    with pytest.raises(InputError, match="mask entry 'w'") as caught:
        Mask.load(path)
    assert phrase in str(caught.value)


def test_an_unknown_storage_kind_or_an_entry_without_shape_is_refused(tmp_path: Path) -> None:
    path = _forge(tmp_path / "a.safetensors", {"rle/w": torch.zeros(2, dtype=torch.uint8)}, {"w": [4]})
    with pytest.raises(InputError, match="is stored as 'rle', not as bits or idx"):
        Mask.load(path)
    extra = {"bits/w": torch.zeros(1, dtype=torch.uint8), "bits/x": torch.zeros(1, dtype=torch.uint8)}
    path = _forge(tmp_path / "b.safetensors", extra, {"w": [4]})
    with pytest.raises(InputError, match="malformed mask header"):
        Mask.load(path)


def test_masks_mask_save_writes_load_with_their_hash_and_counts(tmp_path: Path) -> None:
    """Both storage kinds, a padded last byte, an empty entry, and an index-stored entry spanning several hash
    blocks (its selected weights on the blocks' edges): the block-wise hash equals Mask.sha256."""
    block_bits = 8 << 20
    big = torch.zeros(2 * block_bits + 77, dtype=torch.bool)
    big[[0, block_bits - 1, block_bits, 2 * block_bits, 2 * block_bits + 76]] = True
    dense = torch.rand(9, 11, generator=torch.Generator().manual_seed(0)) < 0.5
    mask = Mask({"big": big, "dense": dense, "none": torch.zeros(3, 5, dtype=torch.bool)}, {"method": "mathneuro"})
    assert [mask._store[n][0] for n in ("big", "dense", "none")] == ["idx", "bits", "idx"]
    back = Mask.load(mask.save(tmp_path / "m.safetensors"))
    assert back.sha256 == mask.sha256 and back.counts() == mask.counts()
    assert back.counts()["big"] == (5, big.numel()) and back.counts()["dense"][0] == int(dense.sum())
    assert all(torch.equal(back[n], mask[n]) for n in mask)


def test_a_forged_list_is_one_line_for_inspect_and_export_and_nothing_is_written(tmp_path: Path) -> None:
    """The issue's case: one index 500 times, the hash valid: the card would have counted 500 edited weights."""
    name = "model.layers.0.self_attn.q_proj.weight"
    path = _forge(
        tmp_path / "forged.safetensors",
        {f"idx/{name}": torch.tensor([191] * 500, dtype=torch.int32)},
        {name: [64, 64]},
        selected={name: [191]},
    )
    for args in (["inspect", str(path)], ["export", "--mask", str(path), "--out", str(tmp_path / "out"), "-q"]):
        result = CliRunner().invoke(main, args)
        lines = [ln for ln in result.output.splitlines() if ln.strip()]
        assert result.exit_code == 2 and len(lines) == 1, result.output
        assert lines[0].startswith(f"error: {path}: mask entry '{name}' lists index 191 more than once"), lines
    assert not (tmp_path / "out").exists()


def test_loading_forged_masks_costs_their_size_not_their_claims(tmp_path: Path) -> None:
    """In a fresh process, the peak memory while three forged files are refused or loaded: a short bit-packed
    entry claiming 30000 x 30000 (refused), the same claim stored as one index with a valid hash (loaded: it is a
    valid mask of that shape), and with a wrong hash (refused). Unpacking the claim once costs 0.9 GB."""
    claim = [30000, 30000]
    files = [
        _forge(tmp_path / "bits.safetensors", {"bits/w": torch.zeros(8, dtype=torch.uint8)}, {"w": claim}),
        _forge(
            tmp_path / "idx.safetensors",
            {"idx/w": torch.tensor([191], dtype=torch.int32)},
            {"w": claim},
            selected={"w": [191]},
        ),
        _forge(tmp_path / "bad.safetensors", {"idx/w": torch.tensor([191], dtype=torch.int32)}, {"w": claim}, "0" * 64),
    ]
    script = textwrap.dedent(
        """
        import json, resource, sys
        from mathneuro_edit.engine.mask import Mask
        from mathneuro_edit.errors import InputError
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        said = []
        for f in sys.argv[1:]:
            try:
                said.append(Mask.load(f).counts()["w"])
            except InputError as e:
                said.append(str(e))
        grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
        print(json.dumps({"grew_kib": grew, "said": said}))
        """
    )
    proc = subprocess.run([sys.executable, "-c", script, *map(str, files)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    bits, idx, bad = out["said"]
    assert "claims shape [30000, 30000]" in bits and idx == [1, 900_000_000] and "does not match its recorded" in bad
    assert out["grew_kib"] < 150 * 1024, out  # 0.9 GB before


def _never_hashed(monkeypatch: pytest.MonkeyPatch) -> None:
    import mathneuro_edit.engine.mask as mask_module

    def hashing(*args: object) -> str:
        raise AssertionError("the claimed weights were hashed before the claim was refused")

    monkeypatch.setattr(mask_module, "_stored_sha256", hashing)


def test_a_claim_larger_than_any_matrix_is_refused_before_hashing(tmp_path: Path, monkeypatch) -> None:
    """Issue 48, item 3: a 300-byte mask claiming ``lm_head.weight`` of [10^12, 10^12] (one index, a valid-looking
    header) made ``inspect`` and ``export`` hash 1.25e23 bytes of zeros: minutes, then hours. Refused, one line,
    before the hash is computed."""
    name = "lm_head.weight"
    path = _forge(
        tmp_path / "huge.safetensors",
        {f"idx/{name}": torch.tensor([191], dtype=torch.int32)},
        {name: [10**12] * 2},
        "0" * 64,
    )
    assert path.stat().st_size < 400
    _never_hashed(monkeypatch)
    with pytest.raises(InputError) as caught:
        Mask.load(path)
    assert str(caught.value) == (
        f"{path}: mask entry '{name}' claims shape [1000000000000, 1000000000000] (about 1e+24 weights), more than any model's "
        "matrix holds (at most 68,719,476,736); the file is corrupt or was edited: recreate it with "
        "`mathneuro-edit mask`"
    )
    for args in (["inspect", str(path)], ["export", "--mask", str(path), "--out", str(tmp_path / "out"), "-q"]):
        result = CliRunner().invoke(main, args)
        lines = [ln for ln in result.output.splitlines() if ln.strip()]
        assert result.exit_code == 2 and len(lines) == 1, result.output
        assert lines[0].startswith(f"error: {path}: mask entry '{name}' claims shape [1000000000000, 1000000000000]"), (
            lines
        )
    assert not (tmp_path / "out").exists()


def test_many_entries_claiming_more_than_any_model_are_refused_before_hashing(tmp_path: Path, monkeypatch) -> None:
    """Each entry under the per-matrix bound, together more weights than any model holds (2^41)."""
    shapes = {f"w{i}": [1 << 18, 1 << 18] for i in range(40)}  # 40 x 2^36 = 2.7e12 weights
    tensors = {f"idx/{n}": torch.tensor([1], dtype=torch.int32) for n in shapes}
    path = _forge(tmp_path / "many.safetensors", tensors, shapes, "0" * 64)
    _never_hashed(monkeypatch)
    with pytest.raises(InputError, match=r"the mask's 40 entries claim 2,748,779,069,440 weights, more than any model"):
        Mask.load(path)
