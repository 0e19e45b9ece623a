"""Simulated disk faults shared by the tests: a full disk under an artifact writer."""

from __future__ import annotations

import errno
from collections import namedtuple

import pytest

Usage = namedtuple("Usage", "total used free")


def fill_disk(monkeypatch: pytest.MonkeyPatch, save_file_at: str = "mathneuro_edit.engine.stats.save_file") -> None:
    """Make ``save_file_at`` fail with ENOSPC and report 0 bytes free, as a full disk does."""

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(save_file_at, full)
    monkeypatch.setattr("mathneuro_edit.util.outdir.shutil.disk_usage", lambda p: Usage(10**9, 10**9, 0))
