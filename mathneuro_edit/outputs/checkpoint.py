"""The edited checkpoint: a plain transformers folder, streamed from the base's files with the edit baked in.

Its entry, its run step (:func:`write_checkpoint`, at ``outputs.dtype``: :func:`output_dtype`) and its card
snippets (loading with transformers, where it loads, its files cell and its sentence on a GGUF base).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .common import load_kwargs, usage_prompt, where_loaded
from .registry import CardView, Output, RunView, register_output

__all__ = [
    "CHECKPOINT",
    "write_checkpoint",
    "audit_weights",
    "output_dtype",
    "transformers_usage",
    "TRANSFORMERS_LOADERS",
]


def output_dtype(recipe: Any) -> str | None:
    """The checkpoint's dtype (``outputs.dtype``): as set; ``auto`` is the base's own (``None``: every tensor
    keeps its type), or for a GGUF base its source's (:func:`~mathneuro_edit.weights.gguf_reader.gguf_source_dtype`:
    bfloat16 unless the GGUF holds F32/F16/BF16 weights), never the float32 of its dequantized folder."""
    if recipe.outputs.dtype != "auto":
        return recipe.outputs.dtype
    if not recipe.base.is_gguf:
        return None
    from ..weights.gguf_reader import gguf_source_dtype  # reads the GGUF base (and torch): only for one

    return gguf_source_dtype(recipe.base)


def write_checkpoint(job: RunView, dest: Path) -> None:
    """The checkpoint's step: the edited checkpoint streamed into ``dest`` at :func:`output_dtype`."""
    from ..weights.checkpoint_writer import export_checkpoint  # torch: only when a run writes it

    recipe = job.recipe
    export_checkpoint(
        job.base.folder,
        job.mask,
        recipe.edit.effective_scale,
        dest,
        max_shard_size=recipe.outputs.max_shard_size,
        progress=job.progress,
        workers=job.workers,
        trust_remote_code=recipe.base.trust_remote_code,
        dtype=output_dtype(recipe),
    )


def audit_weights(folder: Path, base: str, mask: Any, scale: float, **how: Any) -> Any:
    """``verify``'s audit of an output of weights (the checkpoint, with the GGUF files beside it, or the adapter):
    every tensor against the base, the mask and the scale
    (:func:`~mathneuro_edit.weights.audit.verify`; ``how``: ``trust_remote_code``, ``progress``)."""
    from ..weights.audit import verify  # torch: only when a folder is audited

    return verify(folder, base, mask, scale, **how)


def transformers_usage(out: Output, view: CardView) -> str:
    """The loading snippet of a plain transformers folder (the checkpoint): loaded in the dtype the card's figures
    were computed in when a default load would compute in another (:attr:`CardView.load_dtype`), and prompted as
    they were measured (:func:`~.common.usage_prompt`)."""
    where = where_loaded(view.repo)
    torch_import, dtype = load_kwargs(view.load_dtype)
    why = "  # the dtype its figures were computed in, over the stored weights" if dtype else ""
    return f"""```python
{torch_import}from transformers import AutoModelForCausalLM, AutoTokenizer

model = AutoModelForCausalLM.from_pretrained({where}{dtype}){why}
tokenizer = AutoTokenizer.from_pretrained({where}){usage_prompt(view.prompt, view.chat)}
```"""


# ``## Where it loads`` of the checkpoint: transformers, and what was checked for the servers
TRANSFORMERS_LOADERS = """## Where it loads

- **transformers** (`AutoModelForCausalLM.from_pretrained`): mathneuro-edit's tests load the pushed repo this way
  and run a forward pass.
- **vLLM, TGI, SGLang**: they serve plain Hugging Face folders like this one; not run by the tests. Checked
  instead: `config.json` names the architecture (`architectures`, `model_type`) of the base, the weights are
  safetensors only (no pickle) with the base's tensor names, shapes and dtypes, and the tokenizer files are the
  base's.
- The GGUF version of this edit (for llama.cpp, Ollama, LM Studio), when written, has a repo of its own; the
  PEFT adapter too (PEFT only)."""


CHECKPOINT = register_output(
    Output(
        name="checkpoint",
        gguf_files=False,
        repo_suffix="",
        library="transformers",
        relation="finetune",
        tags=(),
        holds="model is",
        evaluated=True,
        usage=transformers_usage,
        loaders=TRANSFORMERS_LOADERS,
        files_cell=lambda weights_dtype, files: (
            f"safetensors, {weights_dtype or 'the base model dtype'} (not quantized)"
        ),
        on_gguf_base=lambda cast, files: (
            f"These weights are that dequantized model with the edit (computed in float32{cast}; safetensors, not "
            "quantized)"
        ),
        write=write_checkpoint,
        stage=lambda recipe: f"export {CHECKPOINT.folder}/",
        audit=audit_weights,
    )
)
