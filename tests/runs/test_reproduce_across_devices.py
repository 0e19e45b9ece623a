"""A run made on another device, reproduced here: the verdict says exactly what held (issue 40, item 2).

What a recipe promises across devices: the mask and the output weights are the product (the same bits on a CPU and
a GPU); the statistics are float sums that a GPU adds in another order. No GPU is needed to test the verdicts: a
run "made on cuda" is the organism's run with its statistics perturbed as another device's rounding would, and its
lock's ``device`` saying ``cuda``:

- below the selection's margin (every matrix's gap between its k-th and (k+1)-th score, computed here by a plain
  sort, independently of the package's top-k) the mask cannot change: ``reproduce`` must say "same mask and output
  weights; the statistics differ in float rounding (made on cuda, checked on cpu)" and exit 0, and ``verify`` OK;
- above it the mask changes: ``reproduce`` must say NO and name the mask difference (matrices, counts).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file

import mathneuro_edit.runs.steps.mask as step_mask
from mathneuro_edit.cli.main import main
from mathneuro_edit.engine.mask import Mask, k_of
from mathneuro_edit.organism import organism_path
from mathneuro_edit.publish.lock import read_lock
from mathneuro_edit.recipe.io import quickstart_recipe
from mathneuro_edit.runs.pipeline import run_recipe
from mathneuro_edit.runs.steps.mask import Statistics

SETS = ["data.samples=4", "evaluation.samples=2", "evaluation.max_new_tokens=4"]
CUDA = {"type": "cuda", "name": "NVIDIA H200"}


def _cli(*args: object) -> tuple[int, str]:
    result = CliRunner().invoke(main, [str(a) for a in args])
    return result.exit_code, result.output


def _margin(stats: Statistics, top_k: float) -> float:
    """The smallest relative gap ``(s_k - s_k+1) / s_k`` between the k-th and (k+1)-th highest score of any matrix
    and set: a plain descending sort of ``|W| x stat``, not the package's selection."""
    weights = load_file(str(organism_path() / "model.safetensors"))
    worst = float("inf")
    for s in [stats.math, *stats.general]:
        assert s is not None
        for name, t in s.targets.items():
            assert t.kind == "linear" and t.groups == 1, name  # the organism: plain Linear layers
            scores = (weights[name].float().abs() * s.norm_sum[name][0].unsqueeze(0)).reshape(-1)
            k = k_of(top_k, scores.numel())
            if 0 < k < scores.numel():
                ordered = scores.sort(descending=True).values
                worst = min(worst, float((ordered[k - 1] - ordered[k]) / ordered[k - 1]))
    return worst


def _perturbed(relative: float, seed: int) -> Callable[..., Any]:
    """``calibrate`` whose statistics are multiplied entry by entry by ``1 + relative * u``, ``u`` uniform in
    [-1, 1]: another device's float sums, up to ``relative``."""
    original = step_mask.calibrate
    count = [0]

    def calibrate(*args: Any, **kwargs: Any) -> Any:
        stats = original(*args, **kwargs)
        count[0] += 1
        g = torch.Generator().manual_seed(seed * 100 + count[0])
        for sums in (stats.norm_sum, stats.sq_sum):
            for name in sums:
                u = torch.rand(sums[name].shape, generator=g, dtype=torch.float64) * 2 - 1
                sums[name] = (sums[name].double() * (1 + relative * u)).float()
        return stats

    return calibrate


def _run_elsewhere(out: Path, monkeypatch: pytest.MonkeyPatch, relative: float, seed: int) -> Path:
    """The organism's run as if made on a GPU: statistics perturbed by ``relative``, the lock's device cuda."""
    with monkeypatch.context() as m:
        m.setattr(step_mask, "calibrate", _perturbed(relative, seed))
        m.setattr(step_mask, "device_record", lambda device: dict(CUDA))
        run_recipe(quickstart_recipe(SETS), out, progress=False)
    assert read_lock(out)["device"] == CUDA
    return out


