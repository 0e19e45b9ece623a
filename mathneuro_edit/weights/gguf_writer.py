"""GGUF export: write a baked checkpoint as one GGUF file for llama.cpp, Ollama and LM Studio (``outputs.gguf``).

The file follows llama.cpp's converter (``convert_hf_to_gguf.py``), written with the ``gguf`` package (extra
``gguf``), for the families registered in :mod:`.gguf_arch` (this module asks the model's
:class:`~.gguf_arch.Family` and never tests a ``model_type``). The file is the model's keys (:mod:`.gguf_keys`),
the tokenizer and chat template (:mod:`.gguf_vocab`), then the tensors (:mod:`.gguf_tensors`), each encoded here.
docs/formats.md lists every key and the type of every tensor.

Streaming (:func:`~.gguf_tensors.tensor_rows`), deterministic (same checkpoint and type: the same bytes; no time
stamps, no paths) and atomic (a temporary file renamed).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError
from ..util.files import atomic_writer
from ..util.outdir import as_space_error
from ..util.paths import is_local_path
from .gguf_header import check_gguf_header
from .gguf_keys import add_general, add_model_keys, gguf_package, read_config
from .gguf_tensors import GGUF_TYPES, gguf_plan, tensor_rows
from .gguf_vocab import add_vocab, check_vocab

__all__ = ["gguf_public_name", "gguf_filename", "check_gguf", "write_gguf", "gguf_file_type", "audit_gguf"]


def gguf_filename(qtype: str) -> str:
    """The GGUF's name in an output folder: ``model-<TYPE>.gguf``.

    Example:
        >>> gguf_filename("Q8_0")
        'model-Q8_0.gguf'
    """
    return f"model-{qtype}.gguf"


def _encode(gguf: Any, x: np.ndarray, ggml_type: str) -> np.ndarray:
    """float32 rows -> the type's bytes (F16: IEEE round to nearest even; BF16 and Q*: gguf.quants)."""
    if ggml_type == "F32":
        return x
    if ggml_type == "F16":
        return x.astype(np.float16)
    return gguf.quants.quantize(x, gguf.GGMLQuantizationType[ggml_type])


def _write_array(f: Any, x: np.ndarray) -> None:
    """``x``'s bytes written to ``f`` through the file object, without a copy.

    Why not ``x.tofile(f)``: numpy writes with C stdio and, on a full disk, raises ``OSError("N requested and 0
    written")`` without an errno, so the full disk was not recognised as one (a raw OSError, exit 3); the file
    object's own write raises ``OSError(ENOSPC)``.
    """
    f.write(memoryview(np.ascontiguousarray(x)).cast("B"))


def check_gguf(folder: str | Path, qtype: str, name: str | None = None) -> None:
    """Raise :class:`InputError` now if :func:`write_gguf` would refuse this model folder (type, package,
    architecture, rope scaling, tensor names, tokenizer, and ``name`` as ``general.name``); reads config and
    headers only."""
    gguf_plan(folder, qtype)
    n_vocab = int(read_config(folder)[0]["vocab_size"])  # the tokenizer's ids must have embedding rows
    check_vocab(folder, name or "local model", n_vocab)  # the tokenizer side, the name with it: weights/gguf_vocab.py


