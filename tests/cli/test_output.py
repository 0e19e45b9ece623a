"""What a new user sees: only our lines.

The transcript test runs `run`, `sweep`, `inspect --plot`, `consistency` and `verify` on the embedded default
(no RECIPE: the organism, offline) in fresh processes, as a user's shell would, and compares stderr with the golden
file tests/golden/new_user_transcript.txt (paths, hashes and measured numbers normalised). Regenerate it with
MATHNEURO_EDIT_UPDATE_GOLDEN=1 after an intended change, and read the diff.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from mathneuro_edit.util.console import (
    KNOWN_WARNINGS,
    Stages,
    markdown_table_text,
    quiet_libraries,
    table,
)

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "new_user_transcript.txt"
# the quickstart, shrunk to seconds (organism answers fit in 24 tokens)
SMALL = [
    "--set",
    "data.samples=8",
    "--set",
    "evaluation.samples=4",
    "--set",
    "evaluation.max_new_tokens=24",
    "--set",
    "sweep.selection_samples=4",
    "--set",
    "sweep.confirmation_samples=4",
]
# what the libraries print when nobody silences them: their bars, their warnings
LIBRARY = re.compile(r"Loading weights|it/s\]|\d+%\||Warning|warnings\.warn|\r|Traceback")


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHONWARNINGS", "HF_HUB_DISABLE_PROGRESS"))}
    env.update(
        MATHNEURO_EDIT_DEBUG="",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        OMP_NUM_THREADS="1",
        PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parents[2]), env.get("PYTHONPATH", "")]),
    )
    proc = subprocess.run(
        [sys.executable, "-m", "mathneuro_edit.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    return proc


def _normalise(text: str) -> str:
    """Hashes -> HASH and, outside the stage lines (kept exactly), every measured number -> #."""
    text = re.sub(r"\b[0-9a-f]{12,64}\b", "HASH", text)
    out = []
    for line in text.splitlines():
        exact = re.match(r"\[\d+/\d+\] |      edit \d+/\d+: |(checkpoint|peft) \S+: OK ", line)
        if not exact:
            indent = line[: len(line) - len(line.lstrip())]
            body = re.sub(r"(?<![A-Za-z0-9.])\d[\d,.e+-]*", "#", line.lstrip())
            line = indent + re.sub(r" {2,}", "  ", body)  # column widths follow the numbers
        out.append(line.rstrip())
    return "\n".join(out)


@pytest.fixture(scope="module")
def transcript(tmp_path_factory) -> dict[str, subprocess.CompletedProcess]:
    cwd = tmp_path_factory.mktemp("newuser")
    return {
        "run": _cli("run", "--out", "out", *SMALL, cwd=cwd),
        "sweep": _cli("sweep", "--out", "sweep", "--top-k", "0.05", "--scale", "0,1.1", *SMALL, cwd=cwd),
        "inspect": _cli("inspect", "out/mask.safetensors", "--plot", "layers.png", cwd=cwd),
        "consistency": _cli(
            "consistency", "--out", "cons", "--sizes", "1,2,8", "--repeats", "2", "--set", "data.samples=8", cwd=cwd
        ),
        "verify": _cli("verify", "out", cwd=cwd),
        "cwd": cwd,  # type: ignore[dict-item]
    }


@pytest.mark.slow
def test_new_user_transcript_shows_only_our_lines(transcript):
    text = ""
    for name in ("run", "sweep", "inspect", "consistency", "verify"):
        proc = transcript[name]
        for stream in (proc.stdout, proc.stderr):
            bad = [line for line in stream.splitlines() if LIBRARY.search(line)]
            assert not bad, f"{name}: library output leaked: {bad[:3]}"
        stderr = proc.stderr.splitlines()
        # every stderr line is a numbered stage or an indented note under one
        assert all(re.match(r"\[\d+/\d+\] |      ", line) for line in stderr), (name, stderr)
        text += f"$ mathneuro-edit {name} ...\n{proc.stderr}"
        # inspect's stdout is the per-tensor table: its last line (the plot's path) stands for it
        text += proc.stdout.splitlines()[-1] + "\n" if name == "inspect" else proc.stdout
    got = _normalise(text) + "\n"
    if os.environ.get("MATHNEURO_EDIT_UPDATE_GOLDEN"):
        GOLDEN.write_text(got)
    assert got == GOLDEN.read_text()


