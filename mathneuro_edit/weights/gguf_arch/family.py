"""A GGUF family: everything :mod:`..gguf_writer` asks of one ``model_type``, in one object.

As llama.cpp's converter registers one class per architecture, each family module registers one :class:`Family`
per ``model_type`` it writes (:func:`register_family`); the writer looks it up (:func:`family_for`) and never tests
a ``model_type`` itself (docs/architecture.md, "GGUF families"). A field left at its default is llama's convention.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .common import View

__all__ = ["Family", "FAMILIES", "register_family", "family_for", "LLAMA_ROPE_SCALINGS", "rope_scalings_note"]

Config = dict[str, Any]
# a family's one-to-many or renamed tensors: [(HF-style name gguf's name map knows, checkpoint name or View)]
TensorViews = list[tuple[str, str | View]] | None
KeyWriter = Callable[[Any, Config], None]  # (gguf.GGUFWriter, config) -> None: adds a family's own keys

# the rope scalings every family's keys and tensors express (rope.scaling.* keys; Llama 3's rope_freqs tensor)
LLAMA_ROPE_SCALINGS = ("linear", "yarn", "llama3")

# the refusal line of a written family whose config llama.cpp would run otherwise than transformers
CANNOT_RUN = (
    "outputs.gguf: this {model_type} config cannot be run by llama.cpp as transformers runs it: {why}; set "
    "outputs.gguf: null (the checkpoint holds the edit)"
)


@dataclass(frozen=True)
class Family:
    """One ``model_type`` as llama.cpp runs it, from ``config.json`` alone.

    Attributes:
        model_type: the ``config.json`` value this family is looked up by.
        arch: its ``gguf.MODEL_ARCH`` member (``"LLAMA"``): the file's ``general.architecture`` and name map.
        permute_qk: whether the rows of ``attn_q``/``attn_k`` go from transformers' rotate-half rotary to
            llama.cpp's interleaved one (llama's arch); NeoX-rotary families keep transformers' order.
        doc: this family's entry of docs/formats.md (markdown; ``scripts/gguf_families_doc.py`` writes the list).
        refusal_reason: what of a config llama.cpp would run otherwise than transformers, in words (None: nothing).
        refusal_template: the one line of a refused config, from ``{model_type}`` and ``{why}``.
        llama_names: the config with the names the writer reads (``hidden_size``...), for a family spelling them
            otherwise (GPT-2).
        tensor_views: a checkpoint tensor as llama.cpp's tensors when not one to one (:data:`TensorViews`; None:
            the tensor as it is).
        norm_shift: what llama.cpp adds to every ``*norm.weight`` (Gemma's ``1 + w`` RMSNorms: 1).
        rotary: whether q/k rotate (GPT-2's positions are learned: LayerNorm keys instead of rope keys).
        rope_dims: rotary dimensions per head, from the config and the head length.
        feed_forward_length: the dense MLP's width (``feed_forward_length``).
        rope_scalings: the rope scaling kinds written (others are refused before anything is computed).
        mla: DeepSeek's MLA: one KV head and MLA's lengths (its key writers), not the writer's
            ``head_count_kv`` / key and value lengths.
        key_writers: the family's own keys, written in this order after the llama set (the same config always
            gives the same file).

    Example:
        >>> f = Family("llama", "LLAMA", permute_qk=True, doc="Llama")
        >>> f.refusal({"model_type": "llama"}) is None, f.rope_dims({}, 64), f.tensor_shift("model.norm.weight")
        (True, 64, 0.0)
        >>> picky = Family("x", "LLAMA", False, "X", refusal_reason=lambda cfg: "it is odd")
        >>> print(picky.refusal({}))  # doctest: +NORMALIZE_WHITESPACE
        outputs.gguf: this x config cannot be run by llama.cpp as transformers runs it: it is odd; set outputs.gguf:
        null (the checkpoint holds the edit)
    """

    model_type: str
    arch: str
    permute_qk: bool
    doc: str
    refusal_reason: Callable[[Config], str | None] = lambda cfg: None
    refusal_template: str = CANNOT_RUN
    llama_names: Callable[[Config], Config] = lambda cfg: cfg
    tensor_views: Callable[[Config, str], TensorViews] = lambda cfg, hf_name: None
    norm_shift: float = 0.0
    rotary: bool = True
    rope_dims: Callable[[Config, int], int] = lambda cfg, head_dim: head_dim
    feed_forward_length: Callable[[Config], int] = lambda cfg: int(cfg["intermediate_size"])
    rope_scalings: tuple[str, ...] = LLAMA_ROPE_SCALINGS
    mla: bool = False
    key_writers: tuple[KeyWriter, ...] = ()

    def refusal(self, cfg: Config) -> str | None:
        """None when llama.cpp runs this config as transformers does, else the one line (what, why, what to do)."""
        why = self.refusal_reason(cfg)
        return None if why is None else self.refusal_template.format(model_type=self.model_type, why=why)

    def tensor_shift(self, hf_name: str) -> float:
        """What llama.cpp adds to a checkpoint tensor's values (:attr:`norm_shift` for a ``*norm.weight``)."""
        return self.norm_shift if hf_name.endswith("norm.weight") else 0.0


FAMILIES: dict[str, Family] = {}  # model_type -> its family, filled by the family modules as they are imported


def register_family(*families: Family) -> None:
    """Add families to :data:`FAMILIES` (one per ``model_type``); a ValueError for a ``model_type`` registered
    already (two modules would each think they write it)."""
    for family in families:
        if family.model_type in FAMILIES:
            raise ValueError(f"GGUF family {family.model_type!r} is registered twice")
        FAMILIES[family.model_type] = family


def family_for(cfg: Config) -> Family | None:
    """The registered family of a config (its ``model_type``), or None: the GGUF export does not write it.

    Example:
        >>> family_for({"model_type": "qwen2"}).arch, family_for({"model_type": "jetmoe"})
        ('QWEN2', None)
    """
    return FAMILIES.get(str(cfg.get("model_type")))


def rope_scalings_note() -> str:
    """The rope scalings written, for a refusal: llama's, then each other kind with the families writing it.

    Example:
        >>> rope_scalings_note()
        'linear, yarn, llama3; longrope for phi3'
    """
    extra: dict[str, list[str]] = {}
    for family in FAMILIES.values():
        for kind in family.rope_scalings:
            if kind not in LLAMA_ROPE_SCALINGS:
                extra.setdefault(kind, []).append(family.model_type)
    return ", ".join(LLAMA_ROPE_SCALINGS) + "".join(f"; {kind} for {', '.join(t)}" for kind, t in extra.items())
