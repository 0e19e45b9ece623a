"""How a GGUF release is named: llama.cpp's convention ``<Base>-<Size>-<Variant>-<Type>.gguf`` and its metadata.

:func:`gguf_naming` gives the ``general.basename`` / ``size_label`` / ``finetune`` llama.cpp's converter writes
(``SmolLM2`` / ``135M`` / ``Instruct-MathNeuro-Prune``), :func:`gguf_repo_name` the file's name in its Hub repo,
:func:`gguf_general` every ``general.*`` key of the run's GGUF. All from the lock's public form: the same lock
always gives the same names, and never a local path.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ..util.paths import LOCAL, is_local_path
from .base_card import card_fields

__all__ = ["gguf_naming", "gguf_repo_name", "gguf_general", "hub_origin"]


_SIZE = re.compile(r"^(?P<name>.+?)-(?P<size>(?:\d+x)?\d+(?:\.\d+)?[KMBT])(?:-(?P<rest>.+))?$", re.IGNORECASE)


def _size_label(n: int) -> str:
    """llama.cpp's size label of a parameter count (``135M``, ``1.1M``, ``8.0B``)."""
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= scale:
            value = n / scale
            digits = max(2 - len(str(round(value)).lstrip("0")), 0)
            return f"{value:.{digits}f}{suffix}"
    return str(n)


def hub_origin(lock: Mapping[str, Any]) -> str | None:
    """The Hub id the lock's recipe names as the origin of a local base (``base.hub_id``), else ``None``."""
    hub_id = ((lock.get("recipe") or {}).get("base") or {}).get("hub_id")
    return str(hub_id) if hub_id else None


def gguf_naming(lock: Mapping[str, Any]) -> dict[str, str | None]:
    """``{"basename", "size_label", "finetune"}`` of the edited model, as llama.cpp's converter names a model
    (``SmolLM2`` / ``135M`` / ``Instruct-MathNeuro-Prune``): from the lock's public base name (``base.hub_id`` for
    a local folder or GGUF file that names its Hub origin; else a GGUF base's own ``general.basename``,
    ``size_label`` and ``finetune``), parameter count and edit (the same lock always gives the same names; never a
    local path)."""
    base = lock.get("base") or {}
    model = hub_origin(lock) or str(base.get("model") or "model")
    own = (base.get("gguf") or {}).get("general") or {}
    edit = (lock.get("recipe") or {}).get("edit") or {}
    variant = "MathNeuro-Prune" if edit.get("prune") else f"MathNeuro-Scale{float(edit.get('scale', 1)):g}"
    if model == LOCAL and own.get("basename"):  # the GGUF's own names, as its converter wrote them
        parts = {
            k: re.sub(r"[^A-Za-z0-9.-]+", "-", str(own[k])).strip("-") or None
            for k in ("basename", "size_label", "finetune")
            if own.get(k)
        }
        return {
            "basename": parts.get("basename") or "Model",
            "size_label": parts.get("size_label"),
            "finetune": "-".join(p for p in (parts.get("finetune"), variant) if p),
        }
    if model == LOCAL:
        arch = str((base.get("description") or {}).get("architecture") or "Model")
        name = re.sub(r"(ForCausalLM|LMHeadModel|Model)$", "", arch) or "Model"
    else:
        name = model.rstrip("/").split("/")[-1].removesuffix(".gguf")
        name = name[:1].upper() + name[1:]
    name = re.sub(r"[^A-Za-z0-9.-]+", "-", name).strip("-") or "Model"
    m = _SIZE.match(name)
    if m:
        head, size, rest = m.group("name"), m.group("size"), m.group("rest")
    else:
        params = int((lock.get("edit_summary") or {}).get("model_params") or 0)
        head, size, rest = name, (_size_label(params) if params else None), None
    return {"basename": head, "size_label": size, "finetune": "-".join(p for p in (rest, variant) if p)}


def gguf_repo_name(lock: Mapping[str, Any], local_name: str) -> str:
    """The name of a GGUF file in its Hub repo, by llama.cpp's convention ``<Base>-<Size>-<Variant>-<Type>.gguf``
    (``local_name`` is the run folder's ``model-<TYPE>.gguf``); the same lock always gives the same name.

    Example:
        >>> lock = {"base": {"model": "HuggingFaceTB/SmolLM2-135M-Instruct"}, "recipe": {"edit": {"prune": True}},
        ...         "edit_summary": {"model_params": 134515008}}
        >>> gguf_repo_name(lock, "model-Q8_0.gguf")
        'SmolLM2-135M-Instruct-MathNeuro-Prune-Q8_0.gguf'
    """
    qtype = local_name.rsplit("/", 1)[-1].removesuffix(".gguf").rsplit("-", 1)[-1]  # model-<TYPE>.gguf
    n = gguf_naming(lock)
    return "-".join(p for p in (n["basename"], n["size_label"], n["finetune"], qtype) if p) + ".gguf"


def gguf_general(lock: Mapping[str, Any], fields: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The ``general.*`` metadata of the run's GGUF (for :func:`~mathneuro_edit.weights.gguf_writer.write_gguf`):
    the names of :func:`gguf_naming`, the organization (the Hub owner of the base or of ``base.hub_id``, else a
    GGUF base's own), the base card's license fields and languages (else a GGUF base's own languages), the base
    model (a Hub base, or ``base.hub_id``), and the tags."""
    fields = card_fields(dict(fields or {}))
    meta: dict[str, Any] = dict(gguf_naming(lock))
    own = ((lock.get("base") or {}).get("gguf") or {}).get("general") or {}
    meta.update({k: fields[k] for k in ("license", "license_name", "license_link") if k in fields})
    if fields.get("language") or own.get("languages"):
        meta["languages"] = fields.get("language") or own["languages"]
    model = hub_origin(lock) or str((lock.get("base") or {}).get("model") or "")
    if model.count("/") == 1 and not is_local_path(model):
        meta["organization"] = model.split("/")[0]
    elif own.get("organization"):
        meta["organization"] = own["organization"]
    if model and model not in (LOCAL, "organism") and not is_local_path(model) and model.count("/") == 1:
        org, name = model.split("/")
        meta["base_models"] = [{"name": name, "organization": org, "repo_url": f"https://huggingface.co/{model}"}]
    edit = (lock.get("recipe") or {}).get("edit") or {}
    meta["tags"] = ["mathneuro", "mathneuro-edit", "model-editing", "math"] + (["pruning"] if edit.get("prune") else [])
    return meta
