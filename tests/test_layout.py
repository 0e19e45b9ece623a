"""The package structure keeps showing the pipeline: the import rule and no cycles.

The rule itself is the import-linter contract in pyproject.toml (``lint-imports`` runs it by hand); this file runs
it in the suite and checks what import-linter does not: cycles between modules, private names that cross a
package or leave their module (a sub-package such as runs/sweep/ shares them inside), modules that offer names
defined elsewhere, imports hidden inside functions, the number of modules at the package root, and that a lock
written before the restructure still reproduces bit for bit. Sizes are a report (scripts/size_report.py). Each of
the three issue-42 rules was seen failing on a module made to break it.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "mathneuro_edit"
MAX_ROOT_MODULES = 5
MAX_INSIDE_FUNCTIONS = 0.15


def _modules() -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (file, is a package's __init__)."""
    out = {}
    for path in sorted(PKG.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)
    return out


def _own_imports() -> list[tuple[str, int, bool, str, list[str]]]:
    """(importing module, line, inside a function, imported module, names) for every import of the package's
    own modules, type-checking-only imports left out."""
    rows = []
    for mod, (path, is_pkg) in _modules().items():
        tree = ast.parse(path.read_text())
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:
                base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target != "mathneuro_edit" and not target.startswith("mathneuro_edit."):
                continue
            inside, type_only, up = False, False, parents.get(node)
            while up is not None:
                inside |= isinstance(up, (ast.FunctionDef, ast.AsyncFunctionDef))
                type_only |= isinstance(up, ast.If) and "TYPE_CHECKING" in ast.unparse(up.test)
                up = parents.get(up)
            if not type_only:
                rows.append((mod, node.lineno, inside, target, [a.name for a in node.names]))
    return rows


def _stage(module: str) -> str:
    return ".".join(module.split(".")[:2])


def test_import_linter_contract_holds() -> None:
    """pyproject.toml's layers / independence / forbidden contracts (the same check as ``lint-imports``), in a
    child process: import-linter configures logging with ``dictConfig``, which disables every logger that exists
    (mathneuro-edit's included), and later tests read their warnings."""
    code = (
        "import sys; from importlinter.cli import lint_imports; "
        f"sys.exit(lint_imports(config_filename={str(ROOT / 'pyproject.toml')!r}, no_cache=True, no_logo=True))"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]


