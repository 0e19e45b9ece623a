"""The shipped model organism's files and their loader (plain transformers, safetensors weights, no remote code)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import InputError

if TYPE_CHECKING:
    import torch

__all__ = ["organism_path", "load_organism"]


def organism_path() -> Path:
    """Folder of the shipped model inside the package, ``mathneuro_edit/organism/model`` (config, safetensors
    weights, tokenizer, card, organism_training.json).

    Example:
        >>> (organism_path() / "config.json").is_file()
        True
    """
    return Path(__file__).resolve().parent / "model"


def load_organism(dtype: torch.dtype | None = None) -> tuple[torch.nn.Module, object]:
    """Load the shipped model and tokenizer with plain transformers (safetensors weights, no remote code):
    ``(model, tokenizer)``, a ``LlamaForCausalLM`` in eval mode (``dtype``: float32, as stored, unless given) and
    its ``PreTrainedTokenizerFast`` (BOS prepended, left padding).

    Example:
        >>> model, tok = load_organism()
        >>> tok.decode(tok("Question: 2")["input_ids"], skip_special_tokens=True)
        'Question: 2'
    """
    import torch  # here, not at the top: finding the organism's files (recipes, plan) needs no torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtype = torch.float32 if dtype is None else dtype
    path = organism_path()
    if not (path / "model.safetensors").is_file():
        raise InputError(
            f"organism model: {path / 'model.safetensors'} is missing; "
            "regenerate it with `python scripts/train_organism.py`"
        )
    if not isinstance(dtype, torch.dtype):
        raise InputError(f"dtype: must be a torch.dtype, got {dtype!r}; pass e.g. torch.float32")
    # use_kernels: transformers' default would fetch compiled Hub kernels on an accelerator (offline: a failure)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, trust_remote_code=False, use_kernels=False)
    model.eval()
    tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=False)
    return model, tokenizer
