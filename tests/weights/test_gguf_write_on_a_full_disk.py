"""A full disk (ENOSPC) while `export --gguf` writes the GGUF file: exit 2, one line naming the output and the
space it lacks (what the whole output needs, GGUF included, minus what is free), and nothing left behind.
docs/reliability.md lists what each test promises."""

from __future__ import annotations

import errno
import math
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file

pytest.importorskip("gguf")

from mathneuro_edit.cli.main import main  # noqa: E402
from mathneuro_edit.engine.mask import Mask  # noqa: E402
from mathneuro_edit.organism import organism_path  # noqa: E402
from tests._faults import Usage  # noqa: E402


@pytest.fixture(scope="module")
def mask(tmp_path_factory) -> Path:
    sd = load_file(str(organism_path() / "model.safetensors"))
    m = {
        k: torch.zeros_like(v, dtype=torch.bool).index_fill_(0, torch.tensor([0]), True)
        for k, v in sd.items()
        if v.ndim == 2 and k.endswith("proj.weight")
    }
    path = tmp_path_factory.mktemp("gguf-disk") / "mask.safetensors"
    Mask(m, {"method": "mathneuro"}).save(path)
    return path


def _export(mask: Path, out: Path) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["export", "--mask", str(mask), "--out", str(out), "--gguf", "F32", "-q"])
    return result.exit_code, result.output


def test_export_gguf_onto_a_full_disk_is_one_line_naming_the_missing_megabytes(
    mask: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import mathneuro_edit.weights.gguf_writer as gguf_writer

    code, text = _export(mask, tmp_path / "complete")  # what the whole output takes on a disk with room
    assert code == 0, text
    shards = sum(p.stat().st_size for p in (tmp_path / "complete").glob("*.safetensors"))
    (gguf_file,) = (tmp_path / "complete").glob("*.gguf")
    missing = 2.5e6  # the disk lacks 2.5 MB: it holds the shards, not the GGUF file too
    free = int(shards + gguf_file.stat().st_size - missing)
    assert 0 < free and shards < free  # the shards fit; the disk fills during the GGUF write

    real, calls = gguf_writer._write_array, []

    def write(f, x) -> None:
        calls.append(1)
        if len(calls) <= 3:
            return real(f, x)
        f.write(b"\0" * 4096)  # part of the tensor reached the disk, then it was full
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(gguf_writer, "_write_array", write)
    monkeypatch.setattr("mathneuro_edit.util.outdir.shutil.disk_usage", lambda p: Usage(10**10, 10**10 - free, free))
    work = tmp_path / "disk"
    work.mkdir()
    code, text = _export(mask, work / "o")
    assert code == 2, text
    lines = [ln for ln in text.splitlines() if ln.strip()]
    mb = math.ceil(missing / 1e6)
    assert lines == [f"error: no space left on device writing {work / 'o'}; free {mb} MB or choose another --out"], text
    assert list(work.iterdir()) == []  # no output, no temporary folder or file, no lock


def test_a_full_disk_while_the_gguf_file_is_written_alone_leaves_no_partial_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer itself (export_gguf into a folder of its own): the partial file is removed even when closing it
    fails too, and the error is the same one line (an InputError: exit 2)."""
    import mathneuro_edit.weights.gguf_writer as gguf_writer
    from mathneuro_edit.errors import InputError

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(gguf_writer, "_encode", full)
    monkeypatch.setattr("mathneuro_edit.util.outdir.shutil.disk_usage", lambda p: Usage(10**10, 10**10, 0))
    target = tmp_path / "g" / "model-F32.gguf"
    with pytest.raises(InputError, match=r"^no space left on device writing .*model-F32.gguf; free \d+ MB or choose"):
        gguf_writer.export_gguf(organism_path(), "F32", target)
    assert list((tmp_path / "g").iterdir()) == []


def test_a_real_full_disk_raises_the_error_a_full_disk_is_recognised_by() -> None:
    """The kernel's own ENOSPC (/dev/full): the GGUF writer's array write raises OSError(ENOSPC), which the output
    rules turn into the one line above. numpy's ``tofile`` raised ``OSError("N requested and 0 written")`` with no
    errno: a raw OSError, exit 3 (issue 41, still open from round 3)."""
    import numpy as np

    import mathneuro_edit.weights.gguf_writer as gguf_writer
    from mathneuro_edit.util.outdir import as_space_error

    with open("/dev/full", "wb") as f:
        with pytest.raises(OSError) as e:
            gguf_writer._write_array(f, np.zeros(1 << 18, dtype=np.float32))  # 1 MB: past the file's buffer
    assert e.value.errno == errno.ENOSPC
    err = as_space_error(e.value, "/somewhere/model-F32.gguf", 10**7)
    assert err is not None and str(err).startswith("no space left on device writing /somewhere/model-F32.gguf")
