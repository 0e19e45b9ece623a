"""Sections of the model card that come from the lock alone: the base, the data, loading, reproducing, versions.

Kept apart from :mod:`mathneuro_edit.publish.card` (metadata, assembly) so each stays one small module. Every function
reads the lock's public form (no local path can reach the card through here) and returns Markdown.

``repo`` is the Hub repo the card is published in (``mathneuro-edit push`` renders the card again for it), or
``None`` for a card that still lives in a local output folder: then the snippets load ``"."``, this folder.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._version import __version__
from ..util.paths import LOCAL, ORGANISM

__all__ = ["INSTALL", "BASE_ENV", "base_sentence", "base_section", "data_table", "usage", "gguf_usage", "loaders",
           "reproduce_section", "versions_table"]

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
        lines += [f"| `{name}` | `{sha}` |" for name, sha in (base.get("weights_sha256") or {}).items()]
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
            rows.append(f"| {name} | `{src.get('path', '')}` | {src.get('split') or ''} | {rec.get('n_sampled', '')} "
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


def gguf_usage(repo: str | None, ggufs: Mapping[str, str], base_repo: str | None) -> str:
    """The GGUF repo's files (``{name: sha256}``) and how llama.cpp, Ollama and LM Studio load them."""
    rows = "\n".join(f"| `{f}` | {f.removesuffix('.gguf').rsplit('-', 1)[-1]} | `{h}` |" for f, h in ggufs.items())
    first = next(iter(ggufs), "MODEL.gguf")
    qtype = first.removesuffix(".gguf").rsplit("-", 1)[-1]
    source = (f"the edited transformers checkpoint [{base_repo}](https://huggingface.co/{base_repo})" if base_repo
              else "the edited transformers checkpoint of the same run")
    hub = f"""
```bash
llama-cli -hf {repo}:{qtype}          # llama.cpp
ollama run hf.co/{repo}:{qtype}       # Ollama
```

LM Studio: search for `{repo}` in its model browser, or `lms get {repo}`.
""" if repo else ""
    return f"""Converted by mathneuro-edit from {source}; the same weights as that checkpoint.

| file | type | sha256 |
|---|---|---|
{rows}
{hub}
```bash
{f"hf download {repo} {first} --local-dir .{chr(10)}" if repo else ""}llama-cli -m {first}
```"""


def loaders(kind: str, repo: str | None) -> str:
    """``## Where it loads``: which loaders take this output, and for those not run by mathneuro-edit's tests,
    what was checked instead (never a claim of a test that did not run)."""
    if kind == "adapter":
        checkpoint = f" ([{repo.removesuffix('-adapter')}](https://huggingface.co/{repo.removesuffix('-adapter')}))" \
            if repo and repo.endswith("-adapter") else ""
        return f"""## Where it loads

- **PEFT only** (`PeftModel.from_pretrained` or `AutoPeftModelForCausalLM.from_pretrained`): this is a SHiRA
  (sparse) adapter. mathneuro-edit's tests load it this way and check that the result equals the edited checkpoint.
- **Not** vLLM, TGI, SGLang or llama.cpp: they load LoRA adapters only. Nor transformers' own adapter loading
  (`model.load_adapter`, `from_pretrained` on this repo). For those, use the edited checkpoint{checkpoint}, the
  same weights as a plain transformers folder."""
    if kind == "gguf":
        return """## Where it loads

- **llama.cpp** (`llama-cli`, `llama-server`): mathneuro-edit's tests read these files back with llama.cpp
  (llama-cpp-python, in the optional GGUF test tier) and with the `gguf` package.
- **Ollama, LM Studio** (both run llama.cpp): not run by the tests. Checked instead: the file is GGUF v3 with the
  `general.*` metadata llama.cpp's own converter writes (architecture, name, base model, license, file type), the
  tensor names and types llama.cpp expects for the architecture, and the tokenizer (`tokenizer.ggml.*`)."""
    return """## Where it loads

- **transformers** (`AutoModelForCausalLM.from_pretrained`): mathneuro-edit's tests load the pushed repo this way
  and run a forward pass.
- **vLLM, TGI, SGLang**: they serve plain Hugging Face folders like this one; not run by the tests. Checked
  instead: `config.json` names the architecture (`architectures`, `model_type`) of the base, the weights are
  safetensors only (no pickle) with the base's tensor names, shapes and dtypes, and the tokenizer files are the
  base's.
- The GGUF version of this edit (for llama.cpp, Ollama, LM Studio), when written, has a repo of its own; the
  PEFT adapter too (PEFT only)."""


def reproduce_section(repo: str | None, lock: Mapping[str, Any]) -> str:
    """``## How to reproduce``: install, the exact command (with ``--base`` / ``--set`` for redacted local paths)."""
    files = lock.get("files") or {}
    args = [repo or "."]
    if _kind(lock) == "local":
        args.append(f'--base "${BASE_ENV}"')
    args += [f"--set {key}={entry['name']}" for key, entry in files.items()]
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
        text += "\n".join(f"| `{k}` | `{e['name']}` | `{e['sha256']}` |" for k, e in files.items())
    return text


def versions_table(lock: Mapping[str, Any]) -> str:
    """The library versions the edit was made with."""
    versions = lock.get("versions") or {}
    rows = ["| library | version |", "|---|---|"]
    rows += [f"| {'mathneuro-edit' if k == 'tool' else k} | {v} |" for k, v in versions.items()]
    return "\n".join(rows)
