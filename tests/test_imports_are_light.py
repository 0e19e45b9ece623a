"""Importing a light module loads nothing heavy: ``plan`` reads config.json alone, so importing the planner (and
every package face on its way) loads neither torch nor transformers; the faces import their modules on first use
(``lazy_loader.attach_stub``: a face's names are the imports of its ``__init__.pyi``)."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

FACES = ("cli", "data", "engine", "evaluation", "organism", "publish", "recipe", "runs", "weights")
# the faces of sub-packages (gguf_arch imports its registry, and so its family modules, at once)
SUB_FACES = ("runs.steps", "runs.sweep", "weights.gguf_arch")
HEAVY = ("torch", "transformers")


def _loaded(module: str) -> set[str]:
    """Top-level packages ``python -X importtime -c "import MODULE"`` reports importing, in a fresh process."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {module}"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [line.rsplit("|", 1)[-1] for line in proc.stderr.splitlines() if line.startswith("import time:")]
    return {row.strip().split(".")[0] for row in rows}


# the planner; a recipe's reading and validation (every command reads one first, `plan` nothing heavier); every face
@pytest.mark.parametrize(
    "module",
    [
        "mathneuro_edit.runs.plan",
        "mathneuro_edit.recipe.io",
        "mathneuro_edit",
        *(f"mathneuro_edit.{f}" for f in (*FACES, *SUB_FACES)),
    ],
)
def test_importing_loads_no_torch_and_no_transformers(module: str) -> None:
    assert _loaded(module).isdisjoint(HEAVY), module


def _stub(package_file: str) -> list[tuple[str, str]]:
    """(name, the module relative to the package that the stub imports it from) for every import of the face's
    ``__init__.pyi``, in order; anything else in the stub fails here (lazy_loader reads only its imports)."""
    rows = []
    for node in ast.parse(Path(package_file).with_suffix(".pyi").read_text()).body:
        assert isinstance(node, ast.ImportFrom) and node.level == 1 and node.module, ast.unparse(node)
        for alias in node.names:
            assert alias.asname == alias.name, ast.unparse(node)  # `a as a`: re-exported, for type checkers too
            rows.append((alias.name, node.module))
    return rows


@pytest.mark.parametrize("face", ["", *FACES, *SUB_FACES])
def test_each_face_names_the_module_that_defines_each_name(face: str) -> None:
    """A face's stub imports each name from the module that defines it (not from another face or a re-export),
    once, and its __all__ is the stub's names."""
    package = importlib.import_module(f"mathneuro_edit.{face}" if face else "mathneuro_edit")
    stub = _stub(package.__file__)
    names = [name for name, _ in stub]
    assert len(names) == len(set(names)) and sorted(package.__all__) == sorted(names)
    for name, module in stub:
        value = getattr(package, name)
        defined_in = getattr(value, "__module__", None)
        if isinstance(defined_in, str) and defined_in.startswith("mathneuro_edit"):  # a constant has none
            assert defined_in == f"{package.__name__}.{module}", (name, defined_in)
        else:  # a constant (or __version__) has no __module__: the module the stub names assigns it
            assert name in _defined(f"{package.__name__}.{module}"), (name, module)


def _defined(module: str) -> set[str]:
    """The names a module defines at its top level (def, class, assignment), not the names it imports."""
    tree = ast.parse(Path(importlib.import_module(module).__file__).read_text())
    names = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    targets = [t for n in tree.body if isinstance(n, ast.Assign) for t in n.targets]
    targets += [n.target for n in tree.body if isinstance(n, ast.AnnAssign)]
    return names | {t.id for t in targets if isinstance(t, ast.Name)}
