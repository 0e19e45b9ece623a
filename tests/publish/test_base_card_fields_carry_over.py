"""Our card carries the base card's license, language and datasets. A base card may write `datasets:` (or
`language:`) as one string rather than a list: it becomes a one-item list, never a list of its characters.

The run is the tiny llama workspace of tests/test_reliability.py; `card RUN --base BASE` rewrites its cards.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from huggingface_hub import ModelCard

from mathneuro_edit.cli.main import main


@pytest.mark.parametrize(
    "datasets,language,want_datasets,want_language",
    [
        ("openai/gsm8k", "en", ["openai/gsm8k"], ["en"]),
        ("[openai/gsm8k, HuggingFaceFW/fineweb]", "[en, fr]", ["HuggingFaceFW/fineweb", "openai/gsm8k"], ["en", "fr"]),
    ],
)
def test_a_base_card_s_datasets_and_language_are_carried_as_lists(
    ws: Path, tmp_path: Path, datasets: str, language: str, want_datasets, want_language
) -> None:
    base = tmp_path / "base"
    shutil.copytree(ws / "base", base)
    (base / "README.md").write_text(f"---\nlicense: mit\nlanguage: {language}\ndatasets: {datasets}\n---\n# base\n")
    run = tmp_path / "run"
    shutil.copytree(ws / "run", run)
    result = CliRunner().invoke(main, ["card", str(run), "--base", str(base)])
    assert result.exit_code == 0, result.output
    for sub in ("checkpoint", "adapter"):
        meta = ModelCard.load(run / sub / "README.md").data.to_dict()
        assert sorted(meta["datasets"]) == want_datasets, (sub, meta.get("datasets"))
        assert meta["language"] == want_language and meta["license"] == "mit", (sub, meta)


def test_a_base_card_without_metadata_carries_nothing_and_says_nothing(tmp_path: Path) -> None:
    """Issue 48 (library noise): a base README.md without a metadata block made huggingface_hub log "Repo card
    metadata block was not found. Setting CardData to empty." as the last line of `run -q`; such a card carries
    nothing, and nothing is logged. A card with metadata still carries its fields."""
    import logging

    from mathneuro_edit.publish.base_card import base_card_fields

    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    keep = Keep()
    logging.getLogger("huggingface_hub").addHandler(keep)
    try:
        (tmp_path / "README.md").write_text("# My model\n\nNo metadata here.\n")
        assert base_card_fields(tmp_path) == {}
        (tmp_path / "README.md").write_text("---\nlicense: apache-2.0\nlanguage: en\n---\n# My model\n")
        assert base_card_fields(tmp_path) == {"license": "apache-2.0", "language": ["en"]}
    finally:
        logging.getLogger("huggingface_hub").removeHandler(keep)
    assert seen == [], seen