def write_gguf(
    checkpoint: str | Path,
    out_path: str | Path,
    qtype: str,
    *,
    name: str | None = None,
    pre: str | None = None,
    meta: Mapping[str, Any] | None = None,
) -> Path:
    """Write a baked checkpoint folder (safetensors weights, config.json and tokenizer.json) as one GGUF file
    ``out_path`` (replaced when it exists) of type ``qtype``, one of :data:`GGUF_TYPES` (streaming, atomic,
    deterministic); returns its path.

    Args:
        name: ``general.name`` (default: ``"local model"``, as a run names a local base); never a local path. A
            name holding ``phi3`` / ``phi-3`` makes llama.cpp look up Phi-3's special tokens
            (:func:`~.gguf_vocab.name_refusal`).
        pre: ``tokenizer.ggml.pre`` to write instead of the one read from tokenizer.json (e.g. a GGUF base's own:
            transformers' GGUF tokenizer conversion turns SmolLM2's ``smollm`` into a plain ByteLevel ``gpt-2``, and
            llama.cpp picks its pre-tokenizer regex by this name: the converted one splits digits otherwise).
        meta: the ``general.*`` metadata llama.cpp's converter writes (see :func:`~.gguf_keys.add_general`): base name, size
            label, fine-tune, license fields, base model, tags, languages. Never a local path.
    """
    gguf, folder, out = gguf_package(), Path(checkpoint), Path(out_path)
    plan = gguf_plan(folder, qtype)
    cfg, family = read_config(folder)
    arch = gguf.MODEL_ARCH_NAMES[getattr(gguf.MODEL_ARCH, family.arch)]
    w = gguf.GGUFWriter(None, arch)
    w.add_type("model")
    general_name = name or "local model"  # not the model type: "phi3" would trip llama.cpp's Phi-3 name check
    w.add_name(general_name)
    add_general(w, meta or {})
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    ftype = "ALL_F32" if qtype == "F32" else f"MOSTLY_{qtype}"
    w.add_file_type(int(gguf.LlamaFileType[ftype]))
    add_model_keys(w, gguf, cfg, family)  # hyperparameters, rope, the family's own keys: weights/gguf_keys.py
    add_vocab(gguf, w, folder, int(cfg["vocab_size"]), pre, general_name)  # tokenizer.ggml.*: weights/gguf_vocab.py
    for gname, _, shape, t in plan:
        qt = gguf.GGMLQuantizationType[t]
        n_bytes = math.prod(gguf.quants.quant_shape_to_byte_shape(shape, qt))
        w.add_tensor_info(gname, shape, np.dtype(np.float32), n_bytes, raw_dtype=qt)
    out.parent.mkdir(parents=True, exist_ok=True)
    size: int | None = None  # the whole file's bytes, once its metadata is written (a full disk's message needs it)
    try:
        with atomic_writer(out) as f:  # an exclusive temporary file, synced and renamed; removed on any error
            # gguf's writer opens its path by name: it is handed our file instead (open, never re-opened by a name
            # someone could replace with a link meanwhile); closing it is atomic_writer's (after the sync)
            w.fout, w.path, w.state = [f], out, gguf.WriterState.EMPTY
            w.write_header_to_file()
            w.write_kv_data_to_file()
            w.write_ti_data_to_file()
            size = _file_size(f.tell(), [n for n, _, _, _ in plan], w, gguf)
            for (_gname, _, _, t), chunks in tensor_rows(folder, cfg, family, plan):
                w.write_padding(f, f.tell())  # each tensor starts aligned (GGUF's data alignment, 32 bytes)
                start = f.tell()
                for x in chunks:
                    _write_array(f, _encode(gguf, np.ascontiguousarray(x, dtype=np.float32), t))
                w.write_padding(f, f.tell() - start)
    except BaseException as e:
        space = as_space_error(e, out, size) if isinstance(e, OSError) else None
        if space is not None:  # one line naming the file and what it lacks (free measured without the partial)
            raise space from None
        raise
    return out


