"""Whether the edit survives quantization: the edited GGUF against the base's GGUF of the same type and quantizer.

The counts, defined in docs/gguf.md ("Survival"): per weight matrix, the *edited* entries (whose value in the
edited float GGUF differs from the base's), how many of them *survived* quantization (their dequantized values still
differ from the base's quantized file's), the change *delivered* along the intended direction as a fraction of the
intended change, and the *collateral* entries the edit did not touch whose quantized value changed anyway.

Every type llama.cpp writes, K-quants included, is read back by ``gguf.quants.dequantize``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "MOST_GONE",
    "SURVIVAL_NAME",
    "survival_counts",
    "add_counts",
    "share",
    "gguf_survival",
    "estimate_survival",
    "gone_line",
    "measure_survival",
]

MOST_GONE = 0.5  # below this share of edited entries surviving, "most of the edit is gone"
_FIELDS = ("entries", "edited", "survived", "collateral", "intended", "delivered_along")


def survival_counts(base: Any, edited: Any, base_q: Any, edited_q: Any) -> dict[str, float]:
    """The survival counts of one tensor: ``base``/``edited`` are the float values that were quantized,
    ``base_q``/``edited_q`` the dequantized values of the two quantized files (same shape).

    Returns:
        ``{"entries", "edited", "survived", "collateral", "intended", "delivered_along"}``: counts of entries,
        ``intended = sum |e - b|`` and ``delivered_along = sum sign(e - b) * (q(e) - q(b))`` over edited entries.

    Example:
        >>> b, e = np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.2, 3.3])
        >>> survival_counts(b, e, np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.0, 3.5]))["survived"]
        1
    """
    b, e = np.asarray(base, np.float64).ravel(), np.asarray(edited, np.float64).ravel()
    qb, qe = np.asarray(base_q, np.float64).ravel(), np.asarray(edited_q, np.float64).ravel()
    if not (b.shape == e.shape == qb.shape == qe.shape):
        raise ValueError(f"survival_counts: shapes differ {b.shape} {e.shape} {qb.shape} {qe.shape}")
    hit = e != b
    moved = qe != qb
    d = e[hit] - b[hit]
    return {
        "entries": int(b.size),
        "edited": int(hit.sum()),
        "survived": int((hit & moved).sum()),
        "collateral": int((~hit & moved).sum()),
        "intended": float(np.abs(d).sum()),
        "delivered_along": float((np.sign(d) * (qe[hit] - qb[hit])).sum()),
    }


def add_counts(parts: Iterable[Mapping[str, float]]) -> dict[str, float]:
    """The sum of several :func:`survival_counts` (a model's total)."""
    parts = list(parts)
    return {k: sum(p[k] for p in parts) for k in _FIELDS}


def share(counts: Mapping[str, float]) -> dict[str, float | None]:
    """``{"survived_share", "delivered"}`` of counts (``None`` without edited entries).

    Example:
        >>> share({"edited": 4, "survived": 1, "intended": 2.0, "delivered_along": 1.0})
        {'survived_share': 0.25, 'delivered': 0.5}
    """
    edited, intended = counts["edited"], counts["intended"]
    return {
        "survived_share": counts["survived"] / edited if edited else None,
        "delivered": counts["delivered_along"] / intended if intended else None,
    }


def gone_line(qtype: str, counts: Mapping[str, float]) -> str | None:
    """The one line a run and the card say when most of the edit is gone in a ``qtype`` file, else ``None``.

    Example:
        >>> gone_line("Q4_0", {"edited": 10, "survived": 3, "intended": 1.0, "delivered_along": 0.2})
        'most of the edit is gone in Q4_0: 3 of 10 edited weights (30.0%) still differ from the base in Q4_0 (delivered 20% of the intended change)'
    """
    s = share(counts)
    if s["survived_share"] is None or s["survived_share"] >= MOST_GONE:
        return None
    delivered = f" (delivered {s['delivered']:.0%} of the intended change)" if s["delivered"] is not None else ""
    return (
        f"most of the edit is gone in {qtype}: {int(counts['survived']):,} of {int(counts['edited']):,} edited weights "
        f"({s['survived_share']:.1%}) still differ from the base in {qtype}{delivered}"
    )


def _values(t: Any) -> np.ndarray:
    import gguf

    return np.asarray(gguf.quants.dequantize(np.asarray(t.data), t.tensor_type), dtype=np.float32).ravel()


def gguf_survival(base_float: Path, edited_float: Path, base_q: Path, edited_q: Path) -> dict[str, Any]:
    """The survival of the edit in ``edited_q`` against ``base_q`` (same type, same quantizer), the edited entries
    read from the float files both were quantized from; all four dequantized with the gguf package.

    Returns:
        ``{"tensors": {gguf name: counts + shares}, "total": counts + shares}`` over the matrices the edit touched
        (the total over every matrix: its collateral too).
    """
    import gguf

    paths = (base_float, edited_float, base_q, edited_q)
    files = [{t.name: t for t in gguf.GGUFReader(str(p)).tensors if len(t.shape) > 1} for p in paths]
    per: dict[str, dict[str, Any]] = {}
    every = []
    for name in files[1]:
        if not all(name in f for f in files):
            raise ValueError(f"gguf_survival: {name} is not in all four files")
        counts = survival_counts(*(_values(f[name]) for f in files))
        every.append(counts)
        if counts["edited"]:
            per[name] = {**counts, **share(counts)}
    total = add_counts(every)
    return {"tensors": per, "total": {**total, **share(total)}}


def estimate_survival(triples: Iterable[tuple[Any, Any, str]]) -> dict[str, float]:
    """The survival estimated before any file is written, for the types the gguf package quantizes (Q8_0, Q4_0,
    Q4_1, Q5_0, Q5_1: the bytes the run writes): ``triples`` are ``(base, edited, type)`` float32 matrices (last
    dimension a multiple of 32; a row permutation, such as llama.cpp's q/k one, changes no block) and the type
    each is stored in.

    Returns:
        The total counts and shares (:func:`survival_counts`, :func:`share`).
    """
    import gguf

    def q(x: np.ndarray, qtype: str) -> np.ndarray:
        t = gguf.GGMLQuantizationType[qtype]
        return gguf.quants.dequantize(gguf.quants.quantize(np.ascontiguousarray(x, np.float32), t), t)

    total = add_counts(survival_counts(b, e, q(b, t), q(e, t)) for b, e, t in triples)
    return {**total, **share(total)}


SURVIVAL_NAME = "gguf_survival.json"  # beside the GGUF files: each quantized file's survival, as the run measured it


def measure_survival(
    checkpoint: str | Path,
    base: str | Path,
    mask: Any,
    files: Mapping[str, Path],
    *,
    source: str,
    dtype: str | None = None,
    trust_remote_code: bool = False,
    with_base: Callable[[Mapping[str, Path]], None] | None = None,
) -> dict[str, Any]:
    """The survival of the edit in each quantized file of ``files`` (``{type: path}`` written from
    ``checkpoint``), measured as docs/gguf.md says (the base written the same way, from the float ``source`` GGUF,
    at ``dtype``). ``with_base`` receives the base's files (``{type: path}``, every type of ``files``) before their
    temporary folder is removed: the run evaluates each pair in llama.cpp there.

    Returns:
        ``{"source": source, "quantizer": ..., "files": {file name: {"type", "tensors", "total"}}}`` (an empty
        ``files`` when every file is a float type).
    """
    import tempfile

    from .checkpoint_writer import export_checkpoint
    from .gguf_quantize import LLAMA_CPP_TYPES, find_quantizer, quantizer_version, write_gguf_types
    from .gguf_writer import gguf_filename, write_gguf

    folder = Path(checkpoint)
    quantized = [t for t in files if t not in ("F32", "F16", "BF16")]
    kquant = next((t for t in quantized if t in LLAMA_CPP_TYPES), None)
    out: dict[str, Any] = {"source": source, "bytes": {Path(p).name: Path(p).stat().st_size for p in files.values()}}
    out["files"] = {}
    if kquant is not None:
        out["quantizer"] = quantizer_version(find_quantizer(kquant))
    if not quantized and with_base is None:
        return out
    with tempfile.TemporaryDirectory(dir=folder.parent, prefix=".gguf-survival-") as tmp:
        base_ck = export_checkpoint(
            base, mask, 1.0, Path(tmp) / "base", dtype=dtype, trust_remote_code=trust_remote_code
        )
        base_files = write_gguf_types(base_ck, list(dict.fromkeys([source, *files])), source=source)
        if quantized:
            edited_src = files.get(source) or write_gguf(folder, Path(tmp) / gguf_filename(source), source)
        for t in quantized:
            found = gguf_survival(base_files[source], edited_src, base_files[t], files[t])
            out["files"][Path(files[t]).name] = {"type": t, **found}
        if with_base is not None:
            with_base({t: base_files[t] for t in files})
    return out
