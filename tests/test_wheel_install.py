"""The built wheel installs into a fresh environment and runs the quickstart from there.

``python -m build`` builds the sdist and the wheel (from the sdist, as a release does) and ``twine check`` passes
both; the wheel goes into a fresh virtual environment with ``pip install --no-deps`` (its dependencies, torch
first, are this environment's: a ``.pth`` line names its site-packages, so no multi-GB download and the same
versions). From a folder outside the checkout, the installed ``mathneuro-edit`` runs the README's quickstart on the
embedded default recipe (the organism it needs is package data), with the sizes cut for the test's time, and the
model it writes loads with plain transformers. ``mathneuro_edit`` must be imported from the fresh environment,
never from this checkout.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["--set", "data.samples=8", "--set", "evaluation.samples=4", "--set", "evaluation.max_new_tokens=8"]

pytest.importorskip("build", reason="the test extra installs build")


def _run(args: list[str], **kwargs: object) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(HF_HUB_OFFLINE="1", PYTHONNOUSERSITE="1")
    result = subprocess.run(args, capture_output=True, text=True, env=env, timeout=900, **kwargs)
    assert result.returncode == 0, f"{args}\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
    return result


def _clean_copy(dest: Path) -> Path:
    """The checkout's files as git sees them (tracked, and untracked but not ignored), nothing else: no stale
    ``*.egg-info`` whose SOURCES.txt would put files into the sdist that the package data no longer names."""
    listed = (
        subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .split("\0")
    )
    for rel in filter(None, listed):
        src = ROOT / rel
        if src.is_file() and not rel.startswith("docs/data/"):
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest


@pytest.mark.slow
def test_the_built_wheel_installs_into_a_fresh_environment_and_runs_the_quickstart(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    _run([sys.executable, "-m", "build", "--outdir", str(dist), str(_clean_copy(tmp_path / "src"))])
    (wheel,) = dist.glob("mathneuro_edit-*.whl")
    (sdist,) = dist.glob("mathneuro_edit-*.tar.gz")
    twine = pytest.importorskip("twine")
    assert twine
    _run([sys.executable, "-m", "twine", "check", "--strict", str(wheel), str(sdist)])

    venv = tmp_path / "fresh"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    fresh_site = Path(
        _run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]).stdout.strip()
    )
    # the dependencies: this environment's site-packages, after the fresh one's (a plain path line: its .pth files,
    # such as this checkout's editable install, are not processed)
    ours = [p for p in {sysconfig.get_path("purelib"), *site.getsitepackages()} if Path(p).is_dir()]
    (fresh_site / "zz_dependencies.pth").write_text("\n".join(sorted(ours)) + "\n")
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", str(wheel)])

    where = tmp_path / "elsewhere"  # no recipes/ folder here: the embedded default and the packaged organism
    where.mkdir()
    found = _run(
        [
            str(python),
            "-c",
            "import mathneuro_edit; from mathneuro_edit.organism import organism_path; "
            "print(mathneuro_edit.__file__); print(organism_path())",
        ],
        cwd=where,
    )
    package, organism = (Path(line) for line in found.stdout.split())
    assert package.is_relative_to(venv) and organism.is_relative_to(venv), found.stdout
    assert (organism / "model.safetensors").is_file() and (organism / "tokenizer.json").is_file()
    assert (package.parent / "publish" / "card_template.md").is_file()  # package data: every card is rendered from it
    cli = venv / "bin" / "mathneuro-edit"
    assert cli.is_file()
    _run([str(cli), "--version"], cwd=where)
    result = _run([str(cli), "run", "--out", "out/quickstart", *SMALL, "--json"], cwd=where)
    summary = json.loads(result.stdout)
    assert summary["ok"] is True and 0 < summary["selected"] < summary["total"]
    assert (where / "out" / "quickstart" / "checkpoint" / "README.md").is_file()
    _run(
        [
            str(python),
            "-c",
            "from transformers import AutoModelForCausalLM; "
            "AutoModelForCausalLM.from_pretrained('out/quickstart/checkpoint')",
        ],
        cwd=where,
    )
    _run([str(cli), "verify", "out/quickstart", "-q"], cwd=where)
