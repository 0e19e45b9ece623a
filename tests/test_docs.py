"""The README stays true: its Python API snippet runs as written, and its command table lists every `run` option."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mathneuro_edit.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_readme_python_api_snippet_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mathneuro_edit.organism import organism_path

    if not (organism_path() / "model.safetensors").is_file():
        pytest.skip("organism model not built")
    section = README.split("## Python API", 1)[1]
    code = section.split("```python\n", 1)[1].split("\n```", 1)[0]
    assert "load_model(" in code and "load_texts(" in code  # where model, tokenizer and texts come from
    fast = code.replace(", 100, seed=0)", ", 8, seed=0)")  # the same calls on fewer texts, to stay fast
    assert fast.count(", 8, seed=0)") == 2
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    namespace: dict = {}
    exec(compile(fast, "README.md", "exec"), namespace)  # noqa: S102 - our own README
    for rel in (
        "math.stats.safetensors",
        "mask.safetensors",
        "out/pruned/model.safetensors",
        "out/pruned-adapter/adapter_config.json",
    ):
        assert (tmp_path / rel).is_file(), rel


def test_readme_command_table_lists_every_run_option() -> None:
    row = next(line for line in README.splitlines() if line.startswith("| `mathneuro-edit run "))
    documented = set(re.findall(r"(--[a-z][a-z-]*)", row))
    options = {opt for p in main.commands["run"].params for opt in p.opts if opt.startswith("--")} - {"--help"}
    assert options <= documented, sorted(options - documented)


def _is_module(dotted: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(dotted) is not None
    except ModuleNotFoundError:  # a parent is a module, not a package: "mathneuro_edit.engine.mask.Mask"
        return False


def test_module_paths_named_in_the_docs_exist() -> None:
    """Every ``mathneuro_edit/...py`` path and ``mathneuro_edit.x.y`` module that README.md and docs/ name is real."""
    import mathneuro_edit

    texts = {
        "README.md": README,
        **{f"docs/{p.name}": p.read_text(encoding="utf-8") for p in (ROOT / "docs").glob("*.md")},
    }
    missing = []
    for name, text in texts.items():
        for rel in set(re.findall(r"mathneuro_edit/[\w/]+\.py", text)):
            if not (ROOT / rel).is_file():
                missing.append(f"{name}: {rel}")
        for dotted in set(re.findall(r"\bmathneuro_edit(?:\.[a-z_]+)+", text)):
            parts = dotted.split(".")
            while len(parts) > 1 and not _is_module(".".join(parts)):
                parts.pop()  # mathneuro_edit.engine.mask.Mask: the module part must exist, the rest may be a name
            public = dotted.split(".")[1] in mathneuro_edit.__all__  # mathneuro_edit.load_edited
            if len(parts) == 1 and not public:
                missing.append(f"{name}: {dotted}")
    assert missing == []
