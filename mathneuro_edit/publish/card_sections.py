"""Sections of the model card that come from the lock alone: the base, the data, loading, reproducing, versions.

Kept apart from :mod:`mathneuro_edit.publish.card` (metadata, assembly) so each stays one small module. Every function
reads the lock's public form (no local path can reach the card through here) and returns Markdown.

``repo`` is the Hub repo the card is published in (``mathneuro-edit push`` renders the card again for it), or
``None`` for a card that still lives in a local output folder: then the snippets load ``"."``, this folder.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from .._version import __version__
from ..util.paths import LOCAL, ORGANISM

__all__ = ["INSTALL", "BASE_ENV", "base_sentence", "base_section", "data_table", "usage", "reproduce_section",
           "versions_table"]

# Why not `pip install mathneuro-edit`: the package is not published on PyPI yet; this is the line that works.
# Change it (one place) once a release exists.
INSTALL = (f"# mathneuro-edit {__version__} is not on PyPI yet: install it from a checkout of the project's source\n"
           "pip install -e ./mathneuro-edit")
BASE_ENV = "BASE_MODEL_DIR"  # the variable the snippets read a local base's folder from (no placeholder path)


def _base(lock: Mapping[str, Any]) -> Mapping[str, Any]:
    return lock.get("base") or {}


def _kind(lock: Mapping[str, Any]) -> str:
    model = _base(lock).get("model")
    return "organism" if model == ORGANISM else "local" if model == LOCAL else "hub"


def _described(lock: Mapping[str, Any]) -> str:
    desc = _base(lock).get("description") or {}
    arch, mtype = desc.get("architecture"), desc.get("model_type")
    params = (lock.get("edit_summary") or {}).get("model_params")
    parts = [f"`{arch}`" if arch else "", f"model type `{mtype}`" if mtype else "",
             f"{params:,} parameters" if params else ""]
    return ", ".join(p for p in parts if p)


def base_sentence(lock: Mapping[str, Any]) -> str:
    """The base model in a few words, for the card's first paragraph."""
    base, kind = _base(lock), _kind(lock)
    if kind == "hub":
        rev = f" (revision `{base['revision'][:12]}`)" if base.get("revision") else ""
        return f"[{base['model']}](https://huggingface.co/{base['model']}){rev}"
    what = _described(lock)
    if kind == "organism":
        return "the model organism shipped with mathneuro-edit" + (f" ({what})" if what else "")
    return "a local model that is not on the Hub" + (f" ({what})" if what else "") + \
        ", identified by the sha256 of its weight files (see *Base model*)"


def base_section(lock: Mapping[str, Any]) -> str:
    """``## Base model``: the Hub id and revision, or for a local/organism base its weight files' sha256."""
    base, kind = _base(lock), _kind(lock)
    lines = ["## Base model", ""]
    if kind == "hub":
        lines.append(f"[{base['model']}](https://huggingface.co/{base['model']}), revision "
                     f"`{base.get('revision') or 'main (not resolved)'}`.")
    else:
        lines.append(base_sentence(lock)[0].upper() + base_sentence(lock)[1:] + ". Its files:")
        lines += ["", "| file | sha256 |", "|---|---|"]
        lines += [f"| `{_cell(name)}` | `{sha}` |" for name, sha in (base.get("weights_sha256") or {}).items()]
        if kind == "local":
            lines += ["", f"To use or reproduce this edit, get that model and point `{BASE_ENV}` at its folder; "
                          "`mathneuro-edit reproduce` checks every sha256 above before it runs."]
    return "\n".join(lines)


def data_table(lock: Mapping[str, Any]) -> str:
    """The calibration sets: source, split, texts, and the sha256 of the sampled texts (and of a local file)."""
    data = lock.get("data") or {}
    rows = ["| set | source | split | texts | texts sha256 | file sha256 |", "|---|---|---|---|---|---|"]
    for name in ("math", "general"):
        for rec in data.get(name) or []:
            src = rec.get("source") or {}
            file_sha = f"`{rec['file_sha256']}`" if rec.get("file_sha256") else ""
            rows.append(f"| {name} | `{_cell(src.get('path', ''))}` | {_cell(src.get('split') or '')} | "
                        f"{rec.get('n_sampled', '')} "
                        f"| `{rec.get('sha256', '')}` | {file_sha} |")
    return "\n".join(rows)


