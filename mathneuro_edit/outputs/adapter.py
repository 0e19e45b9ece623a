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
from .common import BASE_ENV, BASE_GGUF_ENV, base_kind, hub_origin, lock_base, snippet_facts
from .registry import CardView, Output, RunView, register_output

__all__ = ["ADAPTER", "write_adapter", "check_adapter_support", "adapter_base", "peft_usage"]


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


def peft_usage(out: Output, view: CardView) -> dict[str, Any]:
    """The data of the adapter's snippet (``card_template.md``'s ``adapter_usage``): how it loads its base, with
    transformers and PEFT only: a Hub id, the organism, a local folder (by its ``base.hub_id`` when named), or a
    GGUF file dequantized by transformers in float32, as the edit was made (``mathneuro-edit dequantize`` writes the
    same weights), the file from its Hub repo, else the user's copy (:data:`BASE_GGUF_ENV`)."""
    base, kind = lock_base(view.lock), base_kind(view.lock)
    origin, revision = hub_origin(view.lock)
    gguf = base.get("gguf") if kind != "organism" else None  # deltas to a dequantized GGUF: loaded from that file
    facts: dict[str, Any] = {"model": base.get("model"), "revision": base.get("revision")}
    if gguf:
        facts.update(how="hub_gguf" if kind == "hub" else "local_gguf", env=BASE_GGUF_ENV, gguf=gguf)
        # the Hub repo and its GGUF file as Python literals, escaped
        facts["names"] = f"{json.dumps(str(base.get('model')))}, {json.dumps(str(gguf.get('file')))}"
    elif kind == "local" and origin:  # the adapter names base.hub_id
        facts.update(how="origin", model=origin, revision=revision)
    else:
        facts.update(how=kind, env=BASE_ENV)
    return {**snippet_facts(view), "base": facts}


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
