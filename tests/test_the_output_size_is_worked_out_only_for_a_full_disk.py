"""``run_recipe`` works out the whole output's size (the planner) only when the disk fills, for the message that
says what to free (issue 49 item 5: it ran the whole planner on every run for that one message). ``atomic_dir``
takes ``needed`` as a function and calls it only for a full disk. Millisecond tests on a temporary folder."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from mathneuro_edit.errors import InputError
from mathneuro_edit.util.outdir import atomic_dir
from tests._faults import Usage


def test_a_run_that_succeeds_or_fails_otherwise_never_works_out_the_size(tmp_path: Path) -> None:
    asked: list[int] = []
    with atomic_dir(tmp_path / "ok", overwrite=False, needed=lambda: asked.append(1) or 10**9) as tmp:
        (tmp / "a.txt").write_text("a")
    with pytest.raises(ValueError), atomic_dir(tmp_path / "bad", overwrite=False, needed=lambda: asked.append(1)):
        raise ValueError("not a disk error")
    assert asked == [] and (tmp_path / "ok" / "a.txt").is_file() and not (tmp_path / "bad").exists()


def test_a_full_disk_asks_for_the_size_once_and_names_what_the_output_lacks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[int] = []
    monkeypatch.setattr("mathneuro_edit.util.outdir.shutil.disk_usage", lambda p: Usage(10**10, 10**10 - 10**6, 10**6))
    with (
        pytest.raises(InputError) as e,
        atomic_dir(tmp_path / "o", overwrite=False, needed=lambda: asked.append(1) or 5 * 10**6),
    ):
        raise OSError(errno.ENOSPC, "No space left on device")
    assert asked == [1]
    assert str(e.value) == f"no space left on device writing {tmp_path / 'o'}; free 4 MB or choose another --out"
