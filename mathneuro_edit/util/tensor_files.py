"""safetensors files whose bytes depend only on their content, and the one dtype table (this module imports torch).

Why this module: safetensors' own ``save_file`` writes its ``__metadata__`` map in the order of a Rust ``HashMap``
(it changes from process to process), so two runs of the same recipe wrote mask and statistics files that differed
byte for byte although their content was equal: :func:`save_file` here writes the metadata keys sorted and the
tensors in a fixed order, through :func:`.files.atomic_writer` (umask permissions, an exclusive temporary file).
It sits apart from :mod:`.files` so that the writers of small files (and the CLI's output claiming, which uses them)
load no torch: ``--help`` and input errors answer before torch is imported.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from pathlib import Path

import torch

from ..errors import InputError
from .files import atomic_writer

__all__ = ["save_file", "SAFETENSORS_CODES", "DTYPE_OF_CODE", "FLOAT_DTYPES", "FLOAT_CODES"]

# The one dtype table: torch dtype <-> safetensors code (the format's names; bool is stored as one byte per entry)
# <-> the names a recipe uses for the floating-point formats. Written here (save_file), read by the checkpoint
# reader, the shard writer, the loader and the audit.
SAFETENSORS_CODES: dict[torch.dtype, str] = {
    torch.float64: "F64",
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.int16: "I16",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.bool: "BOOL",
    torch.float8_e4m3fn: "F8_E4M3",
    torch.float8_e5m2: "F8_E5M2",
}
DTYPE_OF_CODE: dict[str, torch.dtype] = {code: dtype for dtype, code in SAFETENSORS_CODES.items()}
# outputs.dtype and load_model(dtype=...): the floating-point formats by name, in the order messages list them
FLOAT_DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
FLOAT_CODES: dict[str, str] = {name: SAFETENSORS_CODES[dtype] for name, dtype in FLOAT_DTYPES.items()}


def save_file(
    tensors: Mapping[str, torch.Tensor], filename: str | Path, metadata: Mapping[str, str] | None = None
) -> None:
    """Drop-in for ``safetensors.torch.save_file`` whose bytes depend only on the content.

    Header: ``__metadata__`` first with its keys sorted, then the tensors ordered as safetensors' reference
    writer orders them (larger element size first, then by name: the data stays aligned), compact JSON padded
    with spaces to 8 bytes, through :func:`atomic_writer`. Any safetensors reader reads it.

    Example:
        >>> import tempfile; d = tempfile.mkdtemp()
        >>> save_file({"b": torch.ones(2), "a": torch.zeros(1)}, f"{d}/x", {"z": "1", "a": "2"})
        >>> from safetensors.torch import load_file; sorted(load_file(f"{d}/x"))
        ['a', 'b']
    """
    order = sorted(tensors, key=lambda n: (-tensors[n].element_size(), n))
    header: dict[str, object] = {}
    if metadata:
        header["__metadata__"] = {k: str(metadata[k]) for k in sorted(metadata)}
    offset, blobs = 0, []
    for name in order:
        t = tensors[name].detach().contiguous().cpu()
        if t.dtype not in SAFETENSORS_CODES:
            raise InputError(f"{name}: dtype {t.dtype} cannot be stored in safetensors; convert it first")
        blob = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {
            "dtype": SAFETENSORS_CODES[t.dtype],
            "shape": list(t.shape),
            "data_offsets": [offset, offset + len(blob)],
        }
        offset += len(blob)
        blobs.append(blob)
    raw = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    raw += b" " * (-len(raw) % 8)  # as the reference writer: the data starts 8-byte aligned
    with atomic_writer(filename) as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        for blob in blobs:
            f.write(blob)
