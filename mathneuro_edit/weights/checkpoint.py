"""Reading a base checkpoint without loading the model: folders (local or Hub), shards and their headers.

:func:`open_checkpoint` indexes the weight files of a base folder (safetensors, or pickles only when allowed) into
a :class:`Checkpoint` that reads one tensor, or some rows of it, on demand. Which checkpoint tensors a mask entry
edits is :mod:`mathneuro_edit.weights.edit_plan`'s part.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from ..errors import InputError
from ..util.config_sizes import read_model_json
from ..util.reading import read_json
from ..util.tensor_files import DTYPE_OF_CODE, SAFETENSORS_CODES
from .headers import check_entries, check_header_length

__all__ = ["TensorEntry", "Checkpoint", "open_checkpoint", "check_config_shapes", "check_config_file"]

SAFE_INDEX = "model.safetensors.index.json"
SAFE_SINGLE = "model.safetensors"
PICKLE_INDEX = "pytorch_model.bin.index.json"
PICKLE_SINGLE = "pytorch_model.bin"
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt")
MAX_INDEX_BYTES = 64 * 1024 * 1024  # a 405B model's index is ~1 MB (one line per tensor)
# Weight formats never read or copied: a stale copy in another format would silently disagree with the edit.
SKIPPED_WEIGHT_PATTERNS = ("*.bin", "*.pt", "*.pth", "*.ckpt", "*.msgpack", "*.h5", "*.onnx", "*.gguf", "*.tflite")


@dataclass(frozen=True)
class TensorEntry:
    """Where one checkpoint tensor lives: file and absolute byte range (``start``/``end`` are 0 for pickles)."""

    name: str
    dtype: str  # safetensors code, e.g. "BF16"
    shape: tuple[int, ...]
    file: Path
    start: int
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.start


@dataclass
class Checkpoint:
    """The weight files of a base folder, read lazily (headers only until a tensor is asked for)."""

    folder: Path
    kind: str  # "safetensors" or "pickle"
    shards: list[str]  # weight file names in order (relative to folder)
    tensors: dict[str, TensorEntry]  # in file order (shard by shard, by offset)
    shard_metadata: dict[str, dict[str, str]] = field(default_factory=dict)  # the base's (empty for pickles)
    index_metadata: dict[str, Any] = field(default_factory=dict)  # its index's "metadata" (empty without one)
    _pickle_cache: tuple[Path, dict[str, torch.Tensor]] | None = None

    @property
    def total_size(self) -> int:
        """Bytes of tensor data over all shards."""
        return sum(e.nbytes for e in self.tensors.values())

    def read(self, name: str, rows: slice | None = None) -> torch.Tensor:
        """Load one tensor, or ``rows`` of its first dimension (reading only those), as a new tensor."""
        entry = self.tensors[name]
        rows = rows if rows is not None and entry.shape else None
        if self.kind == "pickle":
            t = self._pickle_shard(entry.file)[name]  # memory-mapped: only what is sliced is read
            return (t if rows is None else t[rows]).clone()
        if rows is not None and entry.dtype in DTYPE_OF_CODE:  # only these rows' bytes
            start, stop, _ = rows.indices(entry.shape[0])
            row = entry.nbytes // max(entry.shape[0], 1)
            with open(entry.file, "rb") as fh:
                fh.seek(entry.start + start * row)
                data = bytearray(fh.read(max(stop - start, 0) * row))
            dtype = DTYPE_OF_CODE[entry.dtype]
            flat = torch.frombuffer(data, dtype=dtype) if data else torch.empty(0, dtype=dtype)
            return flat.reshape((max(stop - start, 0), *entry.shape[1:]))
        with safe_open(str(entry.file), framework="pt") as f:
            return f.get_tensor(name) if rows is None else f.get_slice(name)[rows]

    def raw_bytes(self, name: str) -> memoryview:
        """A pickled tensor's contiguous little-endian bytes (what safetensors stores)."""
        t = self._pickle_shard(self.tensors[name].file)[name].contiguous()
        return memoryview(t.reshape(-1).view(torch.uint8).numpy())

    def _pickle_shard(self, path: Path) -> dict[str, torch.Tensor]:
        # One shard at a time, memory-mapped: peak memory stays about one shard.
        if self._pickle_cache is None or self._pickle_cache[0] != path:
            self._pickle_cache = None  # free the previous shard first
            self._pickle_cache = (path, torch.load(path, map_location="cpu", weights_only=True, mmap=True))
        return self._pickle_cache[1]


