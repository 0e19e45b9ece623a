"""The model card's paragraphs on the form of the weights: a GGUF base, a cast dtype, GGUF files beside a checkpoint.

Each is empty unless the run made that form (a GGUF base, ``outputs.dtype`` other than the base's, the GGUF
output in the checkpoint's folder), so most cards show none of them. Kept apart from
:mod:`mathneuro_edit.publish.card` (the card's assembly) because they depend on the lock and the output kind only,
not on the recipe, and their exact text is tested on its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .card_sections import requantized
from .outputs import ADAPTER, GGUF, output


def _gguf_usage(repo: str | None, ggufs: Mapping[str, str], lock: Mapping[str, Any] | None = None) -> str:
    """The llama.cpp paragraph of a card whose folder holds the GGUF output's files (``{file: sha256}``; the
    checkpoint's): a local card names the files here; a published one names them in the GGUF repo
    (``<repo>-GGUF``, their own repo)."""
    if not ggufs:
        return ""
    gguf_repo = f"{repo}{GGUF.repo_suffix}" if repo else None
    names = {(GGUF.name_in_repo(lock, f) if gguf_repo and lock is not None else f): h for f, h in ggufs.items()}
    rows = "\n".join(f"| `{f}` | `{h}` |" for f, h in names.items())
    first = next(iter(names))
    where = (
        f"published in their own repo, [{gguf_repo}](https://huggingface.co/{gguf_repo})"
        if gguf_repo
        else "in this folder (`mathneuro-edit push OUT --gguf` publishes them in a repo of their own)"
    )
    return f"""
The edit as GGUF, for llama.cpp, Ollama and LM Studio (written by mathneuro-edit from this checkpoint and
{requantized(gguf_types(ggufs))}; `mathneuro-edit verify` audits it), {where}:

| file | sha256 |
|---|---|
{rows}

```bash
{f"hf download {gguf_repo} {first} --local-dir ." + chr(10) if gguf_repo else ""}llama-cli -m {first}
```
"""


def gguf_types(ggufs: Mapping[str, str]) -> list[str]:
    """The GGUF types of a folder's ``model-<TYPE>.gguf`` files (``["Q8_0"]``), in order."""
    return [f.removesuffix(".gguf").rsplit("-", 1)[-1] for f in ggufs]


def files_cell(lock: Mapping[str, Any], kind: str, weights_dtype: str | None, ggufs: Mapping[str, str]) -> str:
    """The settings table's ``files`` cell: what this repo's weight files are (each repo's card describes its own
    files: a GGUF repo its quantization type, the checkpoint its dtype; issue 39)."""
    if kind == GGUF.name:
        return "GGUF: " + ", ".join(gguf_types(ggufs) or ["none"])
    if kind == ADAPTER.name:
        return "PEFT SHiRA adapter (safetensors): the edit's deltas at the edited weights"
    return f"safetensors, {weights_dtype or 'the base model dtype'} (not quantized)"


def _dtype_note(lock: Mapping[str, Any], kind: str, weights_dtype: str | None) -> str:
    """The card's sentence on ``outputs.dtype`` (empty when the checkpoint keeps the base's own dtype)."""
    dtype = ((lock.get("recipe") or {}).get("outputs") or {}).get("dtype")
    if output(kind).deltas or (lock.get("base") or {}).get("gguf") or dtype in (None, "auto") or not weights_dtype:
        return ""
    return (
        f"\nThe weights are stored in {weights_dtype} (`outputs.dtype`): the edit was computed in the base's own "
        "dtype and the result cast; the evaluation below ran on these stored weights (read into the base's dtype).\n"
    )


def _gguf_note(lock: Mapping[str, Any], kind: str, weights_dtype: str | None = None) -> str:
    """The card's paragraph on a GGUF base (empty for other bases): what the weights are and where the base is."""
    gguf = (lock.get("base") or {}).get("gguf")
    if not gguf:
        return ""
    stored = weights_dtype or "float32"
    cast = (
        ""
        if stored == "float32"
        else (
            f", then stored in {stored} (`outputs.dtype`; the evaluation below ran on these {stored} weights, in float32)"
        )
    )
    if output(kind).deltas:
        what = (
            "The adapter applies to that dequantized model (not to a quantized one, nor to the Hub model it was "
            "converted from)"
        )
    elif kind == GGUF.name:  # these files hold the checkpoint's weights quantized again: say to which type
        what = (
            f"These GGUF files are that dequantized model with the edit (computed in float32{cast}), written from the "
            f"edited checkpoint and {requantized(gguf_types(_own_ggufs(lock)))}"
        )
    else:
        what = f"These weights are that dequantized model with the edit (computed in float32{cast}; safetensors, not quantized)"
    return (
        f"\nThe base is the GGUF file `{gguf['file']}` (sha256 `{gguf['sha256']}`), dequantized to float32 by "
        f"transformers. {what}. `mathneuro-edit dequantize FILE.gguf` writes the dequantized base folder once "
        "and prints its path; its safetensors sha256 are the lock's `base.weights_sha256`.\n"
    )


def _own_ggufs(lock: Mapping[str, Any]) -> dict[str, str]:
    """The GGUF output's files the lock records (``{name in the folder: sha256}``)."""
    outputs = lock.get("outputs") or {}
    return {k.removeprefix(GGUF.folder + "/"): v for k, v in sorted(outputs.items()) if GGUF.owns(k)}
