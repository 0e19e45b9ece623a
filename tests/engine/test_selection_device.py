"""The mask step on an accelerator: the device-generic code path, run here on the CPU (issue 40, item 3).

``find_math_params(..., device=...)`` moves each matrix to ``device`` and computes its scores and selection there;
on a GPU the same code gives the same bits as on the CPU because every step is exact: one float32 multiply per
score, an integer histogram of the scores' bit patterns, a stable sort for the ties. What a CPU can check:

- the ``device`` path (every tensor created on the scores' device, nothing assumed to be on the CPU) gives the
  masks of the default path, for every method and granularity, several ``top_k`` in one call (whose thresholds
  fall in different histogram bins: the gather of candidates made on the scores' device), low-precision weights;
- the tie rule (the ``k`` highest scores, ties at the threshold to the lower flat index) against an independent
  plain sort by ``(-score, index)``, on scores with few distinct values;
- ``selection_device`` picks CUDA only where there is one (else the CPU), never MPS.
"""

from __future__ import annotations

import pytest
import torch

from mathneuro_edit import ActivationStats, Target
from mathneuro_edit.engine.devices import selection_device, work_device
from mathneuro_edit.engine.mask import find_math_params, k_of
from mathneuro_edit.engine.topk import top_fraction, top_fraction_flat

D_OUT, D_IN = 24, 40
TARGETS = {
    "a.weight": Target("a.weight", "linear", "a", (D_OUT, D_IN)),
    "b.weight": Target("b.weight", "linear", "b", (D_IN, D_OUT)),
}


def _plain_top(values: list[float], k: int) -> set[int]:
    """The ``k`` largest, ties to the lower index: a plain sort, no code shared with the package."""
    return set(sorted(range(len(values)), key=lambda i: (-values[i], i))[:k])


def _weights(seed: int, dtype: torch.dtype, ties: bool) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, t in TARGETS.items():
        w = torch.randint(-3, 4, t.shape, generator=g).float() if ties else torch.randn(t.shape, generator=g)
        out[name] = w.to(dtype)
    return out


def _stats(seed: int, ties: bool) -> ActivationStats:
    g = torch.Generator().manual_seed(seed)
    norm, sq, count = {}, {}, {}
    for name, t in TARGETS.items():
        norm[name] = (
            torch.randint(1, 3, t.stat_shape, generator=g).float() if ties else torch.rand(t.stat_shape, generator=g)
        )
        sq[name] = norm[name].square() * 3
        count[name] = torch.full((1,), 5, dtype=torch.int64)
    return ActivationStats(norm, sq, count, dict(TARGETS), {"model_fingerprint": "synthetic"})


@pytest.mark.parametrize("method", ["mathneuro", "wanda", "random", "general"])
@pytest.mark.parametrize("granularity", ["matrix", "row"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("ties", [False, True])
def test_the_device_path_gives_the_default_paths_masks(method: str, granularity: str, dtype, ties: bool) -> None:
    weights, math_stats, general = _weights(0, dtype, ties), _stats(1, ties), [_stats(2, ties), _stats(3, ties)]
    top_ks = [0.02, 0.1, 0.3, 0.9]  # thresholds in different histogram bins: the multi-bin gather runs
    kwargs = dict(top_k=top_ks, method=method, granularity=granularity, seed=7)
    default = find_math_params(weights, math_stats, general, **kwargs)
    on_device = find_math_params(weights, math_stats, general, device="cpu", **kwargs)
    assert [m.sha256 for m in on_device] == [m.sha256 for m in default]
    assert [m.total() for m in on_device] == [m.total() for m in default]


@pytest.mark.parametrize("granularity", ["matrix", "row"])
def test_the_device_path_keeps_the_tie_rule(granularity: str) -> None:
    """mathneuro on heavy ties: top(math) minus top(general), each a plain sort by (-score, index)."""
    weights, math_stats, general = _weights(4, torch.float32, True), _stats(5, True), _stats(6, True)
    top_k = 0.25
    mask = find_math_params(weights, math_stats, [general], top_k=top_k, granularity=granularity, device="cpu")
    for name, w in weights.items():
        want = torch.zeros(w.shape, dtype=torch.bool)
        mats = {}
        for label, s in (("math", math_stats), ("general", general)):
            scores = w.float().abs() * s.norm_sum[name][0].unsqueeze(0)  # one float32 product, as ranked
            rows = scores.tolist() if granularity == "row" else [scores.reshape(-1).tolist()]
            picked = torch.zeros(len(rows), len(rows[0]), dtype=torch.bool)
            for r, values in enumerate(rows):
                for i in _plain_top(values, k_of(top_k, len(values))):
                    picked[r, i] = True
            mats[label] = picked.reshape(w.shape)
        want = mats["math"] & ~mats["general"]
        assert torch.equal(mask[name], want), name


def test_flat_and_row_top_k_against_a_plain_sort_on_ties() -> None:
    g = torch.Generator().manual_seed(11)
    scores = torch.randint(0, 6, (4, 50), generator=g).float() * 0.5  # few values: ties at every threshold
    flat = scores.reshape(-1)
    ks = [0, 1, 13, 77, 150, 200]
    for k, got in zip(ks, top_fraction_flat(flat, ks)):
        want = torch.zeros(flat.numel(), dtype=torch.bool)
        want[list(_plain_top(flat.tolist(), k))] = True
        assert torch.equal(got, want), k
    for k in (0, 1, 7, 50):
        want = torch.zeros(scores.shape, dtype=torch.bool)
        for r in range(scores.shape[0]):
            want[r, list(_plain_top(scores[r].tolist(), k))] = True
        assert torch.equal(top_fraction(scores, k), want), k


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the fallback of a machine without CUDA")
def test_selection_device_is_cuda_only_where_there_is_one() -> None:
    assert selection_device("auto") == torch.device("cpu")
    assert selection_device("cuda") == torch.device("cpu")  # asked for, absent: the CPU gives the same bits
    assert selection_device("mps") == torch.device("cpu")
    assert work_device(None) == torch.device("cpu")
