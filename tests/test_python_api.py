"""The Python API is symmetric to the CLI: every command's function is importable from the top level of
``mathneuro_edit``, with a docstring, and ``export_gguf`` (the sibling of ``export_checkpoint``) writes a GGUF
that the gguf package reads back."""

from __future__ import annotations

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


def test_all_lists_every_lazily_loaded_name_once() -> None:
    # __all__ is written out in full (so linters see the re-exports); it must stay the names of _LAZY
    assert len(mathneuro_edit.__all__) == len(set(mathneuro_edit.__all__))
    assert set(mathneuro_edit.__all__) == {"__version__", *mathneuro_edit._LAZY}


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