@pytest.mark.slow
def test_transcript_stage_counts_are_exact(transcript):
    for name in ("run", "sweep", "consistency", "verify"):
        stages = [line for line in transcript[name].stderr.splitlines() if line.startswith("[")]
        n = len(stages)
        assert [s.split("]")[0] for s in stages] == [f"[{i}/{n}" for i in range(1, n + 1)], (name, stages)
    sweep = transcript["sweep"].stderr
    assert "round 1/1, point 1/2: top_k=0.05 scale=0 (problems 1-4)" in sweep
    assert "round 1/1, point 2/2: top_k=0.05 scale=1.1 (problems 1-4)" in sweep
    table_lines = transcript["sweep"].stdout.splitlines()
    assert table_lines[0].split() == [
        "variant",
        "top_k",
        "scale",
        "weights",
        "n",
        "math",
        "(95%",
        "CI)",
        "gain",
        "(pp)",
        "p",
        "Holm",
        "p",
        "general",
        "KL",
        "mark",
    ]
    assert not any("," in line.split()[0] for line in table_lines[:3])  # a table, not the CSV
    assert (transcript["cwd"] / "sweep" / "sweep.csv").read_text().startswith("variant,round,top_k,scale,")
    info = json.loads((transcript["cwd"] / "cons" / "consistency.json").read_text())
    assert (info["top_k"], info["sizes"], info["repeats"], info["math_samples"]) == (0.05, [1, 2, 8], 2, 8)


def test_known_warnings_silenced_only_inside_and_only_by_message_and_category():
    category, message, _ = KNOWN_WARNINGS[0]
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with quiet_libraries():
            warnings.warn(f"{message} (x)", category, stacklevel=2)  # known: silenced
            warnings.warn(f"{message} (x)", RuntimeWarning, stacklevel=2)  # same text, other category: shown
            warnings.warn("something else", category, stacklevel=2)  # other text: shown
        warnings.warn(f"{message} (x)", category, stacklevel=2)  # after the block: the caller's filters again
    assert [(w.category, str(w.message)[:14]) for w in seen] == [
        (RuntimeWarning, message[:14]),
        (category, "something else"),
        (category, message[:14]),
    ]
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with quiet_libraries(verbose=True):
            warnings.warn(f"{message} (x)", category, stacklevel=2)
    assert len(seen) == 1  # --verbose: every warning


def test_quiet_libraries_restores_the_library_bars():
    from huggingface_hub.utils import are_progress_bars_disabled
    from transformers.utils import logging as hf_logging

    assert hf_logging.is_progress_bar_enabled() and not are_progress_bars_disabled()
    with quiet_libraries():
        assert not hf_logging.is_progress_bar_enabled() and are_progress_bars_disabled()
    assert hf_logging.is_progress_bar_enabled() and not are_progress_bars_disabled()
    hf_logging.disable_progress_bar()
    try:
        with quiet_libraries():
            pass
        assert not hf_logging.is_progress_bar_enabled()  # a user who turned them off keeps them off
    finally:
        hf_logging.enable_progress_bar()


def test_pytest_filters_are_the_known_warnings():
    import tomllib

    cfg = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    filters = cfg["tool"]["pytest"]["ini_options"]["filterwarnings"]
    assert {f for f in filters if f != "ignore::DeprecationWarning"} == {
        f"ignore:{m}:{c.__name__}" for c, m, _ in KNOWN_WARNINGS
    }


@pytest.mark.slow
def test_load_edited_shows_no_peft_warning(transcript):
    from mathneuro_edit.organism import organism_path
    from mathneuro_edit.weights.adapter import load_edited

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")  # overrides pytest's filters: the old code showed both PEFT warnings
        model = load_edited(str(organism_path()), transcript["cwd"] / "out" / "adapter")
    assert model is not None
    assert [str(w.message) for w in seen if w.category in (UserWarning, FutureWarning)] == []


def test_stage_printer_and_tables():
    lines: list[str] = []
    st = Stages(2, lines.append)
    st.start("load organism")
    st.note("1 parameter\nsecond line")
    st.start("mask")
    assert lines == ["[1/2] load organism", "      1 parameter", "      second line", "[2/2] mask"]
    assert table(["a", "bb"], [["xyz", "1"]], right={1}) == "a    bb\nxyz   1"
    md = "| task | value |\n|---|---:|\n| math | 1.0 |"
    assert markdown_table_text(md) == "task  value\nmath  1.0"


def _capture(monkeypatch) -> list:
    import mathneuro_edit.runs.consistency as consistency
    import mathneuro_edit.runs.inspect as report
    import mathneuro_edit.runs.sweep.result as sweep

    figs: list = []

    def keep(fig, path):
        fig.canvas.draw()
        figs.append(fig)
        return Path(path)

    for module in (report, sweep, consistency):  # each plotting module's own name for the writer
        monkeypatch.setattr(module, "save_figure", keep)
    return figs