@pytest.fixture(scope="module")
def here(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("devices") / "cpu-run"
    run_recipe(quickstart_recipe(SETS), out, progress=False)
    return out


def test_the_lock_records_the_device(here: Path) -> None:
    device = read_lock(here)["device"]
    assert device["type"] == "cpu" and device["name"]


def test_a_run_reproduced_on_its_own_device_is_bit_for_bit(here: Path) -> None:
    code, text = _cli("reproduce", here, "-q")
    assert code == 0, text
    assert "the statistics match bit for bit (made on cpu, checked on cpu)" in text
    last = text.strip().splitlines()[-1]
    assert last.startswith("reproduced: yes, bit for bit (made on cpu, checked on cpu)"), last


def test_statistics_perturbed_below_the_margin_keep_mask_and_weights(
    here: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    margin = _margin(Statistics.load(here / "stats"), quickstart_recipe(SETS).mask.top_k)
    relative = margin / 4  # each score moves by at most that (and one rounding): the order at every threshold holds
    assert 2**-24 < relative < 0.1, margin  # more than float32's own rounding: a real perturbation
    gpu = _run_elsewhere(tmp_path / "gpu-run", monkeypatch, relative, seed=1)
    cpu_lock, gpu_lock = read_lock(here), read_lock(gpu)
    assert gpu_lock["stats_sha256"] != cpu_lock["stats_sha256"]  # the sums differ...
    assert gpu_lock["mask_sha256"] == cpu_lock["mask_sha256"]  # ...the selection does not
    assert gpu_lock["outputs"] == cpu_lock["outputs"]  # nor any weight file

    code, text = _cli("reproduce", gpu, "-q")
    assert code == 0, text
    last = text.strip().splitlines()[-1]
    assert last.startswith(
        "reproduced: same mask and output weights; the statistics differ in float rounding (largest relative "
        "difference "
    ), last
    assert last.split("(", 1)[1].split(";")[1].startswith(" made on cuda, checked on cpu)"), last
    assert "NO" not in last and "yes" not in last

    code, out = _cli("reproduce", gpu, "-q", "--json")
    report = json.loads(out)
    assert code == 0 and report["reproduced"] is True and report["rerun"]["mask_match"] is True
    assert report["statistics"]["match"] is False
    assert 0 < report["statistics"]["max_relative_difference"] <= relative + 2**-23  # and float32 rounding
    assert report["devices"]["made_on"] == CUDA and report["devices"]["checked_on"]["type"] == "cpu"

    code, text = _cli("verify", gpu, "-q")
    assert code == 0, text
    assert text.strip().splitlines()[-1] == (
        "verify: OK: the mask and the output weights are the lock's, bit for bit (made on cuda, checked on cpu; "
        "the statistics are not recomputed: `reproduce` does that)"
    )


def test_statistics_perturbed_above_the_margin_change_the_mask_and_say_so(
    here: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gpu = _run_elsewhere(tmp_path / "gpu-run", monkeypatch, 0.5, seed=2)
    assert read_lock(gpu)["mask_sha256"] != read_lock(here)["mask_sha256"]
    code, text = _cli("reproduce", gpu, "-q")
    assert code == 1, text
    assert "re-run against the lock: mask DIFFERS" in text
    last = text.strip().splitlines()[-1]
    assert last.startswith("reproduced: NO: the mask differs: "), last
    # the difference, named: how many weights, in which matrices, from the run's own mask against the re-run's
    ours, theirs = Mask.load(gpu / "mask.safetensors"), Mask.load(here / "mask.safetensors")
    changed = {n for n in ours if not torch.equal(ours[n], theirs[n])}
    total = sum(int((ours[n] ^ theirs[n]).sum()) for n in changed)
    assert f"{total} weights selected differently in {len(changed)} of {len(ours)} matrices (" in last, last
    assert sorted(changed)[0] in last
    assert "the statistics differ in float rounding" in last and "made on cuda, checked on cpu" in last
    assert "yes" not in last


def test_verify_refuses_a_mask_that_is_not_the_locks(here: Path, tmp_path: Path) -> None:
    import shutil

    run = tmp_path / "run"
    shutil.copytree(here, run)
    mask = Mask.load(run / "mask.safetensors")
    name = next(iter(mask))
    flipped = {n: mask[n] for n in mask}
    flipped[name] = flipped[name].clone()
    flipped[name].view(-1)[0] ^= True
    Mask(flipped, mask.meta).save(run / "mask.safetensors")
    code, text = _cli("verify", run, "-q")
    assert code == 1, text
    assert text.strip().splitlines()[-1].startswith("verify: FAILED: the mask is not the lock's (sha256 "), text


def test_statistics_whose_header_records_other_library_versions_still_match(here: Path) -> None:
    """A statistics file's hash covers its header, which records the library versions: a lock made under older
    libraries with the same sums is told apart from one whose sums differ."""
    from mathneuro_edit.runs.verdict import compare_statistics, with_versions

    stats = Statistics.load(here / "stats")
    older = {"tool": "0.0.1", "torch": "2.0.0", "transformers": "5.0.0"}
    recorded = with_versions(stats, older).sha256
    assert recorded != stats.sha256
    same = compare_statistics(recorded, stats, None, older)
    assert same.match and same.versions_only and "only the library versions" in same.clause("made on cpu")
    name = next(iter(stats.math.norm_sum))
    stats.math.norm_sum[name] = stats.math.norm_sum[name] * (1 + 2**-20)
    assert compare_statistics(recorded, stats, None, older).match is False
