"""The PEFT SHiRA adapter: the edit as sparse deltas to the base's weights, loaded with PEFT over that base.

Its entry, its run step (:func:`write_adapter`, pinned to the base it was computed against: :func:`adapter_base`),
its model check (:func:`check_adapter_support`: PEFT holds an exact delta of a plain ``nn.Linear`` only; the
refusal names the recipe line) and its card snippets.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..layout import MATHNEURO_CONFIG
from .checkpoint import audit_weights
from .common import BASE_ENV, BASE_GGUF_ENV, base_kind, hub_origin, lock_base, usage_prompt, where_loaded
from .registry import CardView, Output, RunView, register_output

__all__ = ["ADAPTER", "write_adapter", "check_adapter_support", "adapter_base", "peft_usage", "PEFT_LOADERS"]


def adapter_base(recipe: Any, revision: str | None) -> tuple[str | None, str | None]:
    """``(base_model_name_or_path, revision)`` an adapter records: ``base.hub_id`` (and ``hub_revision``) for a
    local folder that names its Hub origin; ``(None, revision)`` for the default (the Hub id of a Hub base).

    A GGUF base's adapter names no Hub id: it was computed against the dequantized GGUF, whose
    weights are other numbers; naming the Hub id would let ``AutoPeftModelForCausalLM`` load the adapter onto
    the wrong weights without an error. Its card names the dequantized folder instead."""
    b = recipe.base
    if b.hub_id is not None and not b.is_gguf:
        return b.hub_id, b.hub_revision
    return None, revision


def write_adapter(job: RunView, dest: Path) -> float:
    """The adapter's step: the PEFT SHiRA adapter of the edit into ``dest``, pinned to the base it was computed
    against (:func:`adapter_base`). Returns its size as a fraction of the checkpoint's."""
    from ..weights.adapter import export_adapter  # torch: only when a run writes it

    recipe = job.recipe
    named, pinned = adapter_base(recipe, job.base.revision)
    adapter = export_adapter(
        job.base.folder,
        job.mask,
        recipe.edit.effective_scale,
        dest,
        revision=pinned,
        base_model_name_or_path=named,
        trust_remote_code=recipe.base.trust_remote_code,
    )
    if job.stages is not None:
        job.stages.note(f"{100 * adapter.size_ratio:.2f}% of the checkpoint's size")
    return adapter.size_ratio


def _refusal(model: Any, targets: Any, config: Mapping[str, Any]) -> str | None:
    """``plan``'s line on the adapter: ``None`` when every scored weight is PEFT-expressible."""
    from ..weights.support import adapter_refusal

    return adapter_refusal(model, targets, str(config.get("model_type")))


def check_adapter_support(recipe: Any, model: Any) -> None:
    """Refuse ``outputs.adapter`` when a target is not a plain ``nn.Linear`` (PEFT cannot express it exactly):
    the family gets a checkpoint only, and the message names the recipe line. ``model`` may be on the meta device."""
    from ..engine.targets import find_targets

    targets = find_targets(model, include=recipe.targets.include or None, exclude=recipe.targets.exclude or None)
    refusal = _refusal(model, targets, {"model_type": getattr(model.config, "model_type", "?")})
    if refusal is not None:
        raise InputError(refusal)