def _read_safetensors_header(path: Path) -> tuple[dict[str, TensorEntry], dict[str, str]]:
    """The tensors of a safetensors file, checked against the file: header length, offsets, sizes vs shapes (an
    InputError naming the file, and the tensor, otherwise)."""
    fix = "re-download or re-save the base"
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            check_header_length(path, n, size, fix)
            header = json.loads(f.read(n))
        if not isinstance(header, dict):
            raise InputError(
                f"{path}: the safetensors header is a JSON {_json_kind(header)}, not an object of tensors; {fix}"
            )
        base = 8 + n
        meta = _string_metadata(path, header.pop("__metadata__", None), fix)
        entries = {
            name: TensorEntry(
                name, d["dtype"], tuple(d["shape"]), path, base + d["data_offsets"][0], base + d["data_offsets"][1]
            )
            for name, d in header.items()
        }
    except InputError:
        raise
    except RecursionError:  # a header nested deeper than a JSON parser goes
        raise InputError(f"{path}: not a readable safetensors file (its header is nested too deep); {fix}") from None
    except (OSError, ValueError, KeyError, TypeError, struct.error) as e:
        raise InputError(f"{path}: not a readable safetensors file ({e}); {fix}") from None
    check_entries(path, entries.values(), base, size, fix)
    return dict(sorted(entries.items(), key=lambda kv: kv[1].start)), meta


def _string_metadata(path: Path, meta: Any, fix: str) -> dict[str, str]:
    """A header's ``__metadata__``: absent, or an object of string values (the safetensors format's rule).

    Why: the export copies a shard's metadata into its own shards; a number or an object there is written out
    as it came, and every safetensors reader (``safe_open``, transformers) then refuses the exported file.
    """
    if meta is None:
        return {}
    if not isinstance(meta, dict):
        raise InputError(f"{path}: __metadata__ is a JSON {_json_kind(meta)}, not an object of strings; {fix}")
    for key, value in meta.items():
        if not isinstance(value, str):
            raise InputError(
                f"{path}: __metadata__ {key[:80]!r} is a JSON {_json_kind(value)}, not a string "
                f"(safetensors readers refuse such a file); {fix}"
            )
    return meta


def _json_kind(value: Any) -> str:
    return {bool: "boolean", int: "number", float: "number", str: "string", list: "array", dict: "object"}.get(
        type(value), "null"
    )


def _check_shard_names(index: Path, weight_map: dict[Any, Any], shards: list[Any], single: str) -> None:
    """An index names only plain files of its own folder, each by one spelling, with the weight files' suffix.

    Why: a shard named ``../x`` or ``/abs/x`` would be read (and exported) from outside the folder, where the
    lock's hashes of the base folder do not reach; ``a.safetensors`` and ``./a.safetensors`` would read one file
    twice.
    """
    suffix = Path(single).suffix
    for name, shard in weight_map.items():
        if not isinstance(name, str) or not isinstance(shard, str):
            raise InputError(
                f"{index}: weight_map entry {str(name)[:80]!r}: must map a tensor name to a shard file "
                "name; re-download the base"
            )
    for shard in shards:
        plain = shard and "/" not in shard and "\\" not in shard and shard not in (".", "..") and ":" not in shard
        if not plain or not shard.endswith(suffix) or shard.startswith("."):
            raise InputError(
                f"{index}: shard {shard[:120]!r} is not a {suffix} file inside the model folder (an index "
                "may only name files beside it); re-download the base"
            )


def check_config_file(folder: Path) -> None:
    """Refuse (an InputError naming the file) a base folder whose ``config.json`` is not a JSON object with a
    ``model_type`` (what transformers, and every reader of the exported folder, needs to know the model)."""
    path = Path(folder) / "config.json"
    try:
        cfg = read_model_json(path)
    except FileNotFoundError:
        raise InputError(f"{path}: missing; a model folder needs its config.json (save_pretrained writes it)") from None
    except InputError:
        raise
    except (OSError, ValueError) as e:
        raise InputError(f"{path}: not readable JSON ({str(e)[:120]}); re-download the base") from None
    if not isinstance(cfg, dict) or not isinstance(cfg.get("model_type"), str) or not cfg["model_type"]:
        raise InputError(
            f"{path}: no model_type; transformers cannot tell which model this is: re-download the base "
            "or add the model_type of its family"
        )


