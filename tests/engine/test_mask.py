"""The mask: selection against independent reference code, and the Mask artifact.

Selection (per matrix and per row, both top-k selectors, heavy ties, the ``wanda`` statistic, every general set
subtracted, ``method="random"``, low-precision weights, one call for several ``top_k``) is compared with a
reference that shares no code with :mod:`mathneuro_edit.engine.mask`: scores are ``|W| * stat`` (one float32
product, the quantity the package ranks), and the top-k is a plain Python sort by ``(-score, flat index)``. The
defaults and the recorded meta, the errors for bad inputs and for general sets from another model, a lazy weight
mapping read once per tensor, the Mask's counts, content hash, storage encoding, file round trip and the
disk-full message of Mask.save are checked against values written out here.

Hand-applied changes this file must catch (docs/testing.md, "Mutations the suite must catch"):

- row granularity picking the lowest k of each row -> ``test_row_granularity_matches_reference_top_k_per_row``;
- ``statistic="wanda"`` silently using the L2 statistic -> ``test_wanda_statistic_is_abs_w_times_sqrt_sq_sum``;
- only the first general set subtracted -> ``test_every_general_set_is_subtracted_union``.

Everything here runs in about a second: scripts/mutation.sh runs this file against engine/mask.py and
engine/topk.py. (Consistency's Jaccard: tests/runs/test_consistency.py.)
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
import torch

from mathneuro_edit import ActivationStats, InputError, Target, find_math_params
from mathneuro_edit.engine.mask import Mask
from mathneuro_edit.engine.topk import top_fraction, top_fraction_flat
from tests._faults import fill_disk


# ----------------------------------------------------------------------------------------------------------
# THE COUNT RULE, in one place (the released code's ``int(n * top_k)``: truncation, zero allowed). When the
# package's rule changes, change only this function.
# ----------------------------------------------------------------------------------------------------------
def _ref_count(n: int, top_k: float) -> int:
    """Entries kept out of ``n`` compared ones for a fraction ``top_k`` (docs/method.md, step 2): the released
    MathNeuro code's ``keep_num = int(num_params * keep_ratio)`` (a float product, truncated; 0 is allowed)."""
    return int(n * top_k)


# ----------------------------------------------------------------------------------------------------------
# reference selection (Python sort; ties to the lower flat index)
# ----------------------------------------------------------------------------------------------------------
def _ref_top_list(values: list[float], k: int) -> set[int]:
    """Indices of the ``k`` largest values, ties to the lower index."""
    return set(sorted(range(len(values)), key=lambda i: (-values[i], i))[:k])


