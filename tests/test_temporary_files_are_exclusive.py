"""Every writer's temporary file is created exclusively: a symbolic link planted beside an output is never followed
(issue 41, class 1).

Masks and statistics were written to a fixed ``.NAME.tmp`` with a plain ``open``, the sweep cache to
``.NAME.PID.tmp``, figures to ``.NAME.tmp-PID``: ``ln -s ~/victim.txt DIR/.m.safetensors.tmp`` and the next
``mathneuro-edit mask --out DIR/m.safetensors`` overwrote victim.txt and left the output a link to it. Now one
helper (``util/files.py::atomic_writer``: ``mkstemp`` beside the target, ``O_EXCL``, a random name, synced, then
``os.replace``) writes them all. Each test plants links at the old fixed and predictable names (and at a name the
random generator is made to pick first) and checks that the victim is unchanged, the output a regular file, and
nothing is left behind. docs/reliability.md lists what each test promises.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

from mathneuro_edit.engine.mask import Mask
from mathneuro_edit.engine.stats import ActivationStats
from mathneuro_edit.errors import InputError
from mathneuro_edit.runs.sweep.cache import ResultCache, key_sha256
from mathneuro_edit.util.files import atomic_writer, write_json_atomic
from mathneuro_edit.util.outdir import claim

VICTIM_TEXT = "the victim's own content\n"


def _plant(target: Path, victim: Path) -> list[Path]:
    """Links to ``victim`` at every name a writer of this package once used for ``target``'s temporary file."""
    pid = os.getpid()
    names = [f".{target.name}.tmp", f".{target.name}.{pid}.tmp", f".{target.name}.tmp-{pid}", f".{target.name}-.tmp"]
    links = [target.with_name(n) for n in names]
    for link in links:
        link.symlink_to(victim)
    return links


def _check(target: Path, victim: Path, links: list[Path]) -> None:
    assert victim.read_text() == VICTIM_TEXT  # never written through a link
    assert target.is_file() and not target.is_symlink() and target.stat().st_size > 0
    assert all(link.is_symlink() for link in links)  # left as they were
    others = {p.name for p in target.parent.iterdir()} - {target.name, victim.name} - {p.name for p in links}
    assert not [n for n in others if n.endswith(".tmp")], others  # no temporary file of ours left


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    v = tmp_path / "victim.txt"
    v.write_text(VICTIM_TEXT)
    return v


def _mask() -> Mask:
    return Mask({"w": torch.tensor([[True, False], [False, True]])}, {"method": "mathneuro"})


def _stats() -> ActivationStats:
    from tests.engine.test_mask import _stats as synthetic_stats

    return synthetic_stats(0)


def _figure(path: Path) -> None:
    from mathneuro_edit.runs.inspect import pyplot, save_figure

    plt = pyplot(required=False)
    if plt is None:
        pytest.skip("matplotlib is not installed")
    save_figure(plt.figure(), path)


def _gguf(path: Path) -> None:
    pytest.importorskip("gguf")
    from mathneuro_edit.organism import organism_path
    from mathneuro_edit.weights.gguf_writer import export_gguf

    export_gguf(organism_path(), "F32", path)


WRITERS: dict[str, tuple[str, Callable[[Path], object]]] = {
    "mask": ("m.safetensors", lambda p: _mask().save(p)),
    "statistics": ("math.stats.safetensors", lambda p: _stats().save(p)),
    "json": ("eval.json", lambda p: write_json_atomic(p, {"a": 1})),
    "figure": ("layers.png", _figure),
    "gguf": ("model-F32.gguf", _gguf),
}


@pytest.mark.parametrize("writer", list(WRITERS))
def test_a_link_planted_at_a_temporary_name_is_never_followed(tmp_path: Path, victim: Path, writer: str) -> None:
    name, write = WRITERS[writer]
    out = tmp_path / "out"
    out.mkdir()
    target = out / name
    links = _plant(target, victim)
    write(target)
    _check(target, victim, links)


def test_the_gguf_writer_never_reopens_its_temporary_file_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """gguf's writer opens the path it is given with ``open(path, "wb")``: handed the name of our temporary file,
    it re-opened a name that someone could have replaced with a link after mkstemp created it. It gets the open
    file instead."""
    import builtins

    real_open, opened = builtins.open, []

    def spy(file, mode="r", *args, **kwargs):
        if "w" in str(mode) or "a" in str(mode) or "+" in str(mode):
            opened.append(str(file))
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", spy)
    out = tmp_path / "g"
    out.mkdir()
    _gguf(out / "model-F32.gguf")
    assert [f for f in opened if Path(f).parent == out] == []
    assert (out / "model-F32.gguf").read_bytes()[:4] == b"GGUF"


def test_a_link_at_the_output_itself_is_replaced_not_followed(tmp_path: Path, victim: Path) -> None:
    target = tmp_path / "m.safetensors"
    target.symlink_to(victim)
    _mask().save(target)
    assert victim.read_text() == VICTIM_TEXT and not target.is_symlink()
    assert Mask.load(target).sha256 == _mask().sha256


