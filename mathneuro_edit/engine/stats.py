"""Calibration statistics: the :class:`ActivationStats` artifact (O(d_in) per weight) and its file format."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
from safetensors import SafetensorError, safe_open

from ..errors import InputError
from ..util.outdir import disk_errors
from ..util.tensor_files import save_file  # deterministic bytes, umask permissions, exclusive temporary file
from .targets import Target

__all__ = ["ActivationStats", "read_safetensors_with_meta"]

_FORMAT = "mathneuro-edit/stats/v1"


def write_safetensors_with_meta(
    path: str | Path, tensors: dict[str, torch.Tensor], fmt: str, header: dict[str, Any]
) -> Path:
    """Write the tensors and ``{"format": fmt, "mathneuro_edit": json(header)}`` to ``path`` atomically, for
    :func:`read_safetensors_with_meta` (a full disk is one line: ``util.outdir.disk_errors``); returns ``path``."""
    path = Path(path)
    with disk_errors(path, sum(t.numel() * t.element_size() for t in tensors.values())):
        save_file(tensors, path, metadata={"format": fmt, "mathneuro_edit": json.dumps(header)})
    return path


def read_safetensors_with_meta(
    path: str | Path, expected_format: str, what: str
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Read a mathneuro-edit safetensors artifact: its tensors and its JSON header (one line when the file is
    missing, is not a safetensors file, or is not a ``what`` file of ours)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such {what} file; check the path")
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            if meta.get("format") != expected_format:
                raise InputError(
                    f"{path}: not a mathneuro-edit {what} file (format {meta.get('format')!r}, "
                    f"expected {expected_format!r}); pass the file written by the {what} step"
                )
            tensors = {k: f.get_tensor(k) for k in f.keys()}
        header = json.loads(meta["mathneuro_edit"])
        if not isinstance(header, dict):
            raise ValueError(f"its header is a {type(header).__name__}, not a mapping")
    except InputError:
        raise
    except RecursionError:  # its JSON header nested deeper than a parser goes
        raise InputError(f"{path}: unreadable {what} file (its header is nested too deep); recreate it") from None
    except (SafetensorError, OSError, ValueError, KeyError) as e:
        raise InputError(f"{path}: unreadable {what} file ({e}); the file is corrupt: recreate it") from None
    return tensors, header


def _impossible_values(stats: ActivationStats) -> str | None:
    """Why the statistics cannot be a calibration's (``None`` when they can): sums of norms and of squares are
    finite floats >= 0, token counts integers >= 0.

    Why checked on load: a negative sum made the mask's histogram selection an internal RuntimeError ("bincount
    only supports non-negative inputs"), and integer or negative values gave a mask silently.
    """
    for kind, d in (("norm sum", stats.norm_sum), ("square sum", stats.sq_sum)):
        for name, t in d.items():
            if not t.is_floating_point():
                return f"{name}: its {kind} is {str(t.dtype).removeprefix('torch.')}, not a float"
            if t.numel() and not bool((torch.isfinite(t) & (t >= 0)).all()):
                return f"{name}: its {kind} holds a negative or non-finite value"
    for name, t in stats.token_count.items():
        if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
            return f"{name}: its token count is {str(t.dtype).removeprefix('torch.')}, not an integer"
        if t.numel() and bool((t < 0).any()):
            return f"{name}: its token count is negative"
    return None


@dataclass
class ActivationStats:
    """Per-target input statistics from a calibration run.

    Attributes:
        norm_sum: ``name -> (groups, d_in)`` float32: ``sum over samples s of ||X_s[:, j]||_2`` (the paper's).
            For fused experts, each group (expert) sees only the tokens routed to it.
        sq_sum: ``name -> (groups, d_in)`` float32: sum of squares of X over all tokens (Wanda's).
        token_count: ``name -> (groups,)`` int64: tokens that reached each group.
        targets: ``name -> Target`` (kind, shape, layout).
        meta: provenance: samples, tokens, truncated samples, text and model fingerprints, dtype, versions.
    """

    norm_sum: dict[str, torch.Tensor]
    sq_sum: dict[str, torch.Tensor]
    token_count: dict[str, torch.Tensor]
    targets: dict[str, Target]
    meta: dict[str, Any] = field(default_factory=dict)

    def statistic(self, name: str, kind: Literal["l2", "wanda"] = "l2") -> torch.Tensor:
        """The per-feature statistic of ``name`` as ``(groups, d_in)`` float32.

        ``"l2"``: the paper's sum of per-sample L2 norms; ``"wanda"``: ``sqrt(sum of squares)`` over all tokens.
        """
        return self.norm_sum[name] if kind == "l2" else self.sq_sum[name].sqrt()

    @property
    def sha256(self) -> str:
        """Content hash of the statistics (tensors, targets and provenance)."""
        h = hashlib.sha256(_FORMAT.encode())
        for name in sorted(self.norm_sum):
            for d in (self.norm_sum, self.sq_sum, self.token_count):
                h.update(name.encode())
                h.update(d[name].contiguous().numpy().tobytes())
        h.update(json.dumps(self._header(), sort_keys=True).encode())
        return h.hexdigest()

    def _header(self) -> dict[str, Any]:
        targets = {
            n: {
                "kind": t.kind,
                "module": t.module_name,
                "shape": list(t.shape),
                "transposed": t.transposed,
                "role": t.role,
            }
            for n, t in self.targets.items()
        }
        return {"targets": targets, "meta": self.meta}

    def save(self, path: str | Path) -> Path:
        """Write a safetensors file (tensors + JSON metadata), conventionally ``*.stats.safetensors``; atomic."""
        tensors: dict[str, torch.Tensor] = {}
        for name in self.norm_sum:
            for kind, d in (("norm", self.norm_sum), ("sq", self.sq_sum), ("count", self.token_count)):
                tensors[f"{kind}/{name}"] = d[name].contiguous()
        return write_safetensors_with_meta(path, tensors, _FORMAT, self._header())

    @classmethod
    def load(cls, path: str | Path) -> ActivationStats:
        """Read a file written by :meth:`save` (exact round trip); one line for a missing, corrupt or other file."""
        tensors, header = read_safetensors_with_meta(path, _FORMAT, "statistics")
        try:
            targets = {
                n: Target(n, d["kind"], d["module"], tuple(d["shape"]), d["transposed"], d["role"])
                for n, d in header["targets"].items()
            }
            meta = header["meta"]
            if not isinstance(meta, dict):
                raise TypeError("meta is not a mapping")
            norm, sq, count = ({n: tensors[f"{kind}/{n}"] for n in targets} for kind in ("norm", "sq", "count"))
            stats = cls(norm_sum=norm, sq_sum=sq, token_count=count, targets=targets, meta=meta)
        except (KeyError, TypeError, ValueError, AttributeError) as e:  # a header that is not ours as written
            raise InputError(
                f"{path}: malformed statistics header ({type(e).__name__}: {str(e)[:80]}); the file is "
                "corrupt or was edited: recreate it with `mathneuro-edit calibrate`"
            ) from None
        why = _impossible_values(stats)
        if why is not None:
            raise InputError(
                f"{path}: {why}, which no calibration gives; the file is corrupt or was edited: recreate it "
                "with `mathneuro-edit calibrate`"
            )
        return stats

    def merge(self, other: ActivationStats) -> ActivationStats:
        """Sum two runs' statistics over disjoint samples of the same model (e.g. data-parallel ranks).

        The text fingerprint of the result is recorded as the list of both inputs' fingerprints.
        """
        if set(self.targets) != set(other.targets) or self.meta.get("model_fingerprint") != other.meta.get(
            "model_fingerprint"
        ):
            raise InputError("cannot merge statistics of different models or targets; calibrate with the same setup")
        meta = dict(self.meta)
        for key in ("num_samples", "num_tokens", "truncated_samples"):
            meta[key] = self.meta.get(key, 0) + other.meta.get(key, 0)
        meta["texts_sha256"] = [self.meta.get("texts_sha256"), other.meta.get("texts_sha256")]
        return ActivationStats(
            norm_sum={n: self.norm_sum[n] + other.norm_sum[n] for n in self.norm_sum},
            sq_sum={n: self.sq_sum[n] + other.sq_sum[n] for n in self.sq_sum},
            token_count={n: self.token_count[n] + other.token_count[n] for n in self.token_count},
            targets=dict(self.targets),
            meta=meta,
        )

    def summary(self) -> Mapping[str, Any]:
        """Counts for display: samples, tokens, targets, and bytes of statistics."""
        nbytes = sum(t.numel() * t.element_size() for d in (self.norm_sum, self.sq_sum) for t in d.values())
        return {
            "samples": self.meta.get("num_samples"),
            "tokens": self.meta.get("num_tokens"),
            "truncated": self.meta.get("truncated_samples"),
            "targets": len(self.targets),
            "bytes": nbytes,
        }