def test_the_contract_lists_every_stage() -> None:
    """A new sub-package must take a place in the layers, or the rule silently does not cover it."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    layered = {
        name.strip()
        for contract in config["contracts"]
        if contract["type"] == "layers"
        for layer in contract["layers"]
        for name in layer.split("|")
    }
    stages = {p.name for p in PKG.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    stages |= {p.stem for p in PKG.glob("*.py") if p.name != "__init__.py"}
    assert stages == layered


def test_few_modules_at_the_root_and_every_stage_is_a_package() -> None:
    root_modules = sorted(p.name for p in PKG.glob("*.py"))
    assert len(root_modules) <= MAX_ROOT_MODULES, root_modules
    for folder in PKG.iterdir():
        if folder.is_dir() and folder.name != "__pycache__" and any(folder.glob("*.py")):
            init = folder / "__init__.py"
            assert init.is_file() and ast.get_docstring(ast.parse(init.read_text())), f"{folder.name}: contract"


def test_no_import_cycle_between_modules() -> None:
    graph: dict[str, set[str]] = {m: set() for m in _modules()}
    for mod, _, _, target, names in _own_imports():
        for name in names:  # "from . import card_sections" imports the module card_sections
            graph[mod].add(f"{target}.{name}" if f"{target}.{name}" in graph else target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for module in graph:
        if module not in index:
            visit(module)
    assert cycles == []


def test_no_private_name_crosses_a_package_and_nothing_imports_the_root() -> None:
    crossing, root = [], []
    for mod, line, _, target, names in _own_imports():
        if target == "mathneuro_edit" and mod != "mathneuro_edit":
            root.append(f"{mod}:{line}")
        for name in names:
            if name.startswith("_") and not name.startswith("__") and _stage(target) != _stage(mod):
                crossing.append(f"{mod}:{line} imports {target}.{name}")
    assert crossing == [] and root == []


def test_imports_sit_at_module_level() -> None:
    """At most 15% of the package's own imports inside functions (the lazy root __init__ and CLI command bodies
    aside, where laziness keeps ``--help`` free of torch)."""
    counted = [r for r in _own_imports() if r[0] != "mathneuro_edit" and not r[0].startswith("mathneuro_edit.cli")]
    inside = [f"{m}:{line}" for m, line, is_inside, _, _ in counted if is_inside]
    assert len(inside) <= MAX_INSIDE_FUNCTIONS * len(counted), inside


def test_run_folder_names_have_one_home() -> None:
    """The run folder's file names are typed only in layout.py (docstrings and comments aside)."""
    names = (
        "mask.safetensors",
        "eval.json",
        "math.stats.safetensors",
        "mathneuro_recipe.lock.yaml",
        "sweep.json",
        "consistency.json",
    )
    found = []
    for path in PKG.rglob("*.py"):
        if path.name == "layout.py":
            continue
        tree = ast.parse(path.read_text())
        docstrings = {
            id(n.body[0].value)
            for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
            and n.body
            and isinstance(n.body[0], ast.Expr)
            and isinstance(n.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                found += [f"{path.relative_to(ROOT)}:{node.lineno} {n}" for n in names if node.value == n]
    assert found == []


def test_version_has_one_home() -> None:
    import mathneuro_edit
    from mathneuro_edit._version import __version__

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert mathneuro_edit.__version__ == __version__ == pyproject["project"]["version"]


@pytest.mark.slow
def test_a_lock_from_before_the_restructure_reproduces_bit_for_bit(tmp_path: Path) -> None:
    """tests/golden/quickstart-0.1.0-before-restructure.lock.yaml was written by the flat-package code (commit
    4f7b9f4): the restructured package must rebuild every file it lists, byte for byte."""
    lock = ROOT / "tests" / "golden" / "quickstart-0.1.0-before-restructure.lock.yaml"
    proc = subprocess.run(
        [sys.executable, "-m", "mathneuro_edit.cli", "reproduce", str(lock), "--out", str(tmp_path / "again")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "reproduced: yes, bit for bit" in proc.stdout
    assert "differs" not in proc.stdout.lower()


# ------------------------------------------------------------------------------------------- one home per concept
# Issue 42's rules, measured on every run: a private name stays in its module (or its sub-package: a folder below
# a stage, such as runs/sweep/, shares private names inside and shows one face); a module other than a package's
# face never offers names it imported. Function and module sizes are a report, not a rule (scripts/size_report.py,
# printed by .ci/run): a cap that fails the build shapes the code.


def _package_of(module: str, modules: dict[str, tuple[Path, bool]]) -> str:
    return module if modules.get(module, (None, False))[1] else module.rsplit(".", 1)[0]


def test_private_names_stay_in_their_module_or_sub_package() -> None:
    crossing, modules = [], _modules()
    for mod, line, _, target, names in _own_imports():
        for name in names:
            if not name.startswith("_") or name.startswith("__") or mod == target:
                continue
            home = _package_of(mod, modules)
            shared = home == _package_of(target, modules) and home.count(".") >= 2
            if not shared:
                crossing.append(f"{mod}:{line} imports {target}.{name}")
    assert crossing == []


def test_no_module_offers_names_defined_elsewhere() -> None:
    """Faces (a package's ``__init__``) list their package's names; every other module imports only what it uses
    and its ``__all__`` lists only names it defines, so a name has one address: the module that defines it."""
    modules = _modules()
    offered = []
    for mod, (path, is_pkg) in modules.items():
        if is_pkg:
            continue
        tree = ast.parse(path.read_text())
        used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        imported = {
            a.asname or a.name for n in tree.body if isinstance(n, ast.ImportFrom | ast.Import) for a in n.names
        }
        for node in tree.body:  # an imported name in __all__ is offered from a second address
            if isinstance(node, ast.Assign) and any(getattr(x, "id", None) == "__all__" for x in node.targets):
                offered += [f"{mod}: __all__ {n}" for n in ast.literal_eval(node.value) if n in imported]
        for node in tree.body:  # module-level imports of the package's own modules
            if not isinstance(node, ast.ImportFrom) or not (node.level or (node.module or "").startswith("mathneuro_")):
                continue
            base = mod.split(".")[: len(mod.split(".")) - node.level] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                if f"{target}.{alias.name}" in modules:  # a module imported for what registering it does
                    continue
                if (alias.asname or alias.name) not in used:
                    offered.append(f"{mod}:{node.lineno} {alias.name}")
    assert offered == []
