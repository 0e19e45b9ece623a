"""docs/formats.md's list of GGUF families is the one generated from their registrations
(scripts/gguf_families_doc.py): a family's conventions are written once, in its module."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("gguf")

from mathneuro_edit.weights.gguf_arch import FAMILIES  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("gguf_families_doc", ROOT / "scripts" / "gguf_families_doc.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_formats_md_lists_the_registered_families_as_generated() -> None:
    page = (ROOT / "docs" / "formats.md").read_text(encoding="utf-8")
    assert _script().with_families(page) == page, "docs/formats.md is stale: run python scripts/gguf_families_doc.py"
    for model_type in FAMILIES:
        assert page.count(f"  - `{model_type}` (GGUF arch ") == 1, model_type
