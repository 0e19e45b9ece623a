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


# ------------------------------------------------------------------------------------------------------------------
# Each statement of the verdict exactly (issue 48: mutmut on runs/verdict.py; each test below killed survivors
# of `scripts/mutation.sh verdict`): ok is a bool, never a falsy or truthy stand-in, and every clause is its words.


def test_the_verdict_s_ok_is_true_or_false_itself() -> None:
    differs = reproduce_verdict(RECORDED, {**RECORDED, "mask.safetensors": "x"}, SAME, CPU, CPU)
    mask = reproduce_verdict(None, None, Rerun(False, {}, StatsComparison(True, 0.0)), CPU, CPU)
    output = reproduce_verdict(None, None, Rerun(True, {"a": "differs"}, StatsComparison(True, 0.0)), CPU, CPU)
    same_device = reproduce_verdict(None, None, ROUNDED, CPU, CPU)
    header_only = reproduce_verdict(None, None, Rerun(True, {}, StatsComparison(False, 0.0)), CPU, CPU)
    assert [v.ok for v in (differs, mask, output, same_device)] == [False] * 4
    assert all(v.ok is False for v in (differs, mask, output, same_device))
    assert header_only.ok is True
    assert reproduce_verdict(None, None, SAME, CPU, CPU).ok is True


def test_a_mask_that_differs_without_the_run_s_mask_file_says_why_it_cannot_name_the_weights() -> None:
    v = reproduce_verdict(None, None, Rerun(False, {}, StatsComparison(True, 0.0)), CPU, CPU)
    assert v.text == (
        "NO: the mask differs: its sha256 is not the lock's (the run's mask file is not here to name the weights); "
        "the statistics match bit for bit (made on cpu, checked on cpu)"
    )


def test_every_output_that_differs_is_named_and_no_other() -> None:
    files = {"b/model.safetensors": "differs", "a/x.gguf": "missing", "c/ok": "match", "d/new": "extra"}
    v = reproduce_verdict(None, None, Rerun(True, files, StatsComparison(True, 0.0)), CPU, CPU)
    assert v.ok is False
    assert v.text == (
        "NO: same mask, but the output files differ: a/x.gguf (missing), b/model.safetensors (differs); "
        "the statistics match bit for bit (made on cpu, checked on cpu)"
    )


def test_unmeasured_statistics_of_another_device_are_float_rounding() -> None:
    unmeasured = Rerun(True, {}, StatsComparison(False, None))
    v = reproduce_verdict(None, None, unmeasured, H200, CPU)
    assert v.ok is True
    assert (
        v.text == "same mask and output weights; the statistics differ in float rounding (made on cuda, checked on cpu)"
    )


def test_files_the_lock_does_not_record_with_statistics_that_match_or_not() -> None:
    recorded = {"checkpoint/model.safetensors": "w", "eval.json": None}
    found = {"checkpoint/model.safetensors": "w", "eval.json": "e"}
    same = reproduce_verdict(recorded, found, SAME, CPU, CPU)
    assert same.ok is True and same.text == (
        "yes for every file the lock records: the re-run's mask, statistics and output files match it "
        "(made on cpu, checked on cpu); not checked (the lock records no sha256 of them): eval.json"
    )
    header = Rerun(True, {}, StatsComparison(False, 0.0))
    other = reproduce_verdict(recorded, found, header, CPU, CPU)
    assert other.ok is True and other.text == (
        "yes for every file the lock records: the re-run's mask and output files match it; the statistics' values "
        "match bit for bit; their header is not the lock's (it records the library versions and where the data "
        "came from; made on cpu, checked on cpu); not checked (the lock records no sha256 of them): eval.json"
    )


def test_the_devices_note_names_an_unrecorded_device_on_either_side() -> None:
    from mathneuro_edit.runs.verdict import devices_note

    assert devices_note(CPU, None) == "made on cpu, checked on an unrecorded device"
    assert devices_note(None, CPU) == "made on an unrecorded device, checked on cpu"
    assert devices_note(H200, dict(H200)) == "made on cuda, checked on cuda"


def test_each_statistics_clause_in_words() -> None:
    assert StatsComparison(None).clause("w") == "the lock records no statistics hash (w)"
    assert StatsComparison(True, 0.0).clause("w") == "the statistics match bit for bit (w)"
    assert StatsComparison(True, 0.0, versions_only=True).clause("w") == (
        "the statistics match bit for bit; only the library versions their header records changed (see the notes; w)"
    )
    # a hash that differs with versions_only set is still a difference (versions_only speaks of a match only)
    assert StatsComparison(False, None, versions_only=True).clause("w") == (
        "the statistics' sha256 is not the lock's and their values are not at hand to compare (pass the run "
        "folder, which holds them; w)"
    )
    # the default is the same device: a measured difference there is never float rounding
    assert StatsComparison(False, 3e-7).clause("w") == (
        "the statistics differ on the same device (largest relative difference 3e-07; w), where they must be the "
        "same bits: not another device's float rounding"
    )
    assert StatsComparison(False, None).clause("w", True) == "the statistics differ in float rounding (w)"
    assert StatsComparison(False, None).clause("w", None) == (
        "the statistics' sha256 is not the lock's and their values are not at hand to compare (pass the run "
        "folder, which holds them; w)"
    )
    assert StatsComparison(False, 0.0).clause("w", True) == (
        "the statistics' values match bit for bit; their header is not the lock's (it records the library versions "
        "and where the data came from; w)"
    )
    assert StatsComparison(False, 1.0).clause("w", None) == (
        "the statistics differ (largest relative difference 1; w); the lock records no device, so whether another "
        "device's float rounding explains it cannot be told"
    )


def test_values_differ_only_when_measured_above_zero_or_expected_on_another_device() -> None:
    assert StatsComparison(False, 0.0).values_differ(True) is False
    assert StatsComparison(False, 1e-9).values_differ(False) is True
    assert StatsComparison(False, None).values_differ(True) is True
    assert StatsComparison(False, None).values_differ(False) is False
    assert StatsComparison(False, None).values_differ(None) is False
    assert StatsComparison(True, 1.0).values_differ(True) is False
    assert StatsComparison(None, 1.0).values_differ(True) is False
