"""Edges of mathneuro_edit.engine.mask that the mutation run (scripts/mutation.sh mask) found unguarded: the disk-full
message of Mask.save, the checks of a general set against its own target records and against the math set's
statistic shapes, a lazy weight mapping read once per tensor, and find_math_params_multi's own defaults."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
import torch

from mathneuro_edit import ActivationStats, InputError, Target
from mathneuro_edit.engine.mask import Mask, find_math_params_multi
from mathneuro_edit.engine.topk import top_fraction_flat
from tests._faults import fill_disk
from tests.engine.test_regressions import (
    D_IN,
    D_OUT,
    TARGETS,
    _assert_same,
    _canonical,
    _reference_mask,
    _stats,
    _stored,
)


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
        find_math_params_multi(params, ms, _with(gs, targets={"lin.weight": other}), top_ks=[0.3])
    assert str(err.value) == (
        f"general_stats[0]: 'lin.weight' has shape {(D_OUT + 1, D_IN)} in the statistics but "
        f"{(D_OUT, D_IN)} in the model; the statistics come from another model: recalibrate on "
        "this one"
    )
    # same records, but statistics of another width than the math set's
    with pytest.raises(InputError) as err:
        find_math_params_multi(params, ms, [gs, _with(gs, norm={"lin.weight": torch.ones(1, D_IN + 1)})], top_ks=[0.3])
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
    masks = find_math_params_multi(lazy, ms, [gs1, gs2], top_ks=[0.2, 0.4])
    assert lazy.reads == list(TARGETS)  # the shape checks used shape_of: one read per tensor, in the scoring loop
    for mask, k in zip(masks, (0.2, 0.4)):
        _assert_same(mask, _reference_mask(canon, ms, [gs1, gs2], k))


def test_multi_defaults_are_matrix_seed_0_and_silent(capfd: pytest.CaptureFixture[str]) -> None:
    canon = _canonical(37, ties=False)
    params = _stored(canon)
    ms, gs = _stats(38), _stats(39)
    (mask,) = find_math_params_multi(params, ms, gs, top_ks=[0.3])
    assert (mask.meta["granularity"], mask.meta["seed"], mask.meta["method"], mask.meta["statistic"]) == (
        "matrix",
        0,
        "mathneuro",
        "l2",
    )
    _assert_same(mask, _reference_mask(canon, ms, [gs], 0.3, "matrix"))
    (rnd,) = find_math_params_multi(params, ms, gs, top_ks=[0.3], method="random")
    (rnd0,) = find_math_params_multi(params, ms, gs, top_ks=[0.3], method="random", seed=0)
    assert rnd.meta["seed"] == 0 and rnd.sha256 == rnd0.sha256
    assert capfd.readouterr().err == ""  # no progress bar unless asked


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
    from tests.engine.test_regressions import _ref_top_list

    scores = torch.rand(300, generator=torch.Generator().manual_seed(5))
    ref = [set(int(i) for i in m.nonzero()) for m in top_fraction_flat(scores, [1])]
    assert ref == [{int(scores.argmax())}]  # k = 1: the single largest entry, not nothing
    ks = [0, 7, 0, 40, 1]
    got = top_fraction_flat(scores, ks)
    assert len(got) == len(ks) and all(m.dtype == torch.bool and m.shape == scores.shape for m in got)
    for k, m in zip(ks, got):
        assert set(int(i) for i in m.nonzero()) == _ref_top_list(scores.tolist(), k), k
