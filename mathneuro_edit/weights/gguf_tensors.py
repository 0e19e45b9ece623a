"""The tensors of a GGUF: which, in which order and type (:func:`gguf_plan`), and each one's float32 rows read
from the checkpoint (:func:`tensor_rows`), for :mod:`.gguf_writer` to encode.

The family (:class:`~.gguf_arch.Family`) decides the rest: its tensor name map (gguf's, for its architecture),
its one-to-many tensors (a :class:`~.gguf_arch.View` of a checkpoint tensor), whether q/k rows are permuted to
llama.cpp's interleaved rotary, and what is added to its norms. An MoE layer's experts are stacked as llama.cpp
stacks them, one tensor per projection.

Streaming (:func:`tensor_rows`; its memory: docs/formats.md): one checkpoint tensor, or one expert, at a time.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError
from .checkpoint import open_checkpoint
from .gguf_arch import Family, View, expert_count, rope_scalings_note
from .gguf_keys import gguf_package, head_dim, llama3_freqs, longrope_factors, read_config, rope_settings

__all__ = ["GGUF_TYPES", "Source", "PlanRow", "check_type", "check_config_agrees", "gguf_plan", "tensor_rows"]

log = logging.getLogger(__name__)

GGUF_TYPES = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1")  # what gguf.quants can write
_LOW_BIT = {"Q4_0", "Q4_1", "Q5_0", "Q5_1"}
_CHUNK = 16 << 20  # bytes of float32 converted at a time: bounds peak memory, any size is byte-identical

# one routed expert's projection in a checkpoint: ``<stem>.experts.<index>.<projection>.weight`` (the per-expert
# layout of Mixtral, the Qwen MoEs and OLMoE on the Hub, and what transformers' save_pretrained writes for them)
_EXPERT = re.compile(r"^(?P<stem>.+\.experts)\.(?P<index>\d+)\.(?P<proj>[A-Za-z0-9_]+)\.weight$")

# a plan row's checkpoint tensor(s): one, the experts stacked, a View of one (Family.tensor_views: split fused
# experts, DeepSeek's kv_b per head), or None (computed: Llama 3's rope_freqs, Phi-3's longrope factors)
Source = str | tuple[str, ...] | View | None
PlanRow = tuple[str, Source, tuple[int, ...], str]  # (gguf name, checkpoint tensor(s), HF shape, GGML type)

# tensors llama.cpp's converter always keeps in F32 whatever the file type: the MoE routers (small, and their
# softmax picks the experts: a rounding could route a token elsewhere); and every 1-D tensor and every bias
# (its converter quantizes only names ending in .weight: gpt-oss's 2-D expert biases stay F32)
_ALWAYS_F32 = ("ffn_gate_inp", "ffn_gate_inp_shexp", "position_embd")  # GPT-2's learned positions too


def check_type(qtype: str) -> str:
    """``qtype`` when it is one of :data:`GGUF_TYPES`, else an InputError."""
    if qtype not in GGUF_TYPES:
        raise InputError(f"outputs.gguf: {qtype!r} is not a type gguf can write; use one of {', '.join(GGUF_TYPES)}")
    return qtype


def _stacked_experts(tensors: Mapping[str, Any], n_experts: int) -> dict[str, tuple[str, tuple[str, ...], tuple]]:
    """Group per-expert tensors as llama.cpp stacks them: ``{first member: (stacked HF name, members by expert
    index, stacked shape)}``; the stacked name (``<stem>.experts.<projection>.weight``) is the one gguf's name map knows.
    A layer whose experts are not exactly 0..n-1 of one shape is refused.
    """
    groups: dict[tuple[str, str], dict[int, str]] = {}
    for hf in tensors:
        if (m := _EXPERT.match(hf)) is not None:
            groups.setdefault((m["stem"], m["proj"]), {})[int(m["index"])] = hf
    out = {}
    order = {name: i for i, name in enumerate(tensors)}  # the checkpoint's file order
    for (stem, proj), members in groups.items():
        if sorted(members) != list(range(n_experts)):
            raise InputError(
                f"outputs.gguf: {stem}.*.{proj} has experts {sorted(members)[:8]} but config.json "
                f"says {n_experts} (0..{n_experts - 1}); the checkpoint is not a whole MoE model"
            )
        names = tuple(members[i] for i in range(n_experts))
        shapes = {tuple(tensors[n].shape) for n in names}
        if len(shapes) != 1:
            raise InputError(
                f"outputs.gguf: the experts of {stem}.*.{proj} differ in shape ({sorted(shapes)}); "
                "llama.cpp stacks them into one tensor"
            )
        first = min(names, key=order.__getitem__)  # the stacked tensor takes its first member's place
        out[first] = (f"{stem}.{proj}.weight", names, (n_experts, *shapes.pop()))
    return out


def gguf_plan(folder: str | Path, qtype: str) -> list[PlanRow]:
    """What :func:`~.gguf_writer.write_gguf` writes: ``(gguf name, checkpoint tensor(s), HF shape, GGML type)`` in
    file order (the checkpoint's, shard by shard and by offset: deterministic for a given checkpoint); the
    checkpoint tensor(s) are a :data:`Source` (an MoE layer's experts stacked expert-major: HF shape ``(experts,
    rows, cols)``; a :class:`~.gguf_arch.View`'s HF shape is the view's). Refused: an unsupported model type or
    rope scaling, or a checkpoint tensor with no GGUF name.
    """
    gguf, folder, qtype = gguf_package(), Path(folder), check_type(qtype)
    cfg, family = read_config(folder)
    arch = getattr(gguf.MODEL_ARCH, family.arch)
    names = gguf.get_tensor_name_map(arch, int(cfg["num_hidden_layers"]))
    tied = bool(cfg.get("tie_word_embeddings", False))
    rows: list[PlanRow] = []
    scaling = rope_settings(cfg)[1]
    kind = scaling.get("rope_type")
    if scaling and kind not in family.rope_scalings:
        raise InputError(
            f"outputs.gguf: rope scaling {kind!r} is not supported for {family.model_type} "
            f"({rope_scalings_note()}); set outputs.gguf: null"
        )
    if kind == "llama3":
        rows.append((gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.ROPE_FREQS] + ".weight", None, (head_dim(cfg) // 2,), "F32"))
    if kind == "longrope":  # llama.cpp's Phi-3 converter: the per-frequency factors as two F32 tensors
        n = len(longrope_factors(cfg, family)[0])
        rows += [
            (gguf.TENSOR_NAMES[t] + ".weight", None, (n,), "F32")
            for t in (gguf.MODEL_TENSOR.ROPE_FACTORS_LONG, gguf.MODEL_TENSOR.ROPE_FACTORS_SHORT)
        ]
    tensors = open_checkpoint(folder).tensors
    stacked = _stacked_experts(tensors, expert_count(cfg)) if expert_count(cfg) else {}
    for hf, e in tensors.items():
        if hf.endswith("rotary_emb.inv_freq") or (tied and hf == "lm_head.weight"):
            continue  # recomputed by the readers / the tied embedding
        source: Source = hf
        shape = tuple(e.shape)
        if _EXPERT.match(hf) and stacked:
            if hf not in stacked:
                continue  # written with the stack its layer's first expert opened
            hf, source, shape = stacked[hf]
        views = family.tensor_views(cfg, hf)  # a family's one-to-many or renamed tensors (gpt-oss)
        for mapped, src in views or [(hf, source)]:
            out_shape = src.shape(shape) if isinstance(src, View) else shape
            name = names.get_name(mapped, try_suffixes=(".weight", ".bias"))
            if name is None:
                raise InputError(f"outputs.gguf: {hf} has no GGUF name for {family.model_type}; set outputs.gguf: null")
            rows.append((name, src, out_shape, _tensor_type(gguf, name, out_shape, qtype)))
    check_config_agrees(cfg, family, rows)
    return rows  # llama.cpp's order: extra tensors (rope_freqs) first, then the checkpoint's file order


_BLOCK = re.compile(r"^blk\.(\d+)\.")
_FIX = "config.json and the weights disagree (an edited or mismatched config.json): use the model's own"


def _heads_agree(cfg: dict[str, Any], family: Family, shapes: Mapping[str, tuple[int, ...]]) -> str | None:
    """Why config.json's attention heads cannot be the weights' (``None`` when they agree): llama.cpp builds
    ``attn_q`` as heads x head_dim rows and ``attn_k`` / ``attn_v`` as KV heads x head_dim, and refuses a file
    whose tensors differ; the rotary permutation needs an even head_dim."""
    n_head, hidden = int(cfg["num_attention_heads"]), int(cfg["hidden_size"])
    n_kv = int(cfg.get("num_key_value_heads") or n_head)
    if not cfg.get("head_dim") and hidden % n_head:
        return f"num_attention_heads {n_head} does not divide hidden_size {hidden} and there is no head_dim"
    if n_head % n_kv:
        return f"num_key_value_heads {n_kv} does not divide num_attention_heads {n_head}"
    head = head_dim(cfg)
    if family.permute_qk and head % 2:
        return f"head_dim {head} is odd; rotary pairs need an even head_dim"
    for kind, heads in (("attn_q", n_head), ("attn_k", n_kv), ("attn_v", n_kv)):
        rows = shapes.get(f"blk.0.{kind}.weight", (heads * head,))[0]
        if rows != heads * head:
            return (
                f"blk.0.{kind} has {rows} rows but {heads} heads x head_dim {head} = {heads * head} (head_dim: "
                f"{'head_dim' if cfg.get('head_dim') else 'hidden_size / num_attention_heads'})"
            )
    return None


def check_config_agrees(cfg: dict[str, Any], family: Family, plan: list[PlanRow]) -> None:
    """Refuse, before anything is written, a ``config.json`` that disagrees with the weights in a way llama.cpp
    refuses when it loads the file: the layers it declares and those present, the attention heads
    (:func:`_heads_agree`), the experts a token uses and those there are, the vocabulary and the embedding.

    Why here: the GGUF's keys are written from config.json and its tensors from the shards, so an edited config
    gave a file of exit 0 that llama.cpp then refused ("wrong shape", "missing tensor blk.2..."). The refusal names
    the key, its value and what the weights hold.
    """
    shapes = {name: shape for name, _, shape, _ in plan}
    n_layers = int(cfg["num_hidden_layers"])
    present = sorted({int(m[1]) for name in shapes if (m := _BLOCK.match(name))})
    why = None
    if present != list(range(n_layers)):
        held = f"{len(present)} (blk.{present[0]}..{present[-1]})" if present else "none"
        why = f"num_hidden_layers is {n_layers} but the weights hold the layers {held}"
    elif not family.mla:
        why = _heads_agree(cfg, family, shapes)
    n_experts, used = expert_count(cfg), cfg.get("num_experts_per_tok")
    if why is None and n_experts and not (isinstance(used, int) and 1 <= used <= n_experts):
        why = f"num_experts_per_tok is {used!r} but a token uses 1 to num_experts {n_experts} experts"
    embedding = shapes.get("token_embd.weight")
    vocab, hidden = int(cfg["vocab_size"]), int(cfg["hidden_size"])
    if why is None and embedding is not None and tuple(embedding) != (vocab, hidden):
        why = f"vocab_size x hidden_size is {vocab} x {hidden} but the embedding is {' x '.join(map(str, embedding))}"
    output = shapes.get("output.weight")
    if why is None and output is not None and output[0] != vocab:
        why = f"vocab_size is {vocab} but the output layer has {output[0]} rows"
    if why is not None:
        raise InputError(f"outputs.gguf: config.json: {why}; {_FIX}")


def _tensor_type(gguf: Any, name: str, shape: tuple[int, ...], qtype: str) -> str:
    if (
        len(shape) < 2
        or not name.endswith(".weight")
        or name.split(".")[2 if name.startswith("blk.") else 0] in _ALWAYS_F32
    ):
        return "F32"
    want = "Q8_0" if qtype in _LOW_BIT and name.split(".")[0] in ("token_embd", "output") else qtype
    block = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[want]][0]
    if shape[-1] % block:
        log.info("gguf: %s rows of %d are not a multiple of %s's block %d: F16", name, shape[-1], want, block)
        return "F16"
    return want


def _computed(cfg: dict[str, Any], family: Family, name: str) -> np.ndarray:
    """The tensors llama.cpp wants that the checkpoint does not hold: rope factors, from config.json."""
    if name.startswith("rope_freqs"):
        return llama3_freqs(cfg)
    long, short, _ = longrope_factors(cfg, family)
    return long if name.startswith("rope_factors_long") else short


def _row_perm(rows: int, n_head: int) -> np.ndarray:
    """Row order of llama.cpp's rotary layout: output row r is HF row perm[r] (per head: 0, d/2, 1, d/2+1, ...)."""
    d = rows // n_head
    return np.arange(rows).reshape(n_head, 2, d // 2).transpose(0, 2, 1).reshape(-1)


def _rows_of(w: np.ndarray) -> Iterator[np.ndarray]:
    """A tensor as float32 row blocks of about :data:`_CHUNK` bytes (a 1-D tensor: one block)."""
    if w.ndim == 1:
        yield w
        return
    w = w.reshape(-1, w.shape[-1])
    step = max(1, _CHUNK // max(4 * w.shape[-1], 1))
    for i in range(0, len(w), step):
        yield w[i : i + step]


def tensor_rows(
    folder: Path, cfg: dict[str, Any], family: Family, plan: list[PlanRow]
) -> Iterator[tuple[PlanRow, Iterator[np.ndarray]]]:
    """Yield ``(row, float32 rows iterator)`` per planned tensor, one checkpoint tensor in memory at a time (an
    expert stack: one expert at a time, expert-major as llama.cpp stores it)."""
    ckpt = open_checkpoint(folder)
    heads = {
        "attn_q": int(cfg["num_attention_heads"]),
        "attn_k": int(cfg.get("num_key_value_heads") or cfg["num_attention_heads"]),
    }

    def read(hf: str, name: str, shape: tuple[int, ...]) -> np.ndarray:
        w = ckpt.read(hf).float().numpy()
        kind = name.split(".")[2] if name.startswith("blk.") else ""
        if family.permute_qk and kind in heads:
            w = w[_row_perm(shape[0], heads[kind])]
        return w + np.float32(shift) if (shift := family.tensor_shift(hf)) else w  # Gemma's norms: stored 1 + w

    def viewed(v: View, name: str, shape: tuple[int, ...]) -> Iterator[np.ndarray]:
        """A View's float32 rows; a 3-D (expert) tensor one expert at a time, expert-major."""
        if len(shape) < 3 or v.heads:  # heads: a 2-D tensor viewed per head (DeepSeek's kv_b), read whole
            yield from _rows_of(np.ascontiguousarray(v.apply(read(v.tensor, name, shape))))
            return
        for e in range(shape[0]):
            w = ckpt.read(v.tensor, rows=slice(e, e + 1)).float().numpy()[0]
            yield from _rows_of(np.ascontiguousarray(v.apply(w)))

    for row in plan:
        name, hf, shape, _ = row
        if hf is None:
            yield row, iter([_computed(cfg, family, name)])
        elif isinstance(hf, View):
            yield row, viewed(hf, name, shape)
        elif isinstance(hf, tuple):
            yield row, (block for member in hf for block in _rows_of(read(member, name, shape[1:])))
        else:
            yield row, _rows_of(read(hf, name, shape))