def test_sweep_plot_names_every_point_and_keeps_it_inside(monkeypatch, tmp_path):
    from mathneuro_edit.runs.sweep.procedure import SweepPoint
    from mathneuro_edit.runs.sweep.result import SweepResult, _plot

    def P(k, s, a, kl):
        return SweepPoint(k, s, 10, a, 1.0, kl, 10, 10, max(a - 0.2, 0), min(a + 0.1, 1.0))

    pts = [P(0.01, 0.0, 0.0, 2e-3), P(0.01, 1.1, 1.0, 6e-6), P(0.05, 0.0, 0.6, 5e-3), P(0.05, 1.1, 1.0, 0.0)]
    figs = _capture(monkeypatch)
    _plot(SweepResult(0.9, 1.0, pts, [1, 3], "", None, {}), tmp_path / "s.png")
    ax = figs[0].axes[0]
    (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
    for p in pts:  # the point and its interval, strictly inside
        assert x0 < p.general_kl < x1 and y0 < 100 * p.math_ci95_low and 100 * p.math_ci95_high < y1
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert {"top_k=0.01", "top_k=0.05", "scale x0", "scale x1.1"} <= set(labels)
    legend_box = ax.get_legend().get_window_extent()
    assert legend_box.x0 >= ax.get_window_extent().x1  # outside the data


def test_sweep_plot_puts_each_point_at_its_gain_over_the_base_on_its_own_problems(monkeypatch, tmp_path):
    from mathneuro_edit.runs.sweep.procedure import SweepPoint
    from mathneuro_edit.runs.sweep.result import SweepResult, _plot

    # an early-round point (19 right of 40 where the base had 17) and a finalist (300 of 1,000, base 250)
    early = SweepPoint(0.01, 1.1, 1, 19 / 40, 1.0, 1e-3, 19, 40, 0.3, 0.6, base_correct=17)
    final = SweepPoint(0.05, 1.2, 1, 0.3, 1.0, 2e-3, 300, 1000, 0.27, 0.33, base_correct=250)
    figs = _capture(monkeypatch)
    _plot(SweepResult(0.25, 1.0, [early, final], [1], "", None, {}), tmp_path / "s.png")
    ax = figs[0].axes[0]
    from matplotlib.collections import PathCollection

    drawn = sorted(  # the filled markers (the front's rings have no face)
        tuple(xy)
        for c in ax.collections
        if isinstance(c, PathCollection) and len(c.get_facecolor())
        for xy in c.get_offsets().tolist()
    )
    assert drawn == [(1e-3, 5.0), (2e-3, 5.0)]  # +2 of 40 and +50 of 1,000: both +5 points, not 47.5% vs 30%
    assert [line.get_ydata()[0] for line in ax.lines if line.get_linestyle() == "--"] == [0.0]  # the base at 0
    assert "same problems" in ax.get_ylabel()


def test_consistency_plot_ticks_and_title(monkeypatch, tmp_path):
    from mathneuro_edit.runs.consistency import ConsistencyRow, _plot

    rows = [ConsistencyRow(n, 3, 0.5, 0.4, 0.3) for n in (1, 2, 4, 16)]
    figs = _capture(monkeypatch)
    info = {
        "method": "mathneuro",
        "top_k": 0.05,
        "math_samples": 100,
        "general_samples": 100,
        "sizes": [1, 2, 4, 16],
        "repeats": 3,
    }
    _plot(rows, tmp_path / "c.png", info)
    ax = figs[0].axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "2", "4", "16"]  # not 2x10^0
    assert "top_k=0.05" in ax.get_title() and "1, 2, 4, 16" in ax.get_title() and "100 math" in ax.get_title()


def test_layer_plot_legend_outside_and_lines_distinct(monkeypatch, tmp_path):
    import torch

    from mathneuro_edit.engine.mask import Mask
    from mathneuro_edit.runs.inspect import plot_layer_distribution

    names = [
        f"model.layers.{i}.{m}.weight"
        for i in range(3)
        for m in ("self_attn.q_proj", "self_attn.k_proj", "mlp.up_proj", "mlp.down_proj", "mlp.gate_proj")
    ]
    g = torch.Generator().manual_seed(0)
    mask = Mask({n: torch.rand(4, 4, generator=g) < 0.3 for n in names}, {"method": "mathneuro", "top_k": 0.05})
    figs = _capture(monkeypatch)
    plot_layer_distribution(mask, tmp_path / "l.png")
    ax = figs[0].axes[0]
    assert ax.get_legend().get_window_extent().x0 >= ax.get_window_extent().x1
    styles = [(str(ln.get_color()), ln.get_linestyle(), ln.get_marker()) for ln in ax.get_lines()]
    assert len(styles) == 5 and len(set(styles)) == 5
    assert len({s[0] for s in styles}) == 5  # colours alone tell them apart too