def _ref_top(scores: torch.Tensor, top_k: float, granularity: str) -> torch.Tensor:
    """``scores`` ``(d_out, d_in)`` -> bool mask of the reference top-k per matrix or per row."""
    d_out, d_in = scores.shape
    out = torch.zeros(d_out, d_in, dtype=torch.bool)
    if granularity == "row":
        for r in range(d_out):
            for j in _ref_top_list(scores[r].tolist(), _ref_count(d_in, top_k)):
                out[r, j] = True
    else:
        flat = scores.reshape(-1).tolist()
        for i in _ref_top_list(flat, _ref_count(len(flat), top_k)):
            out[i // d_in, i % d_in] = True
    return out


def _ref_scores(w: torch.Tensor, stat: torch.Tensor) -> torch.Tensor:
    return w.float().abs() * stat.float()[None, :]  # (d_out, d_in) float32, the ranked quantity


# ----------------------------------------------------------------------------------------------------------
# synthetic statistics: a linear, a Conv1D and a transposed fused-experts weight
# ----------------------------------------------------------------------------------------------------------
D_OUT, D_IN, EXPERTS = 6, 10, 2
TARGETS = {
    "lin.weight": Target("lin.weight", "linear", "lin", (D_OUT, D_IN)),
    "conv.weight": Target("conv.weight", "conv1d", "conv", (D_IN, D_OUT)),
    "moe.experts.down_proj": Target(
        "moe.experts.down_proj", "experts", "moe.experts", (EXPERTS, D_IN, D_OUT), transposed=True, role="down"
    ),
    "moe.experts.gate_up_proj": Target(
        "moe.experts.gate_up_proj", "experts", "moe.experts", (EXPERTS, D_OUT, D_IN), role="up"
    ),
}


def _canonical(seed: int, ties: bool) -> dict[str, list[torch.Tensor]]:
    """name -> list over groups of ``(d_out, d_in)`` matrices (the reference's own view)."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, t in TARGETS.items():
        mats = []
        for _ in range(t.groups):
            m = torch.randn(D_OUT, D_IN, generator=g)
            if ties:  # few distinct magnitudes (zeros included): ties everywhere, also at the threshold
                m = torch.randint(-2, 3, (D_OUT, D_IN), generator=g).float()
            mats.append(m)
        out[name] = mats
    return out


def _stored(canon: dict[str, list[torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The weights in each target's own storage layout."""
    return {
        "lin.weight": canon["lin.weight"][0].clone(),
        "conv.weight": canon["conv.weight"][0].t().contiguous(),
        "moe.experts.down_proj": torch.stack(canon["moe.experts.down_proj"]).transpose(1, 2).contiguous(),
        "moe.experts.gate_up_proj": torch.stack(canon["moe.experts.gate_up_proj"]).clone(),
    }


def _stats(seed: int, ties: bool = False) -> ActivationStats:
    g = torch.Generator().manual_seed(seed)
    norm, sq, count = {}, {}, {}
    for name, t in TARGETS.items():
        if ties:
            norm[name] = torch.randint(1, 3, t.stat_shape, generator=g).float()
            sq[name] = torch.randint(1, 5, t.stat_shape, generator=g).float()
        else:
            norm[name] = torch.rand(t.stat_shape, generator=g) * 4
            sq[name] = torch.rand(t.stat_shape, generator=g) * 16
        count[name] = torch.full((t.groups,), 7, dtype=torch.int64)
    return ActivationStats(norm, sq, count, dict(TARGETS), {"model_fingerprint": "synthetic"})


def _to_stored(name: str, mats: list[torch.Tensor]) -> torch.Tensor:
    if name == "lin.weight":
        return mats[0]
    if name == "conv.weight":
        return mats[0].t()
    return torch.stack(mats).transpose(1, 2) if TARGETS[name].transposed else torch.stack(mats)


def _reference_mask(canon, math_stats, generals, top_k, granularity="matrix", statistic="l2"):
    """name -> bool tensor in storage layout: top(math) AND NOT (top(g1) OR top(g2) ...)."""

    def stat(s: ActivationStats, name: str, g: int) -> torch.Tensor:
        return s.norm_sum[name][g] if statistic == "l2" else torch.sqrt(s.sq_sum[name][g])

    result = {}
    for name, mats in canon.items():
        sels = []
        for g, w in enumerate(mats):
            sel = _ref_top(_ref_scores(w, stat(math_stats, name, g)), top_k, granularity)
            removed = torch.zeros_like(sel)
            for gs in generals:
                removed |= _ref_top(_ref_scores(w, stat(gs, name, g)), top_k, granularity)
            sels.append(sel & ~removed)
        result[name] = _to_stored(name, sels)
    return result


def _assert_same(mask, ref) -> None:
    assert set(mask) == set(ref)
    for name in ref:
        assert torch.equal(mask[name], ref[name]), name


# ----------------------------------------------------------------------------------------------------------
# selection
# ----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("ties", [False, True], ids=["distinct", "heavy-ties"])
@pytest.mark.parametrize("granularity", ["matrix", "row"])
def test_row_granularity_matches_reference_top_k_per_row(granularity, ties):
    canon = _canonical(1, ties)
    params = _stored(canon)
    ms = _stats(2, ties)
    for top_k in (0.1, 0.3, 0.5):
        got = find_math_params(params, ms, None, top_k=top_k, method="wanda", granularity=granularity)
        _assert_same(got, _reference_mask(canon, ms, [], top_k, granularity))


@pytest.mark.parametrize("granularity", ["matrix", "row"])
def test_wanda_statistic_is_abs_w_times_sqrt_sq_sum(granularity):
    canon = _canonical(3, ties=False)
    params = _stored(canon)
    ms, gs = _stats(4), _stats(5)
    got = find_math_params(params, ms, gs, top_k=0.3, granularity=granularity, statistic="wanda")
    ref = _reference_mask(canon, ms, [gs], 0.3, granularity, statistic="wanda")
    _assert_same(got, ref)
    assert got.meta["statistic"] == "wanda"
    # the constructed statistics rank differently under L2: the test tells the two statistics apart
    l2 = _reference_mask(canon, ms, [gs], 0.3, granularity, statistic="l2")
    assert any(not torch.equal(ref[n], l2[n]) for n in ref)
    wanda_only = find_math_params(
        params, ms, None, top_k=0.3, method="wanda", granularity=granularity, statistic="wanda"
    )
    _assert_same(wanda_only, _reference_mask(canon, ms, [], 0.3, granularity, statistic="wanda"))


@pytest.mark.parametrize("granularity", ["matrix", "row"])
def test_every_general_set_is_subtracted_union(granularity):
    canon = _canonical(6, ties=False)
    params = _stored(canon)
    ms, generals = _stats(7), [_stats(8), _stats(9), _stats(10)]
    got = find_math_params(params, ms, generals, top_k=0.4, granularity=granularity)
    ref = _reference_mask(canon, ms, generals, 0.4, granularity)
    _assert_same(got, ref)
    # the later sets remove weights the first does not: dropping any of them changes the answer
    for i in range(1, len(generals)):
        fewer = _reference_mask(canon, ms, generals[:i], 0.4, granularity)
        assert any(not torch.equal(ref[n], fewer[n]) for n in ref), i
    assert got.meta["general_stats_sha256"] == [g.sha256 for g in generals]


@pytest.mark.parametrize("granularity", ["matrix", "row"])
def test_multi_top_k_matches_reference_for_each_value(granularity):
    canon = _canonical(11, ties=True)
    params = _stored(canon)
    ms, gs = _stats(12, ties=True), _stats(13, ties=True)
    ks = [0.05, 0.2, 0.35, 1.0]
    for k, got in zip(ks, find_math_params(params, ms, gs, top_k=ks, granularity=granularity), strict=True):
        _assert_same(got, _reference_mask(canon, ms, [gs], k, granularity))
        assert got.meta["top_k"] == k
    rnd = find_math_params(params, ms, gs, top_k=ks, method="random", granularity=granularity, seed=3)
    for k, got in zip(ks, rnd, strict=True):  # random: the reference mathneuro count per matrix (per expert)
        ref = _reference_mask(canon, ms, [gs], k, granularity)
        for name in TARGETS:
            per_group_got = [int(x.sum()) for x in _groups(name, got[name])]
            per_group_ref = [int(x.sum()) for x in _groups(name, ref[name])]
            assert per_group_got == per_group_ref, (k, name)


@pytest.mark.parametrize("ties", [False, True], ids=["distinct", "heavy-ties"])
@pytest.mark.parametrize("granularity", ["matrix", "row"])
def test_the_general_control_is_the_general_specific_weights(granularity, ties):
    """``method="general"`` (the sweep's magnitude-matched control) with one general set: exactly the reference
    top-k on general text minus the top-k on math (the reference with the sets swapped), the candidate's count
    in every matrix (and row); with two general sets, still the candidate's count, outside the math top-k."""
    canon = _canonical(21, ties)
    params = _stored(canon)
    ms, gs = _stats(22, ties), _stats(23, ties)
    for k in (0.1, 0.3, 0.5):
        got = find_math_params(params, ms, gs, top_k=k, method="general", granularity=granularity)
        _assert_same(got, _reference_mask(canon, gs, [ms], k, granularity))
        cand = _reference_mask(canon, ms, [gs], k, granularity)
        for name in TARGETS:
            assert torch.equal(_counts(name, got[name], granularity), _counts(name, cand[name], granularity))
    other = _stats(24, ties)
    got = find_math_params(params, ms, [gs, other], top_k=0.3, method="general", granularity=granularity)
    cand = _reference_mask(canon, ms, [gs, other], 0.3, granularity)
    math_top = _reference_mask(canon, ms, [], 0.3, granularity)
    for name in TARGETS:
        assert torch.equal(_counts(name, got[name], granularity), _counts(name, cand[name], granularity))
        assert not (got[name] & math_top[name]).any()


def _counts(name: str, stored: torch.Tensor, granularity: str) -> torch.Tensor:
    """Selected entries per matrix (per row of the canonical ``(d_out, d_in)`` view with row granularity)."""
    t = TARGETS[name]
    canon = stored.t() if t.kind == "conv1d" else (stored.transpose(1, 2) if t.transposed else stored)
    return canon.sum(-1) if granularity == "row" else canon.sum((-2, -1))


def _groups(name: str, stored: torch.Tensor) -> list[torch.Tensor]:
    return [stored] if TARGETS[name].kind != "experts" else list(stored)


def test_reference_tie_breaking_for_each_selector():
    """Heavy ties: both selectors (per-row kthvalue, flat radix) equal the Python-sort reference exactly."""
    gen = torch.Generator().manual_seed(0)
    for trial in range(60):
        rows, n = int(torch.randint(1, 5, (1,), generator=gen)), int(torch.randint(1, 300, (1,), generator=gen))
        levels = int(torch.randint(1, 6, (1,), generator=gen))  # 1 level = every entry ties
        x = torch.randint(0, levels, (rows, n), generator=gen).float() * 0.25
        for k in sorted({1, n, int(torch.randint(1, n + 1, (1,), generator=gen))}):
            ref = torch.zeros(rows, n, dtype=torch.bool)
            for r in range(rows):
                for j in _ref_top_list(x[r].tolist(), k):
                    ref[r, j] = True
            assert torch.equal(top_fraction(x, k), ref), (trial, k)
        flat = x.reshape(-1)
        ks = sorted({1, flat.numel(), int(torch.randint(1, flat.numel() + 1, (1,), generator=gen))})
        for k, got in zip(ks, top_fraction_flat(flat, ks)):
            ref = torch.zeros(flat.numel(), dtype=torch.bool)
            ref[sorted(_ref_top_list(flat.tolist(), k))] = True
            assert torch.equal(got, ref), (trial, k)


# ----------------------------------------------------------------------------------------------------------
# the Mask artifact: counts, content hash, file round trip
# ----------------------------------------------------------------------------------------------------------
def _ref_mask_sha256(tensors: dict[str, torch.Tensor]) -> str:
    """The recorded hash, recomputed: format tag, then per sorted name ``\\n{name}:{shape}\\n`` + packed bits."""
    import hashlib

    import numpy as np

    h = hashlib.sha256(b"mathneuro-edit/mask/v1")
    for name in sorted(tensors):
        t = tensors[name]
        h.update(f"\n{name}:{tuple(t.shape)}\n".encode())
        h.update(np.packbits(t.reshape(-1).numpy(), bitorder="little").tobytes())
    return h.hexdigest()


def test_mask_counts_hash_and_file_round_trip(tmp_path):
    from mathneuro_edit import InputError, Mask

    g = torch.Generator().manual_seed(0)
    tensors = {
        "b.dense": torch.rand(5, 13, generator=g) < 0.5,
        "a.sparse": torch.zeros(3, 40, 8, dtype=torch.bool),
        "c.empty": torch.zeros(7, dtype=torch.bool),
        "d.full": torch.ones(2, 3, dtype=torch.bool),
    }
    tensors["a.sparse"][1, 5, 2] = tensors["a.sparse"][2, 39, 7] = True
    mask = Mask(tensors, {"method": "mathneuro", "top_k": 0.1})
    assert list(mask) == list(tensors) and len(mask) == 4
    for name, t in tensors.items():
        assert torch.equal(mask[name], t) and mask.shape_of(name) == tuple(t.shape)
        assert mask.counts()[name] == (int(t.sum()), t.numel())
    assert mask.total() == (sum(int(t.sum()) for t in tensors.values()), sum(t.numel() for t in tensors.values()))
    assert mask.sha256 == _ref_mask_sha256(tensors)
    assert Mask(tensors, {"other": "meta"}).sha256 == mask.sha256  # provenance is not content
    flipped = dict(tensors, **{"b.dense": tensors["b.dense"].clone()})
    flipped["b.dense"][4, 12] = ~flipped["b.dense"][4, 12]
    assert Mask(flipped).sha256 != mask.sha256
    assert Mask(dict(tensors, **{"d.full": torch.ones(3, 2, dtype=torch.bool)})).sha256 != mask.sha256  # shape counts
    path = mask.save(tmp_path / "m.safetensors")
    back = Mask.load(path)
    assert list(back) == list(mask) and back.meta == mask.meta and back.sha256 == mask.sha256
    assert back.counts() == mask.counts() and all(torch.equal(back[n], tensors[n]) for n in tensors)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF  # one stored bit pattern changed: the recorded hash no longer matches
    (tmp_path / "bad.safetensors").write_bytes(bytes(data))
    with pytest.raises(InputError, match="corrupt"):
        Mask.load(tmp_path / "bad.safetensors")


# ----------------------------------------------------------------------------------------------------------
# defaults, method=random, low precision, errors, storage
# ----------------------------------------------------------------------------------------------------------
def _ref_seed(seed: int, name: str, group: int) -> int:
    """docs/method.md: the generator of ``method="random"`` is seeded by ``sha256(f"{seed}:{name}:{expert}")``."""
    import hashlib

    return int.from_bytes(hashlib.sha256(f"{seed}:{name}:{group}".encode()).digest()[:8], "little") % 2**63


def test_defaults_meta_and_random_reference(capsys, monkeypatch):
    canon = _canonical(20, ties=False)
    params = _stored(canon)
    ms, gs = _stats(21), _stats(22)
    mask = find_math_params(params, ms, gs, top_k=0.3)  # defaults: mathneuro, matrix, l2, seed 0, no progress
    _assert_same(mask, _reference_mask(canon, ms, [gs], 0.3, "matrix"))
    assert mask.meta == {
        "method": "mathneuro",
        "top_k": 0.3,
        "granularity": "matrix",
        "seed": 0,
        "statistic": "l2",
        "model_fingerprint": "synthetic",
        "math_stats_sha256": ms.sha256,
        "general_stats_sha256": [gs.sha256],
    }
    assert capsys.readouterr().err == ""  # no progress bar unless asked
    # no tqdm monitor thread: a thread alive at fork time deadlocks mutmut's forked test runs
    monkeypatch.setattr("tqdm.std.tqdm.monitor_interval", 0)
    find_math_params(params, ms, gs, top_k=0.3, progress=True)
    assert "masks" in capsys.readouterr().err
    # wanda ignores general sets even when given
    _assert_same(find_math_params(params, ms, gs, top_k=0.3, method="wanda"), _reference_mask(canon, ms, [], 0.3))
    for seed in (0, 3):
        rnd = find_math_params(params, ms, gs, top_k=0.3, method="random", seed=seed)
        assert rnd.meta["method"] == "random" and rnd.meta["seed"] == seed
        ref = _reference_mask(canon, ms, [gs], 0.3)
        for name in TARGETS:
            expect = []
            for g, part in enumerate(_groups(name, ref[name])):
                count, n = int(part.sum()), part.numel()
                sel = torch.zeros(n, dtype=torch.bool)
                sel[torch.randperm(n, generator=torch.Generator().manual_seed(_ref_seed(seed, name, g)))[:count]] = True
                expect.append(sel.reshape(D_OUT, D_IN))
            assert torch.equal(rnd[name], _to_stored(name, expect)), (seed, name)


def test_low_precision_weights_are_scored_in_float32():
    canon = {n: [(m * 1.37).bfloat16() for m in mats] for n, mats in _canonical(23, ties=False).items()}
    params = _stored(canon)
    ms = _stats(24)
    for k in (0.1, 0.3):
        _assert_same(find_math_params(params, ms, None, top_k=k, method="wanda"), _reference_mask(canon, ms, [], k))


def test_shared_modules_and_bad_inputs_name_the_problem():
    from torch import nn

    from mathneuro_edit import InputError

    class Shared(nn.Module):  # one Linear under two names, as a tied head appears twice
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Linear(D_IN, D_OUT, bias=False)
            self.b = self.a

    model = Shared()
    t = {n: Target(n, "linear", n[:1], (D_OUT, D_IN)) for n in ("a.weight", "b.weight")}
    g = torch.Generator().manual_seed(0)

    def stats() -> ActivationStats:
        return ActivationStats(
            {n: torch.rand(1, D_IN, generator=g) for n in t},
            {n: torch.rand(1, D_IN, generator=g) for n in t},
            {n: torch.ones(1, dtype=torch.int64) for n in t},
            dict(t),
            {},
        )

    ms, gs = stats(), stats()
    mask = find_math_params(model, ms, gs, top_k=0.5)
    assert set(mask) == {"a.weight", "b.weight"}
    params = {"lin.weight": torch.ones(D_OUT, D_IN)}
    ghost = ActivationStats(
        {"ghost.weight": torch.ones(1, D_IN)},
        {"ghost.weight": torch.ones(1, D_IN)},
        {"ghost.weight": torch.ones(1, dtype=torch.int64)},
        {"ghost.weight": Target("ghost.weight", "linear", "ghost", (D_OUT, D_IN))},
        {},
    )
    with pytest.raises(InputError, match=r"^math_stats: statistics for 'ghost\.weight'"):
        find_math_params(params, ghost, None, top_k=0.1, method="wanda")
    lin_t = {"lin.weight": Target("lin.weight", "linear", "lin", (D_OUT, D_IN))}
    ok = ActivationStats(
        {"lin.weight": torch.ones(1, D_IN)},
        {"lin.weight": torch.ones(1, D_IN)},
        {"lin.weight": torch.ones(1, dtype=torch.int64)},
        dict(lin_t),
        {},
    )
    no_stat = ActivationStats({}, {}, {}, dict(lin_t), {})
    with pytest.raises(InputError, match=r"^general_stats\[1\]: no statistics for 'lin\.weight'"):
        find_math_params(params, ok, [ok, no_stat], top_k=0.1)
    with pytest.raises(InputError, match="needs general_stats"):
        find_math_params(params, ok, None, top_k=0.1)
    for bad in (0, 0.0, -0.1, 1.5, 2, True, "0.1", float("nan")):
        with pytest.raises(InputError, match="^top_k: must be in"):
            find_math_params(params, ok, ok, top_k=bad)
    nan_w = {"lin.weight": torch.full((D_OUT, D_IN), float("nan"))}
    with pytest.raises(InputError, match=r"^lin\.weight: non-finite importance scores"):
        find_math_params(nan_w, ok, ok, top_k=0.1)
    inf_g = ActivationStats(
        {"lin.weight": torch.full((1, D_IN), float("inf"))},
        {"lin.weight": torch.ones(1, D_IN)},
        {"lin.weight": torch.ones(1, dtype=torch.int64)},
        dict(lin_t),
        {},
    )
    with pytest.raises(InputError, match=r"^lin\.weight: non-finite importance scores"):
        find_math_params(params, ok, inf_g, top_k=0.1)


def test_mask_storage_is_the_smaller_encoding(tmp_path):
    from safetensors import safe_open

    from mathneuro_edit import InputError, Mask

    tensors = {
        "few/odd.name": torch.zeros(400, dtype=torch.bool),
        "many": torch.ones(40, dtype=torch.bool),
        "edge": torch.zeros(64, dtype=torch.bool),
        "scalar": torch.tensor(True),
    }
    tensors["few/odd.name"][[3, 399]] = True  # 8 bytes of int32 indices < 50 bytes of bits
    tensors["edge"][5:7] = True  # 8 bytes of indices == 8 bytes of bits: bits (indices only when smaller)
    mask = Mask(tensors)
    assert Mask(tensors, {"a": 1}).meta == {"a": 1} and mask.meta == {}
    path = mask.save(tmp_path / "m.safetensors")
    with safe_open(str(path), framework="pt") as f:
        stored = {k: f.get_tensor(k) for k in f.keys()}
    assert set(stored) == {"idx/few/odd.name", "bits/many", "bits/edge", "bits/scalar"}
    assert stored["idx/few/odd.name"].dtype == torch.int32 and stored["idx/few/odd.name"].tolist() == [3, 399]
    assert stored["bits/many"].dtype == torch.uint8 and stored["bits/many"].numel() == 5
    back = Mask.load(path)
    for name, t in tensors.items():
        assert back[name].dtype == torch.bool and mask[name].dtype == torch.bool
        assert torch.equal(back[name], t) and torch.equal(mask[name], t), name
    assert back.counts() == mask.counts() == {n: (int(t.sum()), t.numel()) for n, t in tensors.items()}
    ms = _stats(0)
    with pytest.raises(InputError, match="not a mathneuro-edit mask file"):
        Mask.load(ms.save(tmp_path / "s.stats.safetensors"))


# ----------------------------------------------------------------------------------------------------------
# full disk, general sets from another model, a lazy weight mapping, multi defaults, storage edges
# ----------------------------------------------------------------------------------------------------------
def test_mask_save_on_a_full_disk_names_the_file_and_the_bytes_it_needs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 2**24 entries, 2**18 selected: stored as int32 indices (1 MiB < 2 MiB of bits), so it needs 1048576 bytes
    flat = torch.zeros(2**24, dtype=torch.bool)
    flat[:: 2**6] = True
    mask = Mask({"w": flat.reshape(2**12, 2**12)})
    assert mask._store["w"][0] == "idx" and mask._store["w"][1].dtype == torch.int32

    fill_disk(monkeypatch)  # the writer Mask.save and ActivationStats.save share
    path = tmp_path / "m.safetensors"
    with pytest.raises(InputError) as err:
        mask.save(path)
    # free 0: the message asks for the whole 1048576 bytes, rounded up to 2 MB
    assert str(err.value) == f"no space left on device writing {path}; free 2 MB or choose another --out"
    assert list(tmp_path.iterdir()) == []  # no temp file left behind


def _with(
    stats: ActivationStats, *, targets: dict[str, Target] | None = None, norm: dict[str, torch.Tensor] | None = None
) -> ActivationStats:
    return ActivationStats(
        {**stats.norm_sum, **(norm or {})},
        stats.sq_sum,
        stats.token_count,
        {**stats.targets, **(targets or {})},
        stats.meta,
    )


def test_a_general_set_is_checked_against_its_own_target_records() -> None:
    params = _stored(_canonical(30, ties=False))
    ms, gs = _stats(31), _stats(32)
    # the general set recorded a different shape for lin.weight (it was calibrated on another model)
    other = Target("lin.weight", "linear", "lin", (D_OUT + 1, D_IN))
    with pytest.raises(InputError) as err:
        find_math_params(params, ms, _with(gs, targets={"lin.weight": other}), top_k=[0.3])
    assert str(err.value) == (
        f"general_stats[0]: 'lin.weight' has shape {(D_OUT + 1, D_IN)} in the statistics but "
        f"{(D_OUT, D_IN)} in the model; the statistics come from another model: recalibrate on "
        "this one"
    )
    # same records, but statistics of another width than the math set's
    with pytest.raises(InputError) as err:
        find_math_params(params, ms, [gs, _with(gs, norm={"lin.weight": torch.ones(1, D_IN + 1)})], top_k=[0.3])
    assert str(err.value) == (
        f"general_stats[1]: 'lin.weight' has statistics of shape (1, {D_IN + 1}) but "
        f"(1, {D_IN}) in math_stats; the sets come from different models: calibrate all on "
        "this one"
    )


class _Lazy(Mapping[str, torch.Tensor]):
    """A weight mapping that knows shapes without reading tensors (as loading.weights_from_checkpoint does)."""

    def __init__(self, tensors: dict[str, torch.Tensor]) -> None:
        self._tensors, self.reads = tensors, []  # type: list[str]

    def __contains__(self, name: object) -> bool:
        return name in self._tensors

    def shape_of(self, name: str) -> tuple[int, ...]:
        return tuple(self._tensors[name].shape)

    def __getitem__(self, name: str) -> torch.Tensor:
        self.reads.append(name)
        return self._tensors[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._tensors)

    def __len__(self) -> int:
        return len(self._tensors)


def test_a_lazy_mapping_is_read_once_per_tensor_checks_included() -> None:
    canon = _canonical(33, ties=False)
    lazy = _Lazy(_stored(canon))
    ms, gs1, gs2 = _stats(34), _stats(35), _stats(36)
    masks = find_math_params(lazy, ms, [gs1, gs2], top_k=[0.2, 0.4])
    assert lazy.reads == list(TARGETS)  # the shape checks used shape_of: one read per tensor, in the scoring loop
    for mask, k in zip(masks, (0.2, 0.4)):
        _assert_same(mask, _reference_mask(canon, ms, [gs1, gs2], k))


def test_multi_defaults_are_matrix_seed_0_and_silent(capfd: pytest.CaptureFixture[str]) -> None:
    canon = _canonical(37, ties=False)
    params = _stored(canon)
    ms, gs = _stats(38), _stats(39)
    (mask,) = find_math_params(params, ms, gs, top_k=[0.3])
    assert (mask.meta["granularity"], mask.meta["seed"], mask.meta["method"], mask.meta["statistic"]) == (
        "matrix",
        0,
        "mathneuro",
        "l2",
    )
    _assert_same(mask, _reference_mask(canon, ms, [gs], 0.3, "matrix"))
    (rnd,) = find_math_params(params, ms, gs, top_k=[0.3], method="random")
    (rnd0,) = find_math_params(params, ms, gs, top_k=[0.3], method="random", seed=0)
    assert rnd.meta["seed"] == 0 and rnd.sha256 == rnd0.sha256
    assert capfd.readouterr().err == ""  # no progress bar unless asked


def test_top_k_a_number_gives_a_mask_a_sequence_gives_one_per_value_identical_to_each_number() -> None:
    import numpy as np

    params = _stored(_canonical(40, ties=True))
    ms, gs, gs2 = _stats(41, ties=True), _stats(42, ties=True), _stats(43)
    ks = [0.05, 0.3, 1.0, 0.3]  # a repeated value too: one mask per entry, in order
    for kwargs in (
        {},
        {"granularity": "row", "statistic": "wanda"},
        {"method": "random", "seed": 3},
        {"method": "random", "seed": 4, "granularity": "row"},
        {"method": "general"},
        {"method": "wanda"},
    ):
        generals = None if kwargs.get("method") == "wanda" else [gs, gs2]
        for form in (list(ks), tuple(ks)):
            masks = find_math_params(params, ms, generals, top_k=form, **kwargs)
            assert isinstance(masks, list) and len(masks) == len(ks), kwargs
            for k, got in zip(ks, masks):
                single = find_math_params(params, ms, generals, top_k=k, **kwargs)
                assert isinstance(single, Mask)
                assert got.sha256 == single.sha256 and got.meta == single.meta, (kwargs, k)
    # the list form uses the seed: another seed, other random masks (as the number form)
    (rnd3,) = find_math_params(params, ms, gs, top_k=[0.3], method="random", seed=3)
    (rnd4,) = find_math_params(params, ms, gs, top_k=[0.3], method="random", seed=4)
    assert rnd3.sha256 != rnd4.sha256 and (rnd3.meta["seed"], rnd4.meta["seed"]) == (3, 4)
    # a numpy float and the int 1 are numbers, as before
    as_numpy = find_math_params(params, ms, gs, top_k=np.float64(0.3))
    assert isinstance(as_numpy, Mask) and as_numpy.sha256 == find_math_params(params, ms, gs, top_k=0.3).sha256
    everything = find_math_params(params, ms, None, top_k=1, method="wanda")
    assert everything.total()[0] == everything.total()[1] and everything.meta["top_k"] == 1


def test_top_k_refusals_are_one_line_for_a_number_and_a_sequence() -> None:
    params = _stored(_canonical(44, ties=False))
    ms, gs = _stats(45), _stats(46)
    bad = (True, "0.1", b"0.1", [], (), [0.1, 1.5], [0.1, True], ["0.1"], [0], [float("nan")], [[0.1]], {0.1}, None)
    for value in bad:
        with pytest.raises(InputError, match=r"^top_k: must be in \(0, 1\]") as err:
            find_math_params(params, ms, gs, top_k=value)
        assert "\n" not in str(err.value), value
    with pytest.raises(InputError, match=r"^top_k: .*got 5, did you mean 0\.05\?; pass a fraction"):
        find_math_params(params, ms, gs, top_k=[0.01, 5])


def test_a_non_bool_mask_is_read_as_nonzero() -> None:
    values = torch.tensor([[0.0, 2.5, -1.0, 0.0], [0.0, 0.0, 3.0, 7.0]])  # dense: stored as packed bits
    as_bool = values != 0
    mask = Mask({"w": values})
    assert mask._store["w"][0] == "bits"
    assert mask["w"].dtype == torch.bool and torch.equal(mask["w"], as_bool)
    assert mask.counts() == {"w": (4, 8)} and mask.sha256 == Mask({"w": as_bool}).sha256


@pytest.mark.parametrize(
    "numel, count, kind",
    [
        (513, 16, "idx"),  # 16 int32 indices = 64 bytes < 65 bytes of packed bits
        (513, 17, "bits"),  # 68 >= 65
        (512, 15, "idx"),  # 60 < 64
        (512, 16, "bits"),  # 64 bytes either way: bits (indices only when strictly smaller)
    ],
)
def test_mask_storage_switches_to_indices_exactly_when_they_are_smaller(
    numel: int, count: int, kind: str, tmp_path: Path
) -> None:
    flat = torch.zeros(numel, dtype=torch.bool)
    flat[torch.randperm(numel, generator=torch.Generator().manual_seed(count))[:count]] = True
    mask = Mask({"w": flat})
    assert mask._store["w"][0] == kind
    back = Mask.load(mask.save(tmp_path / "m.safetensors"))
    assert back._store["w"][0] == kind and torch.equal(back["w"], flat) and back.counts() == {"w": (count, numel)}


def test_flat_top_k_of_one_and_a_zero_k_among_others() -> None:
    scores = torch.rand(300, generator=torch.Generator().manual_seed(5))
    ref = [set(int(i) for i in m.nonzero()) for m in top_fraction_flat(scores, [1])]
    assert ref == [{int(scores.argmax())}]  # k = 1: the single largest entry, not nothing
    ks = [0, 7, 0, 40, 1]
    got = top_fraction_flat(scores, ks)
    assert len(got) == len(ks) and all(m.dtype == torch.bool and m.shape == scores.shape for m in got)
    for k, m in zip(ks, got):
        assert set(int(i) for i in m.nonzero()) == _ref_top_list(scores.tolist(), k), k
