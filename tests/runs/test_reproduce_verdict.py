"""The verdict of `reproduce`, a pure function of the recorded and found hashes, the re-run and the two devices
(milliseconds, no run): a file that differs is a NO naming it first; float rounding is another device's only; a
lock without a device record is never taken for another device; files a lock does not record are never "bit for
bit"."""

from __future__ import annotations

from mathneuro_edit.runs.verdict import Rerun, StatsComparison, another_device, reproduce_verdict

CPU = {"type": "cpu", "name": "x86_64"}
H200 = {"type": "cuda", "name": "NVIDIA H200"}
H100 = {"type": "cuda", "name": "NVIDIA H100 80GB HBM3"}
SAME = Rerun(True, {"checkpoint/model.safetensors": "match"}, StatsComparison(True, 0.0))
ROUNDED = Rerun(True, {"checkpoint/model.safetensors": "match"}, StatsComparison(False, 3e-7))
RECORDED = {"mask.safetensors": "m", "stats/math.stats.safetensors": "s", "checkpoint/model.safetensors": "w"}


def test_the_first_file_that_differs_is_named_first_whatever_the_rerun_gives() -> None:
    found = {**RECORDED, "stats/math.stats.safetensors": "flipped", "checkpoint/model.safetensors": "other"}
    verdict = reproduce_verdict(RECORDED, found, SAME, CPU, CPU)
    assert not verdict.ok
    assert verdict.text == (
        "NO: the files you have differ from the lock: stats/math.stats.safetensors (changed), "
        "checkpoint/model.safetensors (changed)"
    )
    missing = reproduce_verdict(
        RECORDED, {k: v for k, v in RECORDED.items() if k != "mask.safetensors"}, SAME, CPU, CPU
    )
    assert not missing.ok and missing.text == "NO: the files you have differ from the lock: mask.safetensors (missing)"


def test_every_file_matching_and_the_rerun_the_same_is_bit_for_bit() -> None:
    verdict = reproduce_verdict(RECORDED, dict(RECORDED), SAME, CPU, CPU)
    assert verdict.ok and verdict.text == "yes, bit for bit (made on cpu, checked on cpu)"
    alone = reproduce_verdict(None, None, SAME, CPU, CPU)  # a lock file alone: only the re-run to judge
    assert alone.ok and alone.text == "yes, bit for bit (made on cpu, checked on cpu)"


def test_files_the_lock_does_not_record_are_named_and_never_bit_for_bit() -> None:
    recorded = {"mask.safetensors": None, "checkpoint/model.safetensors": "w", "eval.json": None}
    found = {"mask.safetensors": "m", "checkpoint/model.safetensors": "w", "eval.json": "e"}
    verdict = reproduce_verdict(recorded, found, SAME, CPU, CPU)
    assert verdict.ok
    assert "bit for bit" not in verdict.text
    assert verdict.text.endswith("not checked (the lock records no sha256 of them): mask.safetensors, eval.json")
    # a recorded None for a file that is not there is nothing to check
    gone = reproduce_verdict(recorded, {"checkpoint/model.safetensors": "w"}, SAME, CPU, CPU)
    assert gone.text == "yes, bit for bit (made on cpu, checked on cpu)"


def test_statistics_that_differ_on_another_device_are_float_rounding() -> None:
    verdict = reproduce_verdict(RECORDED, dict(RECORDED), ROUNDED, H200, CPU)
    assert verdict.ok
    assert verdict.text == (
        "same mask and output weights; the statistics differ in float rounding (largest relative difference "
        "3e-07; made on cuda, checked on cpu)"
    )
    two_gpus = reproduce_verdict(RECORDED, dict(RECORDED), ROUNDED, H200, H100)  # another model of one kind
    assert two_gpus.ok and "float rounding" in two_gpus.text
    assert "made on cuda (NVIDIA H200), checked on cuda (NVIDIA H100 80GB HBM3)" in two_gpus.text


def test_statistics_that_differ_on_the_same_device_are_a_no_not_float_rounding() -> None:
    verdict = reproduce_verdict(RECORDED, dict(RECORDED), ROUNDED, CPU, dict(CPU))
    assert not verdict.ok
    assert verdict.text.startswith("NO: same mask and output weights, but the statistics differ on the same device")
    assert "not another device's float rounding" in verdict.text and "made on cpu, checked on cpu" in verdict.text
    assert "differ in float rounding" not in verdict.text


def test_a_lock_without_a_device_is_not_called_another_device() -> None:
    assert another_device(None, CPU) is None and another_device(H200, {"name": "x"}) is None
    verdict = reproduce_verdict(RECORDED, dict(RECORDED), ROUNDED, None, CPU)
    assert verdict.ok  # nothing shows the lock's promise broken: the same mask and weights, the device unknown
    assert "float rounding (" not in verdict.text and "differ in float rounding" not in verdict.text
    assert (
        "the lock records no device" in verdict.text and "made on an unrecorded device, checked on cpu" in verdict.text
    )
    # unmeasured (the run's own statistics not at hand): only another device would make a differing hash expected
    unmeasured = Rerun(True, {}, StatsComparison(False, None))
    text = reproduce_verdict(None, None, unmeasured, None, CPU).text
    assert text.startswith("yes, bit for bit: the mask and every output file; the statistics' sha256 is not the lock's")
    assert "float rounding" not in text


def test_a_mask_or_an_output_of_the_rerun_that_differs_is_a_no() -> None:
    mask = reproduce_verdict(
        RECORDED, dict(RECORDED), Rerun(False, {}, StatsComparison(True, 0.0), "2 weights"), CPU, CPU
    )
    assert not mask.ok and mask.text.startswith("NO: the mask differs: 2 weights; the statistics match bit for bit")
    rerun = Rerun(True, {"checkpoint/model.safetensors": "differs", "adapter/x": "extra"}, StatsComparison(True, 0.0))
    out = reproduce_verdict(RECORDED, dict(RECORDED), rerun, CPU, CPU)
    assert not out.ok and out.text.startswith(
        "NO: same mask, but the output files differ: checkpoint/model.safetensors (differs);"
    )