@pytest.fixture
def predictable(monkeypatch: pytest.MonkeyPatch) -> None:
    """tempfile's random names made predictable: first ``planted``, then ``fresh`` (mkstemp must skip a taken one)."""

    def names() -> Iterator[str]:
        yield from ("planted", "fresh", "third")

    monkeypatch.setattr(tempfile, "_get_candidate_names", names)


def test_a_link_at_the_name_the_random_generator_picks_is_skipped(
    tmp_path: Path, victim: Path, predictable: None
) -> None:
    target = tmp_path / "m.safetensors"
    link = tmp_path / ".m.safetensors-planted.tmp"
    link.symlink_to(victim)
    _mask().save(target)
    _check(target, victim, [link])
    cache = ResultCache(tmp_path / "sweep")
    (tmp_path / "sweep" / "cache").mkdir(parents=True)
    entry = f"{key_sha256({'what': 'base'})}.json"
    (tmp_path / "sweep" / "cache" / f".{entry}-planted.tmp").symlink_to(victim)
    cache.put({"what": "base"}, {"correct": [True]})
    assert victim.read_text() == VICTIM_TEXT and cache.get({"what": "base"}) == {"correct": [True]}


def test_the_sweep_cache_never_writes_through_a_link(tmp_path: Path, victim: Path) -> None:
    cache = ResultCache(tmp_path)
    cache.folder.mkdir()
    target = cache.folder / f"{key_sha256({'what': 'base'})}.json"
    links = _plant(target, victim)
    cache.put({"what": "base"}, {"correct": [True]})
    _check(target, victim, links)


def test_a_failed_write_leaves_neither_a_temporary_file_nor_a_changed_target(tmp_path: Path) -> None:
    target = tmp_path / "a.json"
    target.write_text("old\n")
    with pytest.raises(RuntimeError, match="midway"), atomic_writer(target) as f:
        f.write(b"half")
        raise RuntimeError("midway")
    assert target.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["a.json"]
    with pytest.raises(InputError, match="output folder does not exist"), atomic_writer(tmp_path / "no" / "a"):
        pass


def test_the_data_is_synced_before_the_rename(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A power cut must leave the old file or the new one, never an empty file under the name."""
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (events.append("fsync"), real_fsync(fd))[1])
    monkeypatch.setattr(os, "replace", lambda a, b: (events.append("replace"), real_replace(a, b))[1])
    write_json_atomic(tmp_path / "a.json", {"a": 1})
    assert events == ["fsync", "replace"]


def test_the_file_gets_the_umask_mode_not_mkstemps_0600(tmp_path: Path) -> None:
    old = os.umask(0o027)
    try:
        with atomic_writer(tmp_path / "a.bin") as f:
            f.write(b"x")
    finally:
        os.umask(old)
    assert (tmp_path / "a.bin").stat().st_mode & 0o777 == 0o640


def test_clean_temporary_removes_what_a_killed_put_left(tmp_path: Path, victim: Path) -> None:
    """A real kill -9 between the write and the rename leaves the new-style temporary file; the next run's
    ``clean_temporary`` removes it (and a planted link, which it unlinks without following), keeping the entries."""
    cache = ResultCache(tmp_path)
    cache.put({"what": "kept"}, {"correct": [True]})
    script = textwrap.dedent(
        """
        import os, signal, sys
        from mathneuro_edit.runs.sweep.cache import ResultCache
        os.replace = lambda *a: os.kill(os.getpid(), signal.SIGKILL)  # killed just before the rename
        ResultCache(sys.argv[1]).put({"what": "killed"}, {"correct": [False]})
        """
    )
    proc = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    left = [p for p in cache.folder.iterdir() if p.name.startswith(".")]
    assert len(left) == 1 and left[0].name.endswith(".tmp"), left  # the killed run's temporary file
    (cache.folder / ".planted.tmp").symlink_to(victim)
    cache.clean_temporary()
    assert sorted(p.name for p in cache.folder.iterdir()) == [f"{key_sha256({'what': 'kept'})}.json"]
    assert victim.read_text() == VICTIM_TEXT and cache.get({"what": "kept"}) == {"correct": [True]}


def test_a_link_at_the_outputs_lock_name_is_refused(tmp_path: Path, victim: Path) -> None:
    """The lock's name is fixed (every run must find it) and a run truncates and writes it: a link there is one
    line, never followed."""
    (tmp_path / ".out.lock").symlink_to(victim)
    with pytest.raises(InputError, match=r"\.out\.lock: a symbolic link where the output's lock file goes; remove"):
        with claim(tmp_path / "out"):
            pass
    assert victim.read_text() == VICTIM_TEXT
    os.mkfifo(tmp_path / ".fifo.lock")
    with pytest.raises(InputError, match="not a regular file"):
        with claim(tmp_path / "fifo"):
            pass
