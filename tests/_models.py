"""Tiny random models saved to folders, as a user's base model would be on disk (for export/adapter/CLI tests).

Builds on :mod:`tests._tiny` (the families, the offline character tokenizer and the calibration texts) and adds:

- :func:`save_tiny`: a tiny model of any family in :data:`tests._tiny.FAMILIES` saved with ``save_pretrained`` (unsharded, or
  sharded with ``max_shard_size="20KB"`` so that even 2-layer models get several shards and an index), with
  the tokenizer, a chat template, a generation config and an extra small file;
- :func:`tiny_mask`: a real MathNeuro mask of a model (``calibrate`` + ``find_math_params`` on a few texts);
- :func:`hash_tree`: sha256 of every file of a folder (to prove a base folder was not modified).

Example:
    >>> folder = save_tiny(tmp_path / "base", "mixtral", sharded=True)  # doctest: +SKIP
    >>> model = AutoModelForCausalLM.from_pretrained(folder)  # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch

from tests._tiny import GENERAL, MATH, VOCAB, build, char_tokenizer

__all__ = [
    "CHAT_TEMPLATE",
    "save_tiny",
    "load_tiny",
    "tiny_mask",
    "hash_tree",
    "sample_ids",
]

CHAT_TEMPLATE = (
    "{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}</s>{% endfor %}"
    "{% if add_generation_prompt %}<s>assistant: {% endif %}"
)


def save_tiny(
    folder: str | Path,
    family: str,
    *,
    sharded: bool = False,
    dtype: torch.dtype = torch.float32,
    seed: int = 0,
    tokenizer: bool = True,
) -> Path:
    """Save a tiny random ``family`` model (and its tokenizer) to ``folder`` as ``save_pretrained`` writes it.

    Args:
        folder: destination (created).
        family: one of :data:`tests._tiny.FAMILIES`.
        sharded: force several shards and a ``model.safetensors.index.json`` (``max_shard_size="20KB"``).
        dtype: the saved weights' dtype (``torch.float32`` or ``torch.bfloat16``).
        seed: seed of the random weights.
        tokenizer: also save the character tokenizer with :data:`CHAT_TEMPLATE`.

    Returns:
        The folder.
    """
    folder = Path(folder)
    model, tok = build(family, dtype=dtype, seed=seed)
    # transformers 5 writes dtype into config.json, and from_pretrained(dtype="auto") reads it back
    model.save_pretrained(folder, max_shard_size="20KB" if sharded else "50GB")
    if tokenizer:
        tok.chat_template = CHAT_TEMPLATE
        tok.save_pretrained(folder)
    (folder / "notes.txt").write_text("an extra small file that an export must copy\n")
    (folder / "README.md").write_text("# base card (an export writes its own)\n")
    return folder


def load_tiny(folder: str | Path) -> torch.nn.Module:
    """Load a saved tiny model with plain transformers, in eval mode."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder).eval()


def tiny_mask(model: torch.nn.Module, *, top_k: float = 0.1, **find_kwargs):
    """A real MathNeuro mask: ``calibrate`` on :data:`MATH` and :data:`GENERAL`, then ``find_math_params``."""
    from mathneuro_edit import calibrate, find_math_params

    tok = char_tokenizer()
    math = calibrate(model, tok, MATH, max_length=64, batch_size=4, progress=False)
    general = calibrate(model, tok, GENERAL, max_length=64, batch_size=4, progress=False)
    return find_math_params(model, math, general, top_k=top_k, **find_kwargs)


def sample_ids(n_tokens: int = 12, seed: int = 1) -> torch.Tensor:
    """A fixed batch of token ids ``(2, n_tokens)`` within the tiny vocabulary."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, VOCAB, (2, n_tokens), generator=g)


def hash_tree(folder: str | Path) -> dict[str, str]:
    """``relative path -> sha256`` of every file under ``folder`` (symlinks followed)."""
    folder = Path(folder)
    return {
        p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }
