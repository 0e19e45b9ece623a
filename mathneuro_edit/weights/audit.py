"""Audit an export against its base: recompute every expected tensor and report every difference.

:func:`verify` handles the three outputs of mathneuro-edit, recognised by their files:

- a baked checkpoint (:func:`~mathneuro_edit.weights.checkpoint_writer.export_checkpoint`): tensor by tensor (streaming), each
  edited tensor must equal the base's with the mask applied (:func:`~mathneuro_edit.engine.apply.scale_masked`) bit for
  bit, each other tensor must be byte-identical to the base's; no tensor missing or extra; the index consistent
  with the shards; every copied non-weight file byte-identical; the shards' metadata recording this mask's hash
  and scale; a ``*.gguf`` beside the shards (``outputs.gguf``) is audited against them
  (:func:`~mathneuro_edit.weights.gguf_writer.audit_gguf`: each tensor's bytes are the encoding of the checkpoint's,
  and dequantized values are within one quantization step);
- a PEFT SHiRA adapter (:func:`~mathneuro_edit.weights.adapter.export_adapter`): for every layer, the base plus the
  stored delta (PEFT's own ``dense += sparse`` merge) must equal the edited tensor bit for bit, and every masked
  layer must be present;
- mathneuro-edit's mask adapter: the stored mask and scale must be these.

Example:
    >>> report = verify("out/boosted", "Qwen/Qwen2.5-Math-1.5B", "math.mask.safetensors", 1.1)  # doctest: +SKIP
    >>> report.ok, report.summary()  # doctest: +SKIP
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from ..engine.apply import check_scale, scale_of
from ..engine.devices import selection_device
from ..engine.edit_map import Setting
from ..engine.mask import Mask, as_mask
from ..errors import InputError
from ..layout import MATHNEURO_CONFIG
from ..util.config_sizes import read_model_json
from ..util.console import terminal_safe
from ..util.tensor_files import DTYPE_OF_CODE, FLOAT_CODES
from .adapter import peft_merge_exact, shira_layer_rows, shira_layers
from .base import resolve_base
from .checkpoint import SAFE_INDEX, Checkpoint, open_checkpoint
from .checkpoint_writer import published_bytes, support_files
from .edit_plan import EditPlan, meta_model, plan_edits
from .gguf_quantize import LLAMA_CPP_TYPES, audit_llama_cpp
from .gguf_writer import audit_gguf, gguf_file_type
from .remote_code import check_remote_code
from .shards import cast_code, tensor_bytes

__all__ = ["VerifyReport", "verify"]

_BAR = {"desc": "verify", "unit": "tensor", "leave": False}  # a transient bar over what is compared (progress=True)


@dataclass
class VerifyReport:
    """The result of :func:`verify`."""

    out_dir: Path
    kind: str  # "checkpoint", "peft" or "mathneuro"
    checked: int = 0  # tensors (or adapter layers) compared
    edited: int = 0  # of those, how many carry edits
    mismatches: list[str] = field(default_factory=list)  # "name: why" for each content not the expected one
    missing: list[str] = field(default_factory=list)  # tensors or files of the base absent from the output
    extra: list[str] = field(default_factory=list)  # tensors in the output that the base does not have
    audited: list[str] = field(default_factory=list)  # other files checked, e.g. the GGUF beside the shards
    gguf_survival: dict[str, Any] = field(default_factory=dict)  # the edit in each quantized GGUF (gguf_survival.py)
    device: str = "cpu"  # where the edited tensors were recomputed and compared

    @property
    def ok(self) -> bool:
        """True when nothing differs from the expectation."""
        return not (self.mismatches or self.missing or self.extra)

    def __bool__(self) -> bool:
        return self.ok

    def summary(self) -> str:
        """One line per problem (or an OK line), then one per other file audited (a GGUF beside the shards)."""
        head = (
            f"{self.kind} {terminal_safe(str(self.out_dir))}: {'OK' if self.ok else 'FAILED'} "
            f"({self.checked} checked, {self.edited} edited)"
        )
        # each entry names a file or tensor of the export (someone else's folder): escaped, one line each
        entries = [("mismatch", self.mismatches), ("missing", self.missing), ("extra", self.extra)]
        entries.append(("also audited", self.audited))
        return "\n".join([head] + [f"{what}: {terminal_safe(m)}" for what, items in entries for m in items])


def verify(
    out_dir: str | Path,
    base: str | Path,
    mask: Any,
    scale: Setting,
    *,
    allow_pickle: bool = False,
    revision: str | None = None,
    trust_remote_code: bool = False,
    progress: bool = False,
    device: str | torch.device | None = "auto",
) -> VerifyReport:
    """Check an export (baked checkpoint or adapter) against the base (folder or Hub id), the mask (or its file)
    and the scale it was made from. ``device``: where a checkpoint's edited tensors are recomputed and compared,
    a block of rows at a time (``"auto"``: :func:`~mathneuro_edit.engine.devices.selection_device`); the edit is
    elementwise, so the expected bits are the same on every device.
    """
    scale = check_scale(scale)
    mask = as_mask(mask)
    scale = check_scale(scale, list(mask))  # a scale map's keys against the edited matrices
    out = Path(out_dir)
    if not out.is_dir():
        raise InputError(f"out_dir: no such folder {out}; pass the export's folder")
    folder = resolve_base(base, revision=revision, allow_pickle=allow_pickle)
    ckpt = open_checkpoint(folder, allow_pickle=allow_pickle)
    peft = (out / "adapter_config.json").is_file()
    check_remote_code(folder, trust_remote_code)
    model = meta_model(folder, trust_remote_code=trust_remote_code) if peft else None
    plan = plan_edits(ckpt, mask, model, trust_remote_code=trust_remote_code)
    if peft:
        return _verify_peft(out, ckpt, plan, mask, scale, progress)
    if (out / MATHNEURO_CONFIG).is_file():
        return _verify_mathneuro(out, mask, scale)
    return _verify_checkpoint(out, folder, ckpt, plan, mask, scale, progress, selection_device(device))


def _export_json(path: Path, report: VerifyReport) -> dict[str, Any]:
    """A JSON object of the export being verified, read through the one regular-file reader; a FIFO, a device, a
    huge or deeply nested file, or one that is not a JSON object is a finding of the report (``{}`` then), never an
    internal error or a hang: the export may be someone else's."""
    try:
        data = read_model_json(path)
    except (OSError, ValueError) as e:  # InputError included: the reader's one line
        report.mismatches.append(f"{path.name}: not a readable JSON file ({str(e).removeprefix(f'{path}: ')[:200]})")
        return {}
    if not isinstance(data, dict):
        report.mismatches.append(f"{path.name}: not a JSON object")
        return {}
    return data


def _verify_checkpoint(
    out: Path, folder: Path, ckpt: Checkpoint, plan: EditPlan, mask: Any, scale: Setting, progress: bool, device: Any
) -> VerifyReport:
    report = VerifyReport(out, "checkpoint", device=device.type)
    try:
        got = open_checkpoint(out)
    except InputError as e:
        report.missing.append(f"weights ({e})")
        return report
    if got.kind != "safetensors":
        report.mismatches.append("weights: the export holds pickle weights, not safetensors")
        return report
    report.missing += [n for n in ckpt.tensors if n not in got.tensors]
    report.extra += [n for n in got.tensors if n not in ckpt.tensors]
    # outputs.dtype, as the shards record it: every F32/BF16/F16 tensor cast to it after the edit
    codes = {m.get("mathneuro_edit_dtype") for m in got.shard_metadata.values()}
    code = next(iter(codes)) if len(codes) == 1 else None
    if len(codes) > 1 or (code is not None and code not in FLOAT_CODES.values()):
        report.mismatches.append(f"shards: mathneuro_edit_dtype {sorted(map(str, codes))} is not one dtype")
    dtype = next((k for k, v in FLOAT_CODES.items() if v == code), None)
    for name, entry in tqdm(got.tensors.items(), total=len(got.tensors), disable=not progress, **_BAR):
        if name not in ckpt.tensors:
            continue
        b = ckpt.tensors[name]
        report.checked += 1
        cast = cast_code(b.dtype, code)
        if (entry.dtype, entry.shape) != (cast or b.dtype, b.shape):
            report.mismatches.append(
                f"{name}: {entry.dtype}{list(entry.shape)} but the base has {b.dtype}{list(b.shape)}"
                + (f" (cast to {cast})" if cast else "")
            )
        elif name in plan.edits or cast is not None:
            report.edited += name in plan.edits
            n_bad = 0
            for rows, _, expected in plan.edited_rows(ckpt, name, scale, device=device):  # a block of rows
                if cast is not None:
                    expected = expected.to(DTYPE_OF_CODE[cast])
                actual = got.read(name, rows=rows).to(device)
                # per entry, not per byte: an entry differs when any of its bytes does
                per = max(actual.element_size(), 1)
                n_bad += int((_bits(expected) != _bits(actual)).reshape(-1, per).any(dim=1).sum())
            if n_bad:
                report.mismatches.append(
                    f"{name}: {n_bad} of {math.prod(entry.shape)} entries differ from the expected "
                    + ("edit" if name in plan.edits else f"cast to {cast}")
                )
        elif not _same_bytes(ckpt, got, name):
            report.mismatches.append(f"{name}: differs from the base, but the mask does not edit it")
    _check_records(report, out, got, mask, scale)
    _check_support_files(report, out, folder, ckpt, dtype)
    if not report.mismatches and not report.missing:  # the GGUF is audited against the (now verified) shards
        for path in sorted(out.glob("*.gguf")):
            try:  # llama.cpp's types: its quantization of the checkpoint's float GGUF, made again
                ft = gguf_file_type(path)
            except InputError:  # a damaged file: audit_gguf reports what is wrong with it
                ft = None
            checked, bad = audit_llama_cpp(path, out, ft) if ft in LLAMA_CPP_TYPES else audit_gguf(path, out)
            report.checked += checked
            report.mismatches += [f"{path.name}: {b}" for b in bad]
            report.audited.append(f"{path.name} ({checked} tensors, against the checkpoint)")
        if not report.mismatches:
            report.gguf_survival = _survival(out, folder, mask, dtype)
    return report


def _survival(out: Path, folder: Path, mask: Any, dtype: str | None) -> dict[str, Any]:
    """The edit's survival in each quantized GGUF beside the shards, measured again against the base written the
    same way (:func:`~.gguf_survival.measure_survival`); ``{}`` without one."""
    from .gguf_quantize import source_type
    from .gguf_survival import measure_survival

    files = {gguf_file_type(p): p for p in sorted(out.glob("*.gguf"))}
    if not any(t not in ("F32", "F16", "BF16") for t in files):
        return {}
    source = dtype
    if source is None:  # outputs.dtype kept each tensor's type: the checkpoint's config.json names it
        cfg = read_model_json(out / "config.json") or {}
        written = cfg.get("dtype") or cfg.get("torch_dtype")
        source = written if isinstance(written, str) else None
    return measure_survival(out, folder, mask, files, source=source_type(source), dtype=dtype)


def _check_records(report: VerifyReport, out: Path, got: Checkpoint, mask: Any, scale: Setting) -> None:
    """Each shard's metadata records this mask and scale; the index maps every tensor to its shard."""
    for shard, meta in got.shard_metadata.items():
        want = {"format": "pt", "mathneuro_edit_mask_sha256": mask.sha256, "mathneuro_edit_scale": repr(scale)}
        wrong = [k for k, v in want.items() if meta.get(k) != v]
        if wrong:
            report.mismatches.append(f"{shard}: metadata {wrong} do not record this mask/scale")
    if (out / SAFE_INDEX).is_file():
        index = _export_json(out / SAFE_INDEX, report)
        where = {n: e.file.name for n, e in got.tensors.items()}
        meta = index.get("metadata") if isinstance(index.get("metadata"), dict) else {}
        if index and index.get("weight_map") != where:
            report.mismatches.append(f"{SAFE_INDEX}: weight_map does not match the shards' contents")
        if index and meta.get("total_size") != got.total_size:
            report.mismatches.append(f"{SAFE_INDEX}: total_size is not {got.total_size}")