def check_config_shapes(ckpt: Checkpoint, model: Any) -> None:
    """Refuse (naming the file, the tensor and both shapes) checkpoint tensors whose shape contradicts ``model``,
    the config's model on the meta device (``None``: an unknown family, nothing to compare)."""
    if model is None:
        return
    named = [*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False)]
    expected = {n: tuple(t.shape) for n, t in named}
    prefix = getattr(model, "base_model_prefix", "") or ""
    for name, entry in ckpt.tensors.items():
        want = expected.get(name)
        if want is None and prefix:  # a checkpoint saved from the inner model (no "model." prefix), or the reverse
            want = expected.get(f"{prefix}.{name}") or expected.get(name.removeprefix(f"{prefix}."))
        if want is not None and tuple(entry.shape) != want:
            raise InputError(
                f"{entry.file}: tensor {name} has shape {list(entry.shape)} but config.json describes "
                f"{list(want)}; the weights and config.json are from different models: re-download the "
                "base"
            )


def open_checkpoint(folder: Path, *, allow_pickle: bool = False) -> Checkpoint:
    """Index the weights of a base folder: ``model.safetensors(.index.json)``, else (if allowed) pickles; refused:
    no weights, pickle weights without ``allow_pickle``, a shard named by the index missing."""
    folder = Path(folder)
    if (folder / SAFE_INDEX).is_file() or (folder / SAFE_SINGLE).is_file():
        kind, index_name, single = "safetensors", SAFE_INDEX, SAFE_SINGLE
    elif (folder / PICKLE_INDEX).is_file() or any(p.suffix in PICKLE_SUFFIXES for p in folder.iterdir()):
        if not allow_pickle:
            raise InputError(
                f"base: {folder} has only pickle weights (*.bin/*.pt), which can run code when loaded; convert "
                "them: AutoModelForCausalLM.from_pretrained(base).save_pretrained(dir, safe_serialization=True), "
                "or pass allow_pickle=True to read them with torch.load(weights_only=True)"
            )
        kind, index_name, single = "pickle", PICKLE_INDEX, PICKLE_SINGLE
    else:
        raise InputError(
            f"base: no model weights (model.safetensors or an index) in {folder}; check the folder "
            "(a Hub repo with only *.bin weights needs allow_pickle=True)"
        )

    index_meta: dict[str, Any] = {}
    if (folder / index_name).is_file():
        try:
            index = read_json(folder / index_name, MAX_INDEX_BYTES, "a weights index", "re-download the base")
            weight_map = index["weight_map"]
            shards = list(dict.fromkeys(weight_map.values()))
            index_meta = dict(index.get("metadata") or {})
        except InputError:
            raise
        except (ValueError, KeyError, AttributeError, TypeError) as e:
            raise InputError(f"{folder / index_name}: unreadable index ({e}); re-download the base") from None
        _check_shard_names(folder / index_name, weight_map, shards, single)
    elif (folder / single).is_file():
        shards = [single]
    else:  # a lone pickle with another name, e.g. model.pt
        shards = sorted(p.name for p in folder.iterdir() if p.suffix in PICKLE_SUFFIXES)[:1]
    missing = [s for s in shards if not (folder / s).is_file()]
    if missing:
        raise InputError(f"base: shard {missing[0]} named by the index is missing in {folder}; re-download the base")

    tensors: dict[str, TensorEntry] = {}
    shard_meta: dict[str, dict[str, str]] = {}
    for shard in shards:
        if kind == "safetensors":
            entries, meta = _read_safetensors_header(folder / shard)
            shard_meta[shard] = meta
        else:
            state = torch.load(folder / shard, map_location="cpu", weights_only=True, mmap=True)  # mapped, not read
            code = {n: SAFETENSORS_CODES.get(t.dtype, str(t.dtype)) for n, t in state.items()}
            entries = {
                n: TensorEntry(n, code[n], tuple(t.shape), folder / shard, 0, t.nbytes) for n, t in state.items()
            }
        for name, entry in entries.items():
            if name in tensors:
                raise InputError(f"base: tensor {name} appears in two shards ({tensors[name].file.name}, {shard})")
            tensors[name] = entry
    if kind == "safetensors" and (folder / index_name).is_file():  # the index and the headers tell one story
        for name, shard in weight_map.items():
            held = tensors.get(name)
            if held is None or held.file.name != shard:
                where = f"{held.file.name} holds it" if held is not None else "no shard holds it"
                raise InputError(
                    f"{folder / index_name}: names tensor {name} in {shard}, but {where}; the index and "
                    "the shards are from different saves: re-download the base"
                )
    return Checkpoint(folder, kind, shards, tensors, shard_meta, index_meta)
