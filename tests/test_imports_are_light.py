"""Importing a light module loads nothing heavy: ``plan`` reads config.json alone, so importing the planner (and
every package face on its way) loads neither torch nor transformers; the faces import their modules on first use."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

FACES = ("cli", "data", "engine", "evaluation", "organism", "publish", "recipe", "runs", "weights")
HEAVY = ("torch", "transformers")


def _loaded(module: str) -> set[str]:
    """Top-level packages ``python -X importtime -c "import MODULE"`` reports importing, in a fresh process."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {module}"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [line.rsplit("|", 1)[-1] for line in proc.stderr.splitlines() if line.startswith("import time:")]
    return {row.strip().split(".")[0] for row in rows}


@pytest.mark.parametrize(
    "module", ["mathneuro_edit.runs.plan", "mathneuro_edit", *(f"mathneuro_edit.{f}" for f in FACES)]
)
def test_importing_loads_no_torch_and_no_transformers(module: str) -> None:
    assert _loaded(module).isdisjoint(HEAVY), module


@pytest.mark.parametrize("face", ["", *FACES])
def test_each_face_names_the_module_that_defines_each_name(face: str) -> None:
    """A face's lazy table points at the defining module (not at another face or a re-export), and __all__ is its
    names."""
    package = importlib.import_module(f"mathneuro_edit.{face}" if face else "mathneuro_edit")
    names = {n for n in package.__all__ if n != "__version__"}
    assert names == set(package._LAZY) and len(package.__all__) == len(set(package.__all__))
    for name, module in package._LAZY.items():
        value = getattr(package, name)
        defined_in = getattr(value, "__module__", None)
        if isinstance(defined_in, str) and defined_in.startswith("mathneuro_edit"):  # a constant has none
            assert defined_in == f"{package.__name__}.{module}", (name, defined_in)