def _file_size(metadata_end: int, names: list[str], w: Any, gguf: Any) -> int:
    """The GGUF file's size: its metadata, then each tensor's bytes padded to the data alignment."""
    align = int(w.data_alignment or gguf.GGUF_DEFAULT_ALIGNMENT)
    pad = lambda n: -(-n // align) * align  # noqa: E731
    return pad(metadata_end) + sum(pad(int(w.tensors[0][n].nbytes)) for n in names)


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
    ``export_adapter`` (``run`` with ``outputs.gguf`` and ``export --gguf TYPE`` call the same writer). The
    arguments are :func:`write_gguf`'s; ``out_path`` defaults to ``<checkpoint>/model-<TYPE>.gguf``, the name a run
    writes (:func:`gguf_filename`). Refused before any tensor is written: an unknown type, a missing gguf
    package, or an architecture, rope scaling or tokenizer the writer does not support.

    Example:
        >>> from mathneuro_edit import export_gguf
        >>> export_gguf("out/quickstart/checkpoint", "Q8_0")  # doctest: +SKIP
        PosixPath('out/quickstart/checkpoint/model-Q8_0.gguf')
    """
    folder = Path(checkpoint)
    check_gguf(folder, qtype, name=name)  # the type first (gguf_plan), then the model and tokenizer
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
    """
    gguf = gguf_package()
    check_gguf_header(path)  # counts, lengths and nesting bounded by the file before gguf allocates from them
    return _file_type(gguf.GGUFReader(str(path)))


def _file_type(r: Any) -> str:
    """:func:`gguf_file_type` of an open reader (opening one parses every metadata field: a 128k vocabulary's
    tokens and merges take tens of seconds, so a caller holding a reader passes it)."""
    gguf = gguf_package()
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
    """Check a GGUF against the baked checkpoint it was written from, one tensor at a time: ``(tensors checked,
    ["name: why" for each mismatch])``.

    Every planned tensor must be present with its shape and type; F32 must equal the checkpoint, F16/BF16 its
    rounding, quantized tensors must be byte-identical to quantizing the checkpoint's (permuted) tensor and their
    dequantized values within one quantization step of it (:data:`_STEP`, relative to each block's largest entry).
    """
    gguf, folder = gguf_package(), Path(checkpoint)
    try:
        check_gguf_header(path)  # a damaged file is a finding of the audit, never an internal error or a hang
    except InputError as e:
        return 0, [str(e).removeprefix(f"{path}: ")]
    r = gguf.GGUFReader(str(path))
    got = {t.name: t for t in r.tensors}
    ft = _file_type(r)
    if ft not in GGUF_TYPES:
        return 0, [f"{Path(path).name}: file type {ft} is not one mathneuro-edit writes"]
    cfg, family = read_config(folder)
    plan = gguf_plan(folder, ft)
    bad = [f"{n}: missing" for n, *_ in plan if n not in got]
    bad += [f"{n}: not a tensor of this checkpoint" for n in sorted(set(got) - {p[0] for p in plan})]
    checked = 0
    present = [p for p in plan if p[0] in got]
    with open(path, "rb") as fh:
        for (gname, _, shape, t), chunks in tensor_rows(folder, cfg, family, present):
            g = got[gname]
            if g.tensor_type.name != t or [int(s) for s in g.shape] != list(reversed(shape)):
                bad.append(f"{gname}: {g.tensor_type.name}{list(g.shape)} but {t}{list(reversed(shape))} expected")
                continue
            checked += 1
            bad += _audit_tensor(gguf, fh, g, gname, shape, t, chunks)
    return checked, bad


def _stored_rows(fh: Any, g: Any, row0: int, rows: int, total_rows: int) -> np.ndarray:
    """Rows ``row0 .. row0 + rows`` of GGUF tensor ``g`` as stored, read from the file.

    Why not ``g.data`` (the reader's memory map of the whole file): every page read through it stays in the process
    until the map closes, so auditing an 8B model's 8.5 GB GGUF held all of it (9.4 GB of RSS).
    """
    row_bytes = g.n_bytes // total_rows
    fh.seek(g.data_offset + row0 * row_bytes)
    buf = fh.read(rows * row_bytes)
    return np.frombuffer(buf, dtype=g.data.dtype).reshape(rows, -1)


def _audit_tensor(gguf: Any, fh: Any, g: Any, gname: str, shape: Any, t: str, chunks: Any) -> list[str]:
    """The mismatches of one GGUF tensor against its checkpoint rows (``chunks``), read a chunk at a time."""
    total_rows = 1 if len(shape) == 1 else math.prod(shape[:-1])
    row0 = 0
    for x in chunks:
        x = np.ascontiguousarray(x, dtype=np.float32)
        rows = len(x) if x.ndim > 1 else 1
        stored = _stored_rows(fh, g, row0, rows, total_rows)
        stored = stored if x.ndim > 1 else stored.reshape(-1)
        row0 += rows
        if _encode(gguf, x, t).view(np.uint8).tobytes() != np.asarray(stored).view(np.uint8).tobytes():
            return [f"{gname}: not the {t} encoding of the checkpoint's tensor"]
        if t in _STEP:
            deq = gguf.quants.dequantize(np.asarray(stored), gguf.GGMLQuantizationType[t]).reshape(-1, 32)
            blocks = x.reshape(-1, 32)
            err = np.abs(deq - blocks).max(axis=1)
            if (err > _STEP[t] * np.abs(blocks).max(axis=1) * 1.01 + 1e-12).any():
                return [f"{gname}: dequantized values differ by more than one {t} step"]
    return []
