"""The map stays true: docs/architecture.md's module tree names every module file of the package and no module
that is gone, and every file path docs/extending.md names exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "mathneuro_edit"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
EXTENDING = ROOT / "docs" / "extending.md"
INDENT = 2  # spaces per level of the tree


def tree_files(text: str) -> set[str]:
    """The ``.py`` files the tree names, as paths relative to the repository root.

    The tree is the code block that starts with the line ``mathneuro_edit/``; each line is a name (a folder ends in
    ``/``) indented two spaces per level below its folder, then what it holds.
    """
    blocks = re.findall(r"^```\n(mathneuro_edit/\n.*?)^```", text, re.MULTILINE | re.DOTALL)
    assert len(blocks) == 1, "docs/architecture.md must hold one tree block starting with 'mathneuro_edit/'"
    files: set[str] = set()
    folders: list[str] = []  # the folder of each level above the current line
    for n, line in enumerate(blocks[0].splitlines(), 1):
        name = line.split()[0]
        spaces = len(line) - len(line.lstrip(" "))
        assert spaces % INDENT == 0 and spaces // INDENT <= len(folders), f"tree line {n}: bad indent: {line!r}"
        del folders[spaces // INDENT :]
        if name.endswith("/"):
            folders.append(name)
        else:
            assert name.endswith(".py"), f"tree line {n}: neither a folder nor a module: {line!r}"
            assert folders, f"tree line {n}: a module outside mathneuro_edit/: {line!r}"
            files.add("".join(folders) + name)
    return files


def test_the_architecture_tree_names_every_module_and_only_those() -> None:
    named = tree_files(ARCHITECTURE.read_text(encoding="utf-8"))
    actual = {p.relative_to(ROOT).as_posix() for p in PKG.rglob("*.py")}
    assert sorted(actual - named) == [], "modules missing from docs/architecture.md's tree"
    assert sorted(named - actual) == [], "docs/architecture.md's tree names modules that do not exist"


# a path as the page writes one: folders and a file name with an extension (not a placeholder such as <name>.py)
_PATH = re.compile(r"(?<![\w./<>-])((?:[\w.-]+/)*[\w-]+\.(?:py|md|sh|toml|yaml))\b")


def _exists(path: str) -> bool:
    """A path from the repository root, or relative to the package (``cli/main.py``), docs/ or tests/; a bare file
    name must exist somewhere in the package, tests or scripts."""
    if "/" not in path:
        return any(any((ROOT / d).rglob(path)) for d in ("mathneuro_edit", "tests", "scripts", "docs"))
    return any((base / path).is_file() for base in (ROOT, PKG, ROOT / "docs", ROOT / "tests"))


def test_every_file_path_extending_names_exists() -> None:
    text = EXTENDING.read_text(encoding="utf-8")
    text = text.replace("<name>", "NAME")  # the module of a new output: a placeholder, not a path
    paths = {p for p in _PATH.findall(text) if "NAME" not in p}
    assert len(paths) > 20  # the pattern still finds the page's paths
    assert sorted(p for p in paths if not _exists(p)) == [], "paths docs/extending.md names that do not exist"
