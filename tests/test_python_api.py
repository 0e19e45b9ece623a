"""The Python API is symmetric to the CLI: every command's function is importable from the top level of
``mathneuro_edit``, with a docstring, and ``export_gguf`` (the sibling of ``export_checkpoint``) writes a GGUF
that the gguf package reads back."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest

import mathneuro_edit
from mathneuro_edit.cli.main import main

# command -> the top-level functions it calls (the module docstring of mathneuro_edit says the same)
COMMAND_API = {
    "run": ("run_recipe", "run_from_sweep"),
    "sweep": ("run_sweep",),
    "calibrate": ("calibrate",),
    "mask": ("find_math_params",),
    "export": ("export_checkpoint", "export_adapter", "export_gguf"),
    "eval": ("evaluate",),
    "card": ("rewrite_cards", "build_card", "write_card"),
    "push": ("push_to_hub",),
    "verify": ("verify",),
    "reproduce": ("reproduce",),
    "plan": ("plan_from_config",),
    "dequantize": ("dequantize_gguf",),
    "consistency": ("run_consistency",),
    "inspect": ("Mask", "ActivationStats"),
}


def test_every_command_has_its_function_at_the_top_level_with_a_docstring() -> None:
    assert set(main.commands) == set(COMMAND_API), "a command was added or removed: name its function here"
    for command, names in COMMAND_API.items():
        for name in names:
            assert name in mathneuro_edit.__all__, (command, name)
            obj = getattr(mathneuro_edit, name)
            assert len((obj.__doc__ or "").strip()) > 40, (command, name)
            assert f":func:`{name}`" in mathneuro_edit.__doc__ or name in ("Mask", "ActivationStats"), name


def test_all_is_the_stubs_names_once_each() -> None:
    # __init__.pyi is the one list of the public names (lazy_loader.attach_stub reads __all__ from it; type checkers
    # read it too): every name once, each one there, and __version__ among them
    stub = ast.parse(Path(mathneuro_edit.__file__).with_suffix(".pyi").read_text())
    names = [alias.name for node in stub.body if isinstance(node, ast.ImportFrom) for alias in node.names]
    assert len(names) == len(set(names)) and sorted(mathneuro_edit.__all__) == sorted(names)
    assert "__version__" in names and all(getattr(mathneuro_edit, name) is not None for name in names)
    assert sorted(dir(mathneuro_edit)) == sorted(names)


def test_export_gguf_writes_a_checkpoint_as_a_gguf_file(tmp_path: Path) -> None:
    gguf = pytest.importorskip("gguf")
    from mathneuro_edit import export_gguf
    from mathneuro_edit.organism import organism_path

    folder = tmp_path / "checkpoint"
    shutil.copytree(organism_path(), folder)
    path = export_gguf(folder, "F32")
    assert path == folder / "model-F32.gguf"
    reader = gguf.GGUFReader(str(path))
    assert reader.fields["general.architecture"].contents() == "llama"
    assert len(reader.tensors) > 0
    with pytest.raises(mathneuro_edit.InputError, match="not a type gguf can write"):
        export_gguf(folder, "Q9_9")
