"""``verify`` of an export whose GGUF is damaged or hostile reports it, in milliseconds to seconds, and never ends in
an internal error or a hang (issue 41, class 8); a GGUF base with such a header is one line (exit 2).

gguf's reader trusts the header: a truncated file, a tensor or key count of 2**60, an array nested 100,000 deep, a
link to /dev/zero ended in exit 3 "internal error", and a FIFO in place of the file blocked forever.
:func:`~mathneuro_edit.weights.gguf_header.check_gguf_header` walks the header first, bounded by the file."""

from __future__ import annotations

import os
import shutil
import struct
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("gguf")

from mathneuro_edit.errors import InputError  # noqa: E402
from mathneuro_edit.weights.audit import verify  # noqa: E402
from mathneuro_edit.weights.checkpoint_writer import export_checkpoint  # noqa: E402
from mathneuro_edit.weights.gguf_header import check_gguf_header  # noqa: E402
from mathneuro_edit.weights.gguf_writer import export_gguf, gguf_file_type  # noqa: E402
from tests._models import load_tiny, tiny_mask  # noqa: E402
from tests.weights.test_gguf import SCALE, save_base  # noqa: E402

NAME = "model-Q8_0.gguf"


@pytest.fixture(scope="module")
def export(tmp_path_factory) -> tuple[Path, Path, object]:
    root = tmp_path_factory.mktemp("damaged")
    base = save_base(root / "base", "llama")
    mask = tiny_mask(load_tiny(base), top_k=0.2)
    out = export_checkpoint(base, mask, SCALE, root / "out")
    export_gguf(out, "Q8_0")
    assert verify(out, base, mask, SCALE).ok
    return out, base, mask


def _nested(depth: int) -> bytes:
    """A GGUF whose one key holds an array of an array of ... ``depth`` deep (no tensors)."""
    key = b"general.deep"
    body = struct.pack("<Q", len(key)) + key + struct.pack("<I", 9)  # ARRAY
    body += struct.pack("<IQ", 9, 1) * (depth - 1) + struct.pack("<IQ", 0, 0)  # ... of ARRAY (1 item), then UINT8 x 0
    return b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + body


def _damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "truncated in the header":
        path.write_bytes(data[:200])
    elif how == "truncated in the data":
        path.write_bytes(data[: len(data) - 1000])
    elif how == "2**60 tensors":
        path.write_bytes(data[:8] + struct.pack("<Q", 1 << 60) + data[16:])
    elif how == "2**60 keys":
        path.write_bytes(data[:16] + struct.pack("<Q", 1 << 60) + data[24:])
    elif how == "nested 100,000 deep":
        path.write_bytes(_nested(100_000))
    elif how == "a link to /dev/zero":
        path.unlink()
        path.symlink_to("/dev/zero")
    elif how == "not a GGUF":
        path.write_bytes(b"PK\x03\x04" + data[4:])
    else:
        raise ValueError(how)


@pytest.mark.parametrize(
    ("how", "why"),
    [
        ("truncated in the header", "damaged file)"),
        ("truncated in the data", "lies beyond the end of the file"),
        ("2**60 tensors", "its tensor count is 1,152,921,504,606,846,976, more than its"),
        ("2**60 keys", "its key count is 1,152,921,504,606,846,976, more than its"),
        ("nested 100,000 deep", "general.deep nests arrays more than 8 deep"),
        ("a link to /dev/zero", "not a regular file"),
        ("not a GGUF", "not a GGUF file"),
    ],
)
def test_verify_reports_a_damaged_gguf(export, tmp_path: Path, how: str, why: str) -> None:
    out, base, mask = export
    copy = Path(shutil.copytree(out, tmp_path / "out"))
    _damage(copy / NAME, how)
    start = time.monotonic()
    report = verify(copy, base, mask, SCALE)  # no exception: a finding of the audit
    assert time.monotonic() - start < 60
    assert not report.ok
    bad = [m for m in report.mismatches if m.startswith(NAME)]
    assert len(bad) == 1 and why in bad[0], report.mismatches
    with pytest.raises(InputError, match="GGUF|regular file"):  # the same file as a base: one line, exit 2
        gguf_file_type(copy / NAME)


def test_a_fifo_in_place_of_the_gguf_is_reported_without_blocking(export, tmp_path: Path) -> None:
    out, base, mask = export
    copy = Path(shutil.copytree(out, tmp_path / "out"))
    (copy / NAME).unlink()
    os.mkfifo(copy / NAME)
    needed = []

    def unblock() -> None:  # if the FIFO were opened for reading, a writer after 20 s ends the wait (test fails)
        time.sleep(20)
        needed.append(True)
        with open(copy / NAME, "wb") as f:
            f.write(b"GGUF")

    threading.Thread(target=unblock, daemon=True).start()
    report = verify(copy, base, mask, SCALE)
    assert not needed, "verify blocked on the FIFO"
    assert any(m.startswith(f"{NAME}: ") and "not a regular file" in m for m in report.mismatches), report


def test_every_truncation_of_a_gguf_is_one_input_error(export, tmp_path: Path) -> None:
    data = (export[0] / NAME).read_bytes()
    path = tmp_path / "t.gguf"
    cuts = sorted({*range(0, 400, 7), *range(400, len(data), max(1, len(data) // 150))})
    for cut in cuts:
        path.write_bytes(data[:cut])
        with pytest.raises(InputError, match=r"t\.gguf: not a (readable )?GGUF file"):
            check_gguf_header(path)
    path.write_bytes(data)
    check_gguf_header(path)  # the whole file is read as it is


def test_a_hostile_header_costs_milliseconds(tmp_path: Path) -> None:
    path = tmp_path / "deep.gguf"
    path.write_bytes(_nested(100_000))
    start = time.monotonic()
    with pytest.raises(InputError, match="nests arrays more than 8 deep"):
        check_gguf_header(path)
    # a vocabulary-sized array of strings claiming more than the file holds is refused before it is walked
    key = b"tokenizer.ggml.tokens"
    body = struct.pack("<Q", len(key)) + key + struct.pack("<IIQ", 9, 8, 1 << 40)
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + body + b"\0" * 64)
    with pytest.raises(InputError, match="array length of tokenizer.ggml.tokens is 1,099,511,627,776"):
        check_gguf_header(path)
    assert time.monotonic() - start < 2