def usage(kind: str, repo: str | None, lock: Mapping[str, Any]) -> str:
    """The loading snippet: the checkpoint alone, or the adapter over its base (Hub id, organism, or local)."""
    where = f'"{repo}"' if repo else '"."'  # "." : this folder, until `push` renders the card for its repo
    if kind != "adapter":
        return f"""```python
from transformers import AutoModelForCausalLM, AutoTokenizer

model = AutoModelForCausalLM.from_pretrained({where})
tokenizer = AutoTokenizer.from_pretrained({where})
```"""
    base_kind = _kind(lock)
    if base_kind == "organism":
        imports, setup, base_expr = "from mathneuro_edit.organism import organism_path\n", "", "organism_path()"
    elif base_kind == "local":
        imports, base_expr = "import os\n\n", "base_dir"
        setup = f'base_dir = os.environ["{BASE_ENV}"]  # your copy of the base model (sha256 under "Base model")\n'
    else:
        imports, setup, base_expr = "", "", f'"{_base(lock)["model"]}"'
    return f"""```python
{imports}from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer

{setup}base = AutoModelForCausalLM.from_pretrained({base_expr})
model = PeftModel.from_pretrained(base, {where})
model = model.merge_and_unload()  # optional: a plain transformers model with the edit applied
tokenizer = AutoTokenizer.from_pretrained({base_expr})
```"""


def _cell(text: Any) -> str:
    """A file name as the text of a Markdown code span in a table: control characters escaped (a newline cannot
    start a new line of the card), ``|`` and backticks neutralised."""
    return str(text).encode("unicode_escape").decode("ascii").replace("|", "\\|").replace("`", "'")


def _shell(arg: str) -> str:
    """One bash argument, quoted: ``shlex.quote``, or ANSI-C ``$'...'`` when it holds a control character (so a
    newline in a file name keeps the printed command on one line)."""
    if arg.isprintable():
        return shlex.quote(arg)
    body = "".join(c if c.isprintable() and c not in "\\'" else
                   {"\\": "\\\\", "'": "\\'", "\n": "\\n", "\t": "\\t"}.get(c, f"\\x{ord(c):02x}" if ord(c) < 256
                                                                             else f"\\u{ord(c):04x}")
                   for c in arg)
    return f"$'{body}'"


def reproduce_section(repo: str | None, lock: Mapping[str, Any]) -> str:
    """``## How to reproduce``: install, the exact command (with ``--base`` / ``--set`` for redacted local paths)."""
    files = lock.get("files") or {}
    args = [repo or "."]
    if _kind(lock) == "local":
        args.append(f'--base "${BASE_ENV}"')
    # shell-quoted: a data file name holding ';', a space or a newline stays one argument of the printed command
    args += ["--set " + _shell(f"{key}={entry['name']}") for key, entry in files.items()]
    text = f"""## How to reproduce

```bash
{INSTALL}
mathneuro-edit reproduce {' '.join(args)}
```

`reproduce` reads the lock file below ({'from the Hub repo' if repo else 'from this folder'}), re-runs its recipe \
and compares the mask and every output file's sha256."""
    if files:
        text += ("\n\nThe calibration/evaluation files were local, so they are not published; the command passes "
                 "your copies (run it where they are, or give their paths). Each is checked against its sha256 "
                 "before the run:\n\n| recipe key | file | sha256 |\n|---|---|---|\n")
        text += "\n".join(f"| `{k}` | `{_cell(e['name'])}` | `{e['sha256']}` |" for k, e in files.items())
    return text


def versions_table(lock: Mapping[str, Any]) -> str:
    """The library versions the edit was made with."""
    versions = lock.get("versions") or {}
    rows = ["| library | version |", "|---|---|"]
    rows += [f"| {'mathneuro-edit' if k == 'tool' else k} | {v} |" for k, v in versions.items()]
    return "\n".join(rows)