def _check_support_files(report: VerifyReport, out: Path, folder: Path, ckpt: Checkpoint, dtype: str | None) -> None:
    """The base's support files are there as published (files the output adds, a model card, are not checked)."""
    copied, _ = support_files(folder, ckpt)
    for rel in copied:
        if not (out / rel).is_file():
            report.missing.append(rel)
            continue
        want = published_bytes(folder, rel, dtype)
        if (out / rel).read_bytes() != (want if want is not None else (folder / rel).read_bytes()):
            report.mismatches.append(f"{rel}: differs from the base's file" + (" (as published)" if want else ""))


def _bits(t: torch.Tensor) -> torch.Tensor:
    """A tensor's bytes as integers, so -0.0 != +0.0 and NaN == NaN (a bit-for-bit comparison)."""
    return t.contiguous().reshape(-1).view(torch.uint8)


def _same_bytes(a: Checkpoint, b: Checkpoint, name: str, chunk: int = 1 << 24) -> bool:
    """Compare a tensor's stored bytes in two checkpoints, 16 MiB at a time (streaming)."""
    ea, eb = a.tensors[name], b.tensors[name]
    if a.kind != "safetensors":  # a pickle base: compare its tensor's bytes with the written ones
        return bytes(a.raw_bytes(name)) == bytes(tensor_bytes(b.read(name)))
    with open(ea.file, "rb") as fa, open(eb.file, "rb") as fb:
        fa.seek(ea.start)
        fb.seek(eb.start)
        sizes = [min(chunk, ea.nbytes - at) for at in range(0, ea.nbytes, chunk)]
        return all(fa.read(n) == fb.read(n) for n in sizes)


def _peft_config_problems(cfg: dict[str, Any]) -> list[str]:
    """What in an ``adapter_config.json`` is not a SHiRA adapter's: its ``peft_type``, a ``target_modules`` that is
    not a list of names, an ``r`` that is not a whole number >= 0 (``target_modules: 5`` was an internal error, and
    ``r`` multiplies sizes: a list there would be repeated)."""
    problems = []
    if cfg.get("peft_type") != "SHIRA":
        return [f"adapter_config.json: peft_type {cfg.get('peft_type')!r} is not SHIRA"]
    modules = cfg.get("target_modules")
    if modules is not None and not (isinstance(modules, list) and all(isinstance(m, str) for m in modules)):
        problems.append(f"adapter_config.json: target_modules {repr(modules)[:60]} is not a list of module names")
    r = cfg.get("r", 0)
    if isinstance(r, bool) or not isinstance(r, int) or r < 0:
        problems.append(f"adapter_config.json: r {repr(r)[:60]} is not a whole number >= 0")
    return problems