def peft_usage(out: Output, view: CardView) -> str:
    """The loading snippet of the adapter over its base: a Hub id, the organism, a local folder (by its
    ``base.hub_id`` when named), or a GGUF file, loaded with transformers and PEFT only: dequantized by
    transformers in float32, as the edit was made (``mathneuro-edit dequantize`` writes the same weights), the file
    from its Hub repo, else the user's copy (:data:`BASE_GGUF_ENV`)."""
    base, kind = lock_base(view.lock), base_kind(view.lock)
    origin, revision = hub_origin(view.lock)
    gguf = base.get("gguf") if kind != "organism" else None  # deltas to a dequantized GGUF: loaded from that file
    imports, setup, intro = "", "", ""
    if gguf and kind == "hub":
        rev = f', revision="{base["revision"]}"' if base.get("revision") else ""
        names = f"{json.dumps(str(base['model']))}, {json.dumps(str(gguf.get('file')))}"  # Python literals, escaped
        setup, load = f"folder, name = {names}  # the Hub repo and its GGUF file\n", f"folder, gguf_file=name{rev}"
    elif gguf:
        imports, load = "import os\n\n", "folder, gguf_file=name"
        setup = (
            f'gguf = os.path.abspath(os.environ["{BASE_GGUF_ENV}"])  # your copy of the GGUF file named above\n'
            "folder, name = os.path.split(gguf)\n"
        )
    elif kind == "organism":
        imports, load = "from mathneuro_edit.organism import organism_path\n", "organism_path()"
    elif kind == "local" and origin:  # the adapter names base.hub_id
        load = f'"{origin}"' + (f', revision="{revision}"' if revision else "")
    elif kind == "local":
        imports, load = "import os\n\n", "base_dir"
        setup = f'base_dir = os.environ["{BASE_ENV}"]  # your copy of the base model (sha256 under "Base model")\n'
    else:
        load = f'"{base["model"]}"'
    base_args = f"{load})"
    if gguf:
        intro = f"""The adapter holds deltas to the weights of the GGUF file `{gguf.get("file")}` (sha256 `{gguf.get("sha256")}`) \
as transformers dequantizes them, in float32; over other weights (the Hub model's own) it gives another model. \
With transformers, PEFT and the `gguf` package (`pip install gguf`), no mathneuro-edit:

"""
        imports, base_args = imports + "import torch\n", f"{load}, dtype=torch.float32)  # dequantized, float32"
    return f"""{intro}```python
{imports}from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer

{setup}base = AutoModelForCausalLM.from_pretrained({base_args}
model = PeftModel.from_pretrained(base, {where_loaded(view.repo)})
model = model.merge_and_unload()  # optional: a plain transformers model with the edit applied
tokenizer = AutoTokenizer.from_pretrained({load}){usage_prompt(view.prompt, view.chat)}
```"""


# ``## Where it loads`` of the adapter: PEFT only, and what was checked of the loaders that do not take it
PEFT_LOADERS = """## Where it loads

- **PEFT only**, with `PeftModel.from_pretrained(base, adapter)` as in the code above: this is a SHiRA (sparse)
  adapter. mathneuro-edit's tests run that code and check that the result equals the edited checkpoint.
  `AutoPeftModelForCausalLM.from_pretrained(adapter)` works only when `adapter_config.json` names a Hub base
  (`base_model_name_or_path`): an adapter of a local folder without `base.hub_id`, or of a GGUF base (its deltas
  are to the dequantized GGUF, not to the Hub model's weights), names none, and PEFT then asks the Hub for `None`;
  load the base yourself and use `PeftModel` as above.
- **Not transformers' own adapter loading** (`model.load_adapter(adapter)`, `from_pretrained` on this repo): it
  does not fail on this adapter, it reports every `shira_indices` key as UNEXPECTED, leaves the weights
  **unedited**, and the model's next forward pass fails with `KeyError: 'default'` (mathneuro-edit's tests check
  this symptom, so a change in transformers is noticed).
- **Not** vLLM, TGI, SGLang or llama.cpp: they load LoRA adapters only. For those,
  use the edited checkpoint{% if run_repo %} ([{{ run_repo }}](https://huggingface.co/{{ run_repo }})){% endif %}, the same weights as a plain transformers folder."""


ADAPTER = register_output(
    Output(
        name="adapter",
        gguf_files=None,
        repo_suffix="-adapter",
        library="peft",
        relation="adapter",
        tags=("peft", "shira", "transformers"),
        holds="PEFT adapter holds",
        evaluated=True,
        usage=peft_usage,
        loaders=PEFT_LOADERS,
        files_cell=lambda weights_dtype, files: (
            "PEFT SHiRA adapter (safetensors): the edit's deltas at the edited weights"
        ),
        on_gguf_base=lambda cast, files: (
            "The adapter applies to that dequantized model (not to a quantized one, nor to the Hub model it was "
            "converted from)"
        ),
        write=write_adapter,
        stage=lambda recipe: f"export {ADAPTER.folder}/ (PEFT SHiRA)",
        markers=("adapter_config.json", MATHNEURO_CONFIG),
        deltas=True,
        check=check_adapter_support,
        refusal=_refusal,
        audit=audit_weights,
    )
)
