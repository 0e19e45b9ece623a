"""The verdict of ``verify`` as a pure function of what it found (issue 48 item 2; milliseconds, no audit run):
``RunVerification.verdict_line`` / ``failure_line`` and the per-file check it rests on
(``publish/integrity.py: compare_files``, ``FileCheck``). Never OK when a file, the mask or an output differs;
never "bit for bit" of files the lock records no sha256 of; the devices named, an unrecorded one as such."""

from __future__ import annotations

from mathneuro_edit.publish.integrity import FileCheck, compare_files
from mathneuro_edit.runs.release import RunVerification

CPU = {"type": "cpu", "name": "x86_64"}
H200 = {"type": "cuda", "name": "NVIDIA H200"}


def test_compare_files_gives_each_recorded_file_its_state_in_the_recorded_order() -> None:
    present = {"z": "1", "b": "x", "c": "3", "e": "5", "f": "6"}
    recorded = {"z": "1", "b": "2", "d": "4", "e": None, "g": None}
    states = compare_files(present, recorded)
    assert states == {"z": "match", "b": "changed", "d": "missing", "e": "unchecked", "c": "extra", "f": "extra"}
    assert list(states) == ["z", "b", "d", "e", "c", "f"]
    assert compare_files({}, {}) == {}


def test_a_file_check_is_ok_with_matches_and_unchecked_files_only() -> None:
    ok = FileCheck.compared("run", {"a": "1", "e": "5"}, {"a": "1", "e": None})
    assert ok.ok is True and ok.differences() == {} and ok.unchecked() == ["e"]
    assert ok.to_dict() == {"where": "run", "ok": True, "files": {"a": "match", "e": "unchecked"}}
    assert ok.to_text() == (
        "files in run: 1 checked against the lock's sha256, all match; 1 not checked (the lock records no sha256 "
        "of them)\n  match    a\n  unchecked e"
    )
    for found in ({"a": "2"}, {}, {"a": "1", "x": "9"}):
        bad = FileCheck.compared("run", found, {"a": "1"})
        assert bad.ok is False, found
    extra = FileCheck.compared("r\x1b[31m", {"a": "1", "b\nerror: x": "2"}, {"a": "1"})
    assert extra.differences() == {"b\nerror: x": "extra"}
    assert extra.to_text() == (
        "files in r\\x1b[31m: 2 checked against the lock's sha256, 1 differ\n  match    a\n  extra    b\\x0aerror: x"
    )


def _verification(**kw: object) -> RunVerification:
    return RunVerification(audits=[], **kw)  # type: ignore[arg-type]


def test_ok_without_a_lock_says_what_held_and_nothing_of_a_lock() -> None:
    v = _verification()
    assert v.ok is True and v.failure_line() == ""
    assert v.verdict_line() == (
        "verify: OK: the output weights are the base with this mask and scale applied, bit for bit"
    )


def test_ok_with_a_lock_names_both_devices_and_the_files_it_could_not_check() -> None:
    files = FileCheck.compared("run", {"a": "1", "eval.json": "e"}, {"a": "1", "eval.json": None})
    v = _verification(files=files, made_on=H200, checked_on="cpu", mask_sha256="m" * 64, lock_mask_sha256="m" * 64)
    assert v.verdict_line() == (
        "verify: OK: the mask and the output weights are the lock's, bit for bit (made on cuda, checked on cpu; "
        "the statistics are not recomputed: `reproduce` does that); not checked (the lock records no sha256 of "
        "them): eval.json"
    )
    unrecorded = _verification(made_on=None, lock_mask_sha256="m" * 64)
    assert unrecorded.verdict_line() == (
        "verify: OK: the mask and the output weights are the lock's, bit for bit (made on an unrecorded device, "
        "checked on cpu; the statistics are not recomputed: `reproduce` does that)"
    )


def test_every_failure_is_named_the_mask_first() -> None:
    files = FileCheck.compared("run", {"a": "2", "b": "1"}, {"a": "1", "b": "1", "c": "3"})
    v = _verification(
        files=files,
        failed=["checkpoint", "files", "mask"],
        mask_sha256="a" * 64,
        lock_mask_sha256="b" * 64,
        made_on=CPU,
    )
    assert v.ok is False
    line = (
        "verify: FAILED: the mask is not the lock's (sha256 aaaaaaaaaaaa..., the lock records bbbbbbbbbbbb...); "
        "checkpoint differ(s) from the base + mask + scale; files differ from the lock's sha256: a (changed), "
        "c (missing) (details above)"
    )
    assert v.failure_line() == line and v.verdict_line() == line
    assert v.to_dict()["verdict"] == line and v.to_dict()["ok"] is False
    only_files = _verification(files=files, failed=["files"])
    assert only_files.verdict_line() == (
        "verify: FAILED: files differ from the lock's sha256: a (changed), c (missing) (details above)"
    )
    outputs = _verification(failed=["checkpoint", "adapter"])
    assert (
        outputs.verdict_line()
        == "verify: FAILED: checkpoint, adapter differ(s) from the base + mask + scale (details above)"
    )


def test_the_check_keeps_what_it_compared_and_the_json_says_every_part() -> None:
    files = FileCheck.compared("run", {"a": "1", "e": "5", "f": "6"}, {"a": "1", "e": None, "f": None})
    assert (files.recorded, files.found) == ({"a": "1", "e": None, "f": None}, {"a": "1", "e": "5", "f": "6"})
    v = _verification(files=files, made_on=CPU, mask_sha256="m" * 64, lock_mask_sha256="m" * 64)
    assert v.verdict_line().endswith("not checked (the lock records no sha256 of them): e, f")
    assert v.to_dict() == {
        "ok": True,
        "failed": [],
        "verdict": v.verdict_line(),
        "devices": {"made_on": CPU, "checked_on": "cpu"},
        "mask": {"sha256": "m" * 64, "lock_sha256": "m" * 64},
        "files_checked": {"where": "run", "ok": True, "files": {"a": "match", "e": "unchecked", "f": "unchecked"}},
        "audits": [],
    }
    assert _verification().to_dict()["files_checked"] is None