def _verify_peft(
    out: Path, ckpt: Checkpoint, plan: EditPlan, mask: Any, scale: Setting, progress: bool = False
) -> VerifyReport:
    from safetensors import safe_open

    report = VerifyReport(out, "peft")
    cfg = _export_json(out / "adapter_config.json", report)
    if not report.mismatches:
        report.mismatches += _peft_config_problems(cfg)
    if report.mismatches:
        return report
    layers = shira_layers(plan, mask)
    weights = out / "adapter_model.safetensors"
    if not weights.is_file():
        report.missing.append("adapter_model.safetensors")
        return report
    with safe_open(str(weights), framework="pt") as f:
        keys = set(f.keys())
    expected = {f"base_model.model.{layer.module}.shira_{w}" for layer in layers for w in ("indices", "weight")}
    report.missing += sorted(expected - keys)
    report.extra += sorted(keys - expected)
    if set(cfg.get("target_modules") or []) != {layer.module for layer in layers}:
        report.mismatches.append("adapter_config.json: target_modules are not the mask's layers")
    for layer in tqdm(layers, disable=not progress, **_BAR):
        key = f"base_model.model.{layer.module}"
        if f"{key}.shira_indices" not in keys or f"{key}.shira_weight" not in keys:
            continue
        report.checked += 1
        report.edited += 1
        idx, d = _read(weights, f"{key}.shira_indices").long(), _read(weights, f"{key}.shira_weight")  # (2, k), (k,)
        dtype = DTYPE_OF_CODE.get(ckpt.tensors[layer.ckpt].dtype)
        k = cfg.get("r", 0) * (layer.rows + layer.cols)
        if d.dim() != 1 or len(d) != k or d.dtype != dtype or tuple(idx.shape) != (2, len(d)):
            report.mismatches.append(
                f"{layer.name}: {tuple(idx.shape)} indices and {len(d)} {d.dtype} values, "
                f"not (2, r*(m+n)) and r*(m+n) in {dtype}"
            )
            continue
        if idx.numel() and (idx.min() < 0 or idx[0].max() >= layer.rows or idx[1].max() >= layer.cols):
            report.mismatches.append(
                f"{layer.name}: invalid SHiRA indices (outside its {layer.rows}x{layer.cols} weight)"
            )
            continue
        n_bad, exact_in_every_dtype = 0, True
        m = plan.mask_slice(layer.ckpt, layer.name)
        for rows, w, e, _ in shira_layer_rows(ckpt, layer, m, scale_of(scale, layer.name)):
            here = (idx[0] >= rows.start) & (idx[0] < rows.stop)
            block_idx = torch.stack([idx[0][here] - rows.start, idx[1][here]], dim=1)  # (k in block, 2)
            block_d = d[here]
            merged = w.clone()  # PEFT's own merge: dense += sparse (float32 deltas for 16-bit bases, its default)
            merged += torch.sparse_coo_tensor(
                block_idx.t(), block_d.float() if w.element_size() < 4 else block_d, w.shape, check_invariants=True
            )
            n_bad += int((_bits(merged) != _bits(e)).sum())
            exact_in_every_dtype &= bool(
                peft_merge_exact(w, e[block_idx[:, 0], block_idx[:, 1]], block_idx, block_d).all()
            )
        if n_bad or not exact_in_every_dtype:
            report.mismatches.append(
                f"{layer.name}: base + delta differs from the edit"
                + (f" in {n_bad} bytes" if n_bad else " when PEFT keeps the delta in the base dtype")
            )
    return report


def _read(path: Path, key: str) -> torch.Tensor:
    """One tensor of a safetensors file, the file mapped only while it is read.

    Why not one ``safe_open`` around the whole audit: its memory map keeps every page read so far in the process
    (a 2.4 GB adapter of an 8B model doubled the audit's peak RSS).
    """
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        return f.get_tensor(key)


def _verify_mathneuro(out: Path, mask: Any, scale: Setting) -> VerifyReport:
    report = VerifyReport(out, "mathneuro")
    cfg = _export_json(out / MATHNEURO_CONFIG, report)
    if report.mismatches:
        return report
    report.checked = report.edited = len(mask)
    if cfg.get("scale") != scale:
        report.mismatches.append(f"{MATHNEURO_CONFIG}: scale {cfg.get('scale')!r} is not {scale!r}")
    stored = out / str(cfg.get("mask_file"))
    if not stored.is_file():
        report.missing.append(str(cfg.get("mask_file")))
    elif Mask.load(stored).sha256 != mask.sha256 or cfg.get("mask_sha256") != mask.sha256:
        report.mismatches.append(f"{cfg.get('mask_file')}: not this mask (sha256 differs)")
    return report
