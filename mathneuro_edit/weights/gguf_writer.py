"""GGUF export: write a baked checkpoint as one GGUF file for llama.cpp, Ollama and LM Studio (``outputs.gguf``).

The file follows llama.cpp's converter (``convert_hf_to_gguf.py``), written with the ``gguf`` package (extra
``gguf``): Llama/Mistral/SmolLM2 (arch ``llama``, q/k rows permuted to llama.cpp's interleaved rotary), Qwen2 and
Qwen3 (NeoX rotary: HF's order), Granite (llama + its multipliers), SmolLM3, GPT-2, OLMo 2, Phi-3, Gemma 2/3, the MoEs Mixtral,
Qwen2-MoE, Qwen3-MoE and OLMoE (each layer's experts stacked into one tensor per projection), gpt-oss and Llama 4
(text) (their fused experts split into gate and up and transposed: a plan row's source may be a
:class:`~.gguf_arch.View` of a checkpoint tensor), DeepSeek-V3 (llama.cpp's deepseek2: MLA's ``kv_b_proj``
split per head into ``attn_k_b``, transposed, and ``attn_v_b``, a View with ``heads``; one KV head and MLA's
lengths instead of the writer's ``head_count_kv`` / key and value lengths, :data:`~.gguf_arch.MLA`; the
per-family conventions and refusals: :mod:`.gguf_arch`); gguf's tensor name map; no
``output.weight`` when embeddings are tied; the hyperparameters, Llama-3 ``rope_freqs``, Phi-3's longrope factors,
linear/YaRN scaling keys; the tokenizer (``tokenizer.ggml.*``, :mod:`.gguf_vocab`: byte-level BPE or
SentencePiece-style) and the chat template. docs/formats.md
lists every key and the type of every tensor (1-D: F32; 4/5-bit types keep the embedding/output at Q8_0).

Streaming: the tensor infos come from the shapes; then each tensor is read, converted and written by blocks of
rows (peak memory: about one checkpoint tensor plus ~16 MiB; an expert stack, and a View of a 3-D expert tensor,
is read one expert at a time; a per-head View of a 2-D tensor, DeepSeek's kv_b, whole).
Deterministic: same checkpoint and type -> byte-identical file (fixed key and tensor order, no time stamps, no paths). Atomic: temp file + rename.

Example:
    >>> write_gguf("out/run/checkpoint", "out/run/checkpoint/model-Q8_0.gguf", "Q8_0")  # doctest: +SKIP
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError
from ..util.config_sizes import check_config_file_sizes
from ..util.outdir import as_space_error
from ..util.paths import is_local_path
from .checkpoint import open_checkpoint
from .gguf_arch import (
    GGUF_WRITTEN,
    MLA,
    View,
    add_family_keys,
    expert_count,
    feed_forward_length,
    gguf_refusal,
    has_rotary,
    llama_names,
    rope_dims,
    tensor_shift,
    tensor_views,
    yarn_ramp_bounds,
)
from .gguf_vocab import add_vocab, check_vocab

__all__ = [
    "gguf_public_name",
    "GGUF_TYPES",
    "gguf_filename",
    "check_gguf",
    "write_gguf",
    "gguf_file_type",
    "audit_gguf",
    "gguf_plan",
]

log = logging.getLogger(__name__)

GGUF_TYPES = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1")  # what gguf.quants can write
_LOW_BIT = {"Q4_0", "Q4_1", "Q5_0", "Q5_1"}
_ARCHS = GGUF_WRITTEN  # model_type -> (gguf arch, q/k permuted); the refusals of the others: weights/gguf_arch/
_CHUNK = 16 << 20  # bytes of float32 converted at a time: bounds peak memory, any size is byte-identical


def _gguf():
    try:
        import gguf
    except ImportError:
        raise InputError("outputs.gguf needs the gguf package: pip install 'gguf>=0.17' (the gguf extra)") from None
    return gguf


def gguf_filename(qtype: str) -> str:
    """The GGUF's name in an output folder: ``model-<TYPE>.gguf``.

    Example:
        >>> gguf_filename("Q8_0")
        'model-Q8_0.gguf'
    """
    return f"model-{qtype}.gguf"


def _check_type(qtype: str) -> str:
    if qtype not in GGUF_TYPES:
        raise InputError(f"outputs.gguf: {qtype!r} is not a type gguf can write; use one of {', '.join(GGUF_TYPES)}")
    return qtype


def _config(folder: Path) -> dict[str, Any]:
    check_config_file_sizes(folder)  # a layer count of 10**9 would loop here: sizes a model has, first
    cfg = llama_names(json.loads((folder / "config.json").read_text(encoding="utf-8")))
    refusal = gguf_refusal(cfg)
    if refusal is not None:
        raise InputError(refusal)
    return cfg


def _head_dim(cfg: dict[str, Any]) -> int:
    return int(cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"])


def _rope(cfg: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    """(rope theta, scaling dict or {}) of a transformers 4 (rope_theta, rope_scaling) or 5 (rope_parameters) config."""
    params = dict(cfg.get("rope_parameters") or {})
    params = dict(params.get("full_attention", params))  # Gemma 3: the global layers' (the local: gguf_arch.gemma)
    scaling = dict(cfg.get("rope_scaling") or params)
    theta = float(cfg.get("rope_theta") or params.get("rope_theta") or 10000.0)
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    return theta, ({} if kind == "default" else {**scaling, "rope_type": kind})


def _llama3_freqs(cfg: dict[str, Any], s: dict[str, Any]) -> np.ndarray:
    """Llama 3's per-frequency rope factors (llama.cpp's ``rope_freqs``: it divides each frequency by its factor)."""
    theta, dim = _rope(cfg)[0], _head_dim(cfg)
    freqs = 1.0 / theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    factor, low, high = float(s["factor"]), float(s.get("low_freq_factor", 1.0)), float(s.get("high_freq_factor", 4.0))
    ctx = float(s["original_max_position_embeddings"])
    wavelen = 2 * math.pi / freqs
    with np.errstate(divide="ignore", invalid="ignore"):  # low == high (Llama 4 Scout): no band between, unused
        smooth = np.clip((ctx / wavelen - low) / (high - low), 0.0, 1.0)
    mid = 1.0 / ((1 - smooth) / factor + smooth)  # between the two wavelengths: interpolated
    out = np.where(wavelen < ctx / high, 1.0, np.where(wavelen > ctx / low, factor, mid))
    return out.astype(np.float32)


def _longrope_factors(cfg: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, float]:
    """Phi-3's longrope: (long factors, short factors, attention factor), as transformers computes them.

    transformers multiplies each rotary frequency's wavelength by the short factors up to
    ``original_max_position_embeddings`` tokens and by the long ones beyond, and cos/sin by the attention factor
    (given, or ``sqrt(1 + ln(max / original) / ln(original))``). llama.cpp reads both tensors and picks one set
    for the whole context when it is created (long when ``n_ctx`` exceeds the original context).

    Raises:
        InputError: factors missing, or not one per rotary frequency.
    """
    s = _rope(cfg)[1]
    original = int(s.get("original_max_position_embeddings") or cfg.get("original_max_position_embeddings") or 0)
    half = rope_dims(cfg, _head_dim(cfg)) // 2
    long, short = s.get("long_factor"), s.get("short_factor")
    if not original or not isinstance(long, list) or not isinstance(short, list) or not len(long) == len(short) == half:
        raise InputError(
            f"outputs.gguf: longrope needs original_max_position_embeddings and {half} long_factor and "
            "short_factor values (one per rotary frequency) in config.json; set outputs.gguf: null"
        )
    factor = float(s.get("factor") or int(cfg["max_position_embeddings"]) / original)
    attn = s.get("attention_factor")
    attn = (
        float(attn)
        if attn is not None
        else (math.sqrt(1 + math.log(factor) / math.log(original)) if factor > 1.0 else 1.0)
    )
    return np.asarray(long, dtype=np.float32), np.asarray(short, dtype=np.float32), attn


def _computed(cfg: dict[str, Any], name: str) -> np.ndarray:
    """The tensors llama.cpp wants that the checkpoint does not hold: rope factors, from config.json."""
    if name.startswith("rope_freqs"):
        return _llama3_freqs(cfg, _rope(cfg)[1])
    long, short, _ = _longrope_factors(cfg)
    return long if name.startswith("rope_factors_long") else short


def _row_perm(rows: int, n_head: int) -> np.ndarray:
    """Row order of llama.cpp's rotary layout: output row r is HF row perm[r] (per head: 0, d/2, 1, d/2+1, ...)."""
    d = rows // n_head
    return np.arange(rows).reshape(n_head, 2, d // 2).transpose(0, 2, 1).reshape(-1)


# one routed expert's projection in a checkpoint: ``<stem>.experts.<index>.<projection>.weight`` (the per-expert
# layout of Mixtral, the Qwen MoEs and OLMoE on the Hub, and what transformers' save_pretrained writes for them)
_EXPERT = re.compile(r"^(?P<stem>.+\.experts)\.(?P<index>\d+)\.(?P<proj>[A-Za-z0-9_]+)\.weight$")

# a plan row's checkpoint tensor(s): one, the experts stacked, a View of one (gpt-oss's split fused experts), or
# None (computed)
Source = str | tuple[str, ...] | View | None


def _stacked_experts(tensors: Mapping[str, Any], n_experts: int) -> dict[str, tuple[str, tuple[str, ...], tuple]]:
    """Group per-expert tensors as llama.cpp stacks them: ``{first member: (stacked HF name, members by expert
    index, stacked shape)}``; the stacked name (``<stem>.experts.<projection>.weight``) is the one gguf's name map knows.

    Raises:
        InputError: a layer whose experts are not exactly 0..n-1 of one shape.
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


def gguf_plan(folder: str | Path, qtype: str) -> list[tuple[str, Source, tuple[int, ...], str]]:
    """What :func:`write_gguf` writes: ``(gguf name, checkpoint tensor(s), HF shape, GGML type)`` in file order
    (the checkpoint's, shard by shard and by offset: deterministic for a given checkpoint). The checkpoint tensor
    is a name, a tuple of names (an MoE layer's experts, stacked expert-major: HF shape ``(experts, rows,
    cols)``), a :class:`~.gguf_arch.View` of one (a slice and/or transposition: gpt-oss's and Llama 4's
    fused experts split into gate and up, DeepSeek's kv_b into k_b and v_b per head,
    :func:`~.gguf_arch.tensor_views`; HF shape: the view's), or None (computed: Llama 3's ``rope_freqs``).

    Raises:
        InputError: unsupported model type or rope scaling, or a checkpoint tensor with no GGUF name.
    """
    gguf, folder, qtype = _gguf(), Path(folder), _check_type(qtype)
    cfg = _config(folder)
    arch = getattr(gguf.MODEL_ARCH, _ARCHS[cfg["model_type"]][0])
    names = gguf.get_tensor_name_map(arch, int(cfg["num_hidden_layers"]))
    tied = bool(cfg.get("tie_word_embeddings", False))
    rows: list[tuple[str, Source, tuple[int, ...], str]] = []
    scaling = _rope(cfg)[1]
    kind = scaling.get("rope_type")
    if (
        scaling
        and kind not in ("linear", "yarn", "llama3")
        and not (kind == "longrope" and cfg["model_type"] == "phi3")
    ):
        raise InputError(
            f"outputs.gguf: rope scaling {kind!r} is not supported for {cfg['model_type']} (linear, "
            "yarn, llama3; longrope for phi3); set outputs.gguf: null"
        )
    if kind == "llama3":
        rows.append((gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.ROPE_FREQS] + ".weight", None, (_head_dim(cfg) // 2,), "F32"))
    if kind == "longrope":  # llama.cpp's Phi-3 converter: the per-frequency factors as two F32 tensors
        n = len(_longrope_factors(cfg)[0])
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
        views = tensor_views(cfg, hf)  # a family's one-to-many or renamed tensors (gpt-oss)
        for mapped, src in views or [(hf, source)]:
            out_shape = src.shape(shape) if isinstance(src, View) else shape
            name = names.get_name(mapped, try_suffixes=(".weight", ".bias"))
            if name is None:
                raise InputError(f"outputs.gguf: {hf} has no GGUF name for {cfg['model_type']}; set outputs.gguf: null")
            rows.append((name, src, out_shape, _tensor_type(gguf, name, out_shape, qtype)))

    return rows  # llama.cpp's order: extra tensors (rope_freqs) first, then the checkpoint's file order


# tensors llama.cpp's converter always keeps in F32 whatever the file type: the MoE routers (small, and their
# softmax picks the experts: a rounding could route a token elsewhere); and every 1-D tensor and every bias
# (its converter quantizes only names ending in .weight: gpt-oss's 2-D expert biases stay F32)
_ALWAYS_F32 = ("ffn_gate_inp", "ffn_gate_inp_shexp", "position_embd")  # GPT-2's learned positions too


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


def _encode(gguf: Any, x: np.ndarray, ggml_type: str) -> np.ndarray:
    """float32 rows -> the type's bytes (F16: IEEE round to nearest even; BF16 and Q*: gguf.quants)."""
    if ggml_type == "F32":
        return x
    if ggml_type == "F16":
        return x.astype(np.float16)
    return gguf.quants.quantize(x, gguf.GGMLQuantizationType[ggml_type])


def _rows_of(w: np.ndarray):
    """A tensor as float32 row blocks of about :data:`_CHUNK` bytes (a 1-D tensor: one block)."""
    if w.ndim == 1:
        yield w
        return
    w = w.reshape(-1, w.shape[-1])
    step = max(1, _CHUNK // max(4 * w.shape[-1], 1))
    for i in range(0, len(w), step):
        yield w[i : i + step]


def _tensors(folder: Path, cfg: dict[str, Any], plan: list, perm: bool):
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
        if perm and kind in heads:
            w = w[_row_perm(shape[0], heads[kind])]
        return w + np.float32(shift) if (shift := tensor_shift(cfg, hf)) else w  # Gemma's norms: stored 1 + w

    def viewed(v: View, name: str, shape: tuple[int, ...]):
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
            yield row, iter([_computed(cfg, name)])
        elif isinstance(hf, View):
            yield row, viewed(hf, name, shape)
        elif isinstance(hf, tuple):
            yield row, (block for member in hf for block in _rows_of(read(member, name, shape[1:])))
        else:
            yield row, _rows_of(read(hf, name, shape))


def check_gguf(folder: str | Path, qtype: str, name: str | None = None) -> None:
    """Raise :class:`InputError` now if :func:`write_gguf` would refuse this model folder (type, package,
    architecture, rope scaling, tensor names, tokenizer, and ``name`` as ``general.name``); reads config and
    headers only."""
    gguf_plan(folder, qtype)
    check_vocab(folder, name or "local model")  # the tokenizer side, and the name with it: weights/gguf_vocab.py


def _add_general(w: Any, meta: Mapping[str, Any]) -> None:
    """The ``general.*`` keys llama.cpp's converter (convert_hf_to_gguf.py) writes, from ``meta``: ``basename``,
    ``size_label``, ``finetune``, ``organization``, ``license``, ``license_name``, ``license_link``, ``tags``, ``languages`` and
    ``base_models`` (``[{"name", "organization", "repo_url"}]``); absent keys are not written."""
    for key, add in (
        ("basename", w.add_basename),
        ("size_label", w.add_size_label),
        ("finetune", w.add_finetune),
        ("organization", w.add_organization),
        ("license", w.add_license),
        ("license_name", w.add_license_name),
        ("license_link", w.add_license_link),
    ):
        if meta.get(key):
            add(str(meta[key]))
    bases = list(meta.get("base_models") or [])
    if bases:
        w.add_base_model_count(len(bases))
        for i, b in enumerate(bases):
            for key, add in (
                ("name", w.add_base_model_name),
                ("organization", w.add_base_model_organization),
                ("repo_url", w.add_base_model_repo_url),
            ):
                if b.get(key):
                    add(i, str(b[key]))
    if meta.get("tags"):
        w.add_tags([str(t) for t in meta["tags"]])
    if meta.get("languages"):
        w.add_languages([str(t) for t in meta["languages"]])


def write_gguf(
    checkpoint: str | Path,
    out_path: str | Path,
    qtype: str,
    *,
    name: str | None = None,
    pre: str | None = None,
    meta: Mapping[str, Any] | None = None,
) -> Path:
    """Write a baked checkpoint folder as one GGUF file of type ``qtype`` (streaming, atomic, deterministic).

    Args:
        checkpoint: a Hugging Face folder with safetensors weights, config.json and tokenizer.json.
        out_path: the ``.gguf`` file to create (replaced when it exists).
        qtype: one of :data:`GGUF_TYPES`.
        name: ``general.name`` (default: ``"local model"``, as a run names a local base); never a local path. A
            name holding ``phi3`` / ``phi-3`` makes llama.cpp look up Phi-3's special tokens
            (:func:`~.gguf_vocab.name_refusal`).
        pre: ``tokenizer.ggml.pre`` to write instead of the one read from tokenizer.json (e.g. a GGUF base's own:
            transformers' GGUF tokenizer conversion turns SmolLM2's ``smollm`` into a plain ByteLevel ``gpt-2``).
        meta: the ``general.*`` metadata llama.cpp's converter writes (see :func:`_add_general`): base name, size
            label, fine-tune, license fields, base model, tags, languages. Never a local path.

    Returns:
        The written path.

    Raises:
        InputError: missing gguf package, unsupported architecture, rope scaling, tokenizer or type.

    Example:
        >>> write_gguf("out/checkpoint", "out/checkpoint/model-F16.gguf", "F16")  # doctest: +SKIP
    """
    gguf, folder, out = _gguf(), Path(checkpoint), Path(out_path)
    plan = gguf_plan(folder, qtype)
    cfg = _config(folder)
    arch_name, perm = _ARCHS[cfg["model_type"]]
    arch = gguf.MODEL_ARCH_NAMES[getattr(gguf.MODEL_ARCH, arch_name)]
    w = gguf.GGUFWriter(None, arch)
    w.add_type("model")
    general_name = name or "local model"  # not the model type: "phi3" would trip llama.cpp's Phi-3 name check
    w.add_name(general_name)
    _add_general(w, meta or {})
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    ftype = "ALL_F32" if qtype == "F32" else f"MOSTLY_{qtype}"
    w.add_file_type(int(gguf.LlamaFileType[ftype]))
    n_head, head_dim = int(cfg["num_attention_heads"]), _head_dim(cfg)
    mla = cfg["model_type"] in MLA  # DeepSeek: one KV head (MQA) and MLA's lengths, from add_family_keys
    theta, scaling = _rope(cfg)
    keys = [
        (w.add_context_length, int(cfg["max_position_embeddings"])),
        (w.add_embedding_length, int(cfg["hidden_size"])),
        (w.add_block_count, int(cfg["num_hidden_layers"])),
        (w.add_feed_forward_length, feed_forward_length(cfg)),
        (w.add_head_count, n_head),
        (w.add_head_count_kv, 1 if mla else int(cfg.get("num_key_value_heads") or n_head)),
        (w.add_vocab_size, int(cfg["vocab_size"])),
    ]
    if has_rotary(cfg):  # GPT-2 has learned positions (position_embd) and LayerNorm
        keys += [
            (w.add_rope_freq_base, theta),
            (w.add_layer_norm_rms_eps, float(cfg["rms_norm_eps"])),
            (w.add_rope_dimension_count, rope_dims(cfg, head_dim)),
        ]
    else:
        keys.append((w.add_layer_norm_eps, float(cfg["layer_norm_epsilon"])))
    for add, value in keys:
        add(value)
    if head_dim != int(cfg["hidden_size"]) // n_head and not mla:  # Qwen3: head_dim is not hidden/heads
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    if scaling.get("rope_type") in ("linear", "yarn"):
        w.add_rope_scaling_type(gguf.RopeScalingType[scaling["rope_type"].upper()])
        w.add_rope_scaling_factor(float(scaling["factor"]))
        if "original_max_position_embeddings" in scaling:
            w.add_rope_scaling_orig_ctx_len(int(scaling["original_max_position_embeddings"]))
        if scaling["rope_type"] == "yarn":  # the ramp's bounds, when given (llama.cpp's defaults: 32 and 1)
            for key, add in (
                ("beta_fast", w.add_rope_scaling_yarn_beta_fast),
                ("beta_slow", w.add_rope_scaling_yarn_beta_slow),
            ):
                if scaling.get(key) is not None:
                    add(float(scaling[key]))
            exact, rounded = yarn_ramp_bounds(cfg) or ((0.0, 0.0), (0.0, 0.0))
            if exact != rounded:  # gpt-oss's truncate: false; no GGUF key can say it (gguf_arch.yarn_ramp_bounds)
                log.warning(
                    "gguf: llama.cpp rounds YaRN's correction range to [%g, %g] where transformers uses "
                    "[%.4g, %.4g] (rope truncate: false): llama.cpp's rotary frequencies differ in those "
                    "dimensions, as in llama.cpp's own conversion",
                    *rounded,
                    *exact,
                )
    if scaling.get("rope_type") == "longrope":  # the factors themselves are tensors (gguf_plan)
        w.add_rope_scaling_attn_factors(_longrope_factors(cfg)[2])
        w.add_rope_scaling_orig_ctx_len(
            int(scaling.get("original_max_position_embeddings") or cfg["original_max_position_embeddings"])
        )
    add_family_keys(w, cfg)  # a family's own keys (Granite's multipliers): weights/gguf_arch/
    add_vocab(gguf, w, folder, int(cfg["vocab_size"]), pre, general_name)  # tokenizer.ggml.*: weights/gguf_vocab.py
    for gname, _, shape, t in plan:
        block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[t]]
        n_bytes = math.prod(shape[:-1]) * (shape[-1] // block) * size
        w.add_tensor_info(gname, shape, np.dtype(np.float32), n_bytes, raw_dtype=gguf.GGMLQuantizationType[t])
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.tmp-", dir=out.parent)
    os.close(fd)
    size: int | None = None  # the whole file's bytes, once its metadata is written (a full disk's message needs it)
    try:
        w.write_header_to_file(path=Path(tmp))
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        f = w.fout[0]
        size = _file_size(f.tell(), [n for n, _, _, _ in plan], w, gguf)
        for (_gname, _, _, t), chunks in _tensors(folder, cfg, plan, perm):
            w.write_padding(f, f.tell())  # each tensor starts aligned (GGUF's data alignment, 32 bytes)
            start = f.tell()
            for x in chunks:
                _encode(gguf, np.ascontiguousarray(x, dtype=np.float32), t).tofile(f)
            w.write_padding(f, f.tell() - start)
        w.close()
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    except BaseException as e:
        try:
            w.close()  # on a full disk its flush fails too: the partial file goes all the same
        except OSError:
            pass
        finally:
            Path(tmp).unlink(missing_ok=True)
        space = as_space_error(e, out, size) if isinstance(e, OSError) else None
        if space is not None:  # one line naming the file and what it lacks (free measured without the partial)
            raise space from None
        raise
    return out


def _file_size(metadata_end: int, names: list[str], w: Any, gguf: Any) -> int:
    """The GGUF file's size: its metadata, then each tensor's bytes padded to the data alignment."""
    align = int(getattr(w, "data_alignment", None) or gguf.GGUF_DEFAULT_ALIGNMENT)
    pad = lambda n: -(-n // align) * align  # noqa: E731
    infos = w.tensors[0] if getattr(w, "tensors", None) else {}
    return pad(metadata_end) + sum(pad(int(infos[n].nbytes)) for n in names if n in infos)


def export_gguf(
    checkpoint: str | Path,
    qtype: str = "Q8_0",
    out_path: str | Path | None = None,
    *,
    name: str | None = None,
    pre: str | None = None,
    meta: Mapping[str, Any] | None = None,
) -> Path:
    """Write a checkpoint folder (an edited one: :func:`~mathneuro_edit.weights.checkpoint_writer.export_checkpoint`'s
    output) as a GGUF file for llama.cpp, Ollama and LM Studio: the sibling of ``export_checkpoint`` and
    ``export_adapter`` (``run`` with ``outputs.gguf`` and ``export --gguf TYPE`` call the same writer).

    Args:
        checkpoint: a Hugging Face folder with safetensors weights, config.json and tokenizer.json.
        qtype: one of :data:`GGUF_TYPES` (``F32``, ``F16``, ``BF16``, ``Q8_0``, ``Q4_0``, ...).
        out_path: the ``.gguf`` file to create (default: ``<checkpoint>/model-<TYPE>.gguf``, the name a run
            writes, :func:`gguf_filename`).
        name, pre, meta: ``general.name``, ``tokenizer.ggml.pre`` and ``general.*`` metadata (see
            :func:`write_gguf`).

    Returns:
        The written path.

    Raises:
        InputError: an unknown type, a missing gguf package, or an architecture, rope scaling or tokenizer the
            writer does not support (checked before any tensor is written).

    Example:
        >>> from mathneuro_edit import export_gguf
        >>> export_gguf("out/quickstart/checkpoint", "Q8_0")  # doctest: +SKIP
        PosixPath('out/quickstart/checkpoint/model-Q8_0.gguf')
    """
    folder = Path(checkpoint)
    _check_type(qtype)
    check_gguf(folder, qtype, name=name)
    out = Path(out_path) if out_path is not None else folder / gguf_filename(qtype)
    return write_gguf(folder, out, qtype, name=name, pre=pre, meta=meta)


def gguf_public_name(base: str | Path) -> str:
    """The ``general.name`` of an edit's GGUF: the base's Hub id, or ``"local model"`` for a local base (never a
    path, and the same wherever the base lives: the file's hash must not depend on it).

    Example:
        >>> gguf_public_name("HuggingFaceTB/SmolLM2-135M-Instruct"), gguf_public_name("./models/mine")
        ('HuggingFaceTB/SmolLM2-135M-Instruct (MathNeuro edit)', 'local model (MathNeuro edit)')
    """
    return f"{'local model' if is_local_path(str(base)) else base} (MathNeuro edit)"


def gguf_file_type(path: str | Path) -> str:
    """The dominant tensor type of a GGUF file (``"Q4_1"``, ``"F16"``...): ``general.file_type`` when set, else
    the type holding most matrix entries. Whether :func:`write_gguf` can write it: ``in GGUF_TYPES``.

    Example:
        >>> gguf_file_type("SmolLM2-135M-Instruct.Q4_1.gguf")  # doctest: +SKIP
        'Q4_1'
    """
    return _file_type(_gguf().GGUFReader(str(path)))


def _file_type(r: Any) -> str:
    """:func:`gguf_file_type` of an open reader (opening one parses every metadata field: a 128k vocabulary's
    tokens and merges take tens of seconds, so a caller holding a reader passes it)."""
    gguf = _gguf()
    field = r.fields.get("general.file_type")
    if field is not None:
        ft = gguf.LlamaFileType(int(field.contents()))
        return "F32" if ft == gguf.LlamaFileType.ALL_F32 else ft.name.removeprefix("MOSTLY_")
    counts: dict[str, int] = {}
    for t in r.tensors:
        if len(t.shape) > 1:
            counts[t.tensor_type.name] = counts.get(t.tensor_type.name, 0) + int(t.n_elements)
    return max(sorted(counts), key=counts.__getitem__) if counts else "F32"


# Why these bounds: a block of 32 entries with largest magnitude A is stored with step A/127 (Q8_0), A/8 (Q4_0,
# values beyond +7 steps clip), (max-min)/15 <= 2A/15 (Q4_1), A/16 (Q5_0), 2A/31 (Q5_1): the rounding error is at
# most about one step (half a step plus clipping and the fp16 scale's rounding).
_STEP = {"Q8_0": 1 / 127, "Q4_0": 1 / 8, "Q4_1": 2 / 15, "Q5_0": 1 / 16, "Q5_1": 2 / 31}


def audit_gguf(path: str | Path, checkpoint: str | Path) -> tuple[int, list[str]]:
    """Check a GGUF against the baked checkpoint it was written from, one tensor at a time.

    Every planned tensor must be present with its shape and type; F32 must equal the checkpoint, F16/BF16 its
    rounding, quantized tensors must be byte-identical to quantizing the checkpoint's (permuted) tensor and their
    dequantized values within one quantization step of it (:data:`_STEP`, relative to each block's largest entry).

    Returns:
        ``(tensors checked, ["name: why" for each mismatch])``.
    """
    gguf, folder = _gguf(), Path(checkpoint)
    r = gguf.GGUFReader(str(path))
    got = {t.name: t for t in r.tensors}
    ft = _file_type(r)
    if ft not in GGUF_TYPES:
        return 0, [f"{Path(path).name}: file type {ft} is not one mathneuro-edit writes"]
    cfg = _config(folder)
    plan = gguf_plan(folder, ft)
    bad = [f"{n}: missing" for n, *_ in plan if n not in got]
    bad += [f"{n}: not a tensor of this checkpoint" for n in sorted(set(got) - {p[0] for p in plan})]
    checked = 0
    present = [p for p in plan if p[0] in got]
    for (gname, _, shape, t), chunks in _tensors(folder, cfg, present, _ARCHS[cfg["model_type"]][1]):
        g = got[gname]
        if g.tensor_type.name != t or [int(s) for s in g.shape] != list(reversed(shape)):
            bad.append(f"{gname}: {g.tensor_type.name}{list(g.shape)} but {t}{list(reversed(shape))} expected")
            continue
        checked += 1
        data, row0 = g.data.reshape(-1) if len(shape) == 1 else g.data.reshape(math.prod(shape[:-1]), -1), 0
        for x in chunks:
            x = np.ascontiguousarray(x, dtype=np.float32)
            stored = data[row0 : row0 + len(x)] if x.ndim > 1 else data
            row0 += len(x)
            if _encode(gguf, x, t).view(np.uint8).tobytes() != np.asarray(stored).view(np.uint8).tobytes():
                bad.append(f"{gname}: not the {t} encoding of the checkpoint's tensor")
                break
            if t in _STEP:
                deq = gguf.quants.dequantize(np.asarray(stored), gguf.GGMLQuantizationType[t]).reshape(-1, 32)
                blocks = x.reshape(-1, 32)
                err = np.abs(deq - blocks).max(axis=1)
                if (err > _STEP[t] * np.abs(blocks).max(axis=1) * 1.01 + 1e-12).any():
                    bad.append(f"{gname}: dequantized values differ by more than one {t} step")
                    break
    return checked, bad
