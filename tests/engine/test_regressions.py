"""Regression tests for mask selection and consistency, against independent reference code (issue 17).

Each test here was checked to FAIL with one hand-applied mutation of the package that the earlier suite let
through (see docs/testing.md, "Mutations the suite must catch"):

- row granularity picking the lowest k of each row -> ``test_row_granularity_matches_reference_top_k_per_row``;
- ``statistic="wanda"`` silently using the L2 statistic -> ``test_wanda_statistic_is_abs_w_times_sqrt_sq_sum``;
- only the first general set subtracted -> ``test_every_general_set_is_subtracted_union``.

(Consistency's Jaccard: tests/runs/test_consistency.py.) Everything here runs in about a second: these are the tests
that scripts/mutation.sh runs against engine/mask.py and engine/topk.py.

The reference shares no code with :mod:`mathneuro_edit.engine.mask`: scores are ``|W| * stat`` (one float32 product,
the quantity the package ranks), and the top-k is a plain Python sort by ``(-score, flat index)``.
"""

from __future__ import annotations

import pytest
import torch

from mathneuro_edit import ActivationStats, Target, find_math_params
from mathneuro_edit.engine.mask import find_math_params_multi
from mathneuro_edit.engine.topk import top_fraction, top_fraction_flat


# ----------------------------------------------------------------------------------------------------------
# THE COUNT RULE, in one place. When the package's rule changes (issue 12: the released code's
# ``int(n * top_k)``, truncation, zero allowed), change only this function.
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
    for k, got in zip(ks, find_math_params_multi(params, ms, gs, top_ks=ks, granularity=granularity)):
        _assert_same(got, _reference_mask(canon, ms, [gs], k, granularity))
        assert got.meta["top_k"] == k
    rnd = find_math_params_multi(params, ms, gs, top_ks=ks, method="random", granularity=granularity, seed=3)
    for k, got in zip(ks, rnd):  # random: the reference mathneuro count per matrix (per expert)
        ref = _reference_mask(canon, ms, [gs], k, granularity)
        for name in TARGETS:
            per_group_got = [int(x.sum()) for x in _groups(name, got[name])]
            per_group_ref = [int(x.sum()) for x in _groups(name, ref[name])]
            assert per_group_got == per_group_ref, (k, name)


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
# killing the survivors of scripts/mutation.sh (docs/testing.md): defaults, method=random, errors, storage
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
