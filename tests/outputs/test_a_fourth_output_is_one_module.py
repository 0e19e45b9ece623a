"""A fourth output is one module: its entry, registered with ``register_output``, is all ``run``, ``verify``,
``card`` and ``push --dry-run`` need (issue 42 item 1); and no package module outside ``mathneuro_edit/outputs/``
names an output kind.

The toy output below writes ``notes/notes.json`` (the mask's sha256 and counts) from the mask: it has its own run
step, card snippets, folder and Hub repo suffix, and no tensor audit (``verify`` checks its files against the
lock). Mutation: ``output_dirs`` listing the first two registered folders only fails the first test. The second
counts both a kind's name as a string and as an attribute (``recipe.outputs.adapter``): a listing of the kinds
outside the registry (issue 49 item 5).
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from mathneuro_edit.cli.main import main
from mathneuro_edit.outputs.registry import OUTPUTS, CardView, Output, RunView, register_output

PKG = Path(__file__).resolve().parents[2] / "mathneuro_edit"


def _write_notes(job: RunView, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    selected, total = job.mask.total()
    notes = {"mask_sha256": job.mask.sha256, "selected": selected, "total": total}
    (dest / "notes.json").write_text(json.dumps(notes, indent=2) + "\n")


def _usage(out: Output, view: CardView) -> str:
    return f"Read `notes.json` from {view.repo or 'this folder'}: {', '.join(view.files)}."


NOTES = Output(
    name="notes",
    gguf_files=None,
    repo_suffix="-notes",
    library="mathneuro-edit",
    relation="finetune",
    tags=("notes",),
    holds="folder holds notes on",
    evaluated=False,
    usage=_usage,
    loaders="## Where it loads\n\n- any JSON reader",
    files_cell=lambda weights_dtype, files: "JSON: " + ", ".join(files),
    on_gguf_base=lambda cast, files: "These notes describe that dequantized model's edit",
    write=_write_notes,
    stage=lambda recipe: "export notes/",
    markers=("notes.json",),
    asked=lambda recipe: True,
)


@pytest.fixture
def notes_output() -> Iterator[Output]:
    """The toy output, registered for one test and removed after it."""
    register_output(NOTES)
    try:
        yield NOTES
    finally:
        OUTPUTS.pop(NOTES.name)


def _cli(*args: str) -> str:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def test_a_registered_output_runs_verifies_gets_its_card_and_is_pushed(tmp_path, notes_output) -> None:
    out = tmp_path / "run"
    sets = ["data.samples=8", "evaluation=null", "outputs.adapter=false", "hub.repo_id=me/edit"]
    text = _cli("run", "--out", str(out), *[x for s in sets for x in ("--set", s)])
    assert "export notes/" in text
    notes = json.loads((out / "notes" / "notes.json").read_text())
    lock = (out / "mathneuro_recipe.lock.yaml").read_text()
    assert notes["mask_sha256"] in lock and "notes/notes.json" in lock  # the lock records its files

    card = (out / "notes" / "README.md").read_text()
    assert "This folder holds notes on a MathNeuro edit of" in card and "| files | JSON: notes.json |" in card
    assert "Read `notes.json` from me/edit-notes: notes.json." in card and "- any JSON reader" in card

    verified = _cli("verify", str(out))
    assert "audit notes/" not in verified  # no tensor audit of its own: its files are checked against the lock
    assert "match    notes/notes.json" in verified

    written = _cli("card", str(out))
    assert str(out / "notes" / "README.md") in written

    plan = json.loads(_cli("push", str(out / "notes"), "--dry-run", "--json"))
    assert plan["repo_id"] == "me/edit-notes" and plan["kind"] == "notes"
    assert {f["path"] for f in plan["adds"]} == {"notes.json", "README.md", "mathneuro_recipe.lock.yaml"}


# words that are also an output kind's name but mean something else where they occur (a GGUF *base*'s lock key and
# reader, a module's name in a lazy face, the audit's report kind, a recipe's keys in the quickstart), or name the
# kind on purpose: file -> (how many such strings, why)
NOT_A_KIND = {
    "publish/lock.py": (2, "base.gguf: the lock's entry of a GGUF base"),
    "publish/card_sections.py": (2, "base.gguf: the lock's entry of a GGUF base"),
    "publish/card.py": (2, "base.gguf: the lock's entry of a GGUF base"),
    "publish/card_weights.py": (3, "base.gguf: the lock's entry of a GGUF base"),
    "weights/gguf_reader.py": (3, "the gguf package and a GGUF base's cache folder"),
    "weights/audit.py": (1, "the report kind of a checkpoint audit"),
    "recipe/io.py": (2, "the quickstart recipe's outputs keys"),
    "recipe/edit_sections.py": (13, "the recipe's outputs section: its own keys and their checks"),
    "runs/steps/seal.py": (1, "base.gguf: the record of a GGUF base"),
}


def test_no_package_module_outside_outputs_names_an_output_kind() -> None:
    kinds = {"checkpoint", "adapter", "gguf"}
    named: dict[str, int] = {}
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).as_posix()
        if rel.startswith("outputs/"):
            continue
        nodes = list(ast.walk(ast.parse(path.read_text())))
        found = sum(isinstance(n, ast.Constant) and n.value in kinds for n in nodes)
        found += sum(isinstance(n, ast.Attribute) and n.attr in kinds for n in nodes)  # recipe.outputs.adapter
        if found:
            named[rel] = found
    assert named == {rel: n for rel, (n, _) in NOT_A_KIND.items()}
