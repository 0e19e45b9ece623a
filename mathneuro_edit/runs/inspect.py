"""Human-readable views of artifacts: per-layer tables of masks and statistics, and the layer-distribution plot.

The plot is the paper's layer-distribution figure: the fraction of each layer's target weights a mask selects,
by layer and module type. It needs matplotlib (the ``plot`` extra).
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path
from typing import Any

from ..engine.mask import Mask
from ..engine.stats import ActivationStats
from ..errors import InputError
from ..util.console import terminal_safe
from ..util.files import atomic_writer

__all__ = [
    "load_artifact",
    "mask_table",
    "stats_table",
    "layer_fractions",
    "plot_layer_distribution",
    "figure_format",
    "pyplot",
    "save_figure",
]

_LAYER = re.compile(r"\.(\d+)\.")


def pyplot(*, required: bool = True) -> Any:
    """matplotlib.pyplot on the file-only Agg backend; when it is missing, ``None`` or (``required``) an
    InputError naming the ``plot`` extra."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only: no display needed
        import matplotlib.pyplot as plt
    except ImportError:
        if required:
            raise InputError("plots need matplotlib: pip install matplotlib (the plot extra)") from None
        return None
    return plt


# the endings matplotlib writes without an extra package (a name without one is a PNG)
_FIGURE_FORMATS = ("png", "svg", "svgz", "pdf", "jpg", "jpeg", "webp", "tif", "tiff", "eps", "ps")


def figure_format(path: str | Path) -> str:
    """The image format a figure file name asks for (``png`` without an ending).

    Raises:
        InputError: an ending that is no image format (``--plot model.safetensors``: matplotlib's ValueError was
            an internal error, after the table had been printed).

    Example:
        >>> figure_format("layers.svg"), figure_format("layers")
        ('svg', 'png')
    """
    fmt = Path(path).suffix.lstrip(".").lower() or "png"
    if fmt not in _FIGURE_FORMATS:
        raise InputError(
            f"{path}: .{fmt} is not an image format; name the figure with one of "
            f"{', '.join('.' + f for f in _FIGURE_FORMATS[:4])}, ..."
        )
    return fmt


def save_figure(fig: Any, path: str | Path) -> Path:
    """Lay out, save as PNG (120 dpi) and close a matplotlib figure; returns the path.

    Atomic: written to an exclusive temporary file beside ``path`` and renamed onto it when complete (never half a
    PNG in its place, never through a symbolic link: :func:`~mathneuro_edit.util.files.atomic_writer`).
    """
    path = Path(path)
    fmt = figure_format(path)
    fig.tight_layout()
    try:
        with atomic_writer(path) as f:
            fig.savefig(f, dpi=120, format=fmt)
    finally:
        pyplot().close(fig)  # free the figure: sweeps make many
    return path


def load_artifact(path: str | Path) -> tuple[str, Any]:
    """Open a mask or statistics file: ``("mask", Mask)`` or ``("stats", ActivationStats)``; neither: InputError."""
    from safetensors import SafetensorError, safe_open

    p = Path(path)
    if not p.is_file():
        raise InputError(f"{p}: no such file; pass a *.safetensors mask or statistics file")
    try:
        with safe_open(str(p), framework="pt") as f:
            fmt = (f.metadata() or {}).get("format", "")
    except (SafetensorError, OSError) as e:
        with p.open("rb") as f:  # a model file given by mistake is named as such, not called corrupt
            kind = {b"GGUF": "a GGUF model file"}.get(f.read(4), f"not a readable safetensors file ({e})")
        raise InputError(f"{p}: {kind}; inspect reads a mask (mask.safetensors) or a statistics file") from None
    if fmt.startswith("mathneuro-edit/mask/"):
        return "mask", Mask.load(p)
    if fmt.startswith("mathneuro-edit/stats/"):
        return "stats", ActivationStats.load(p)
    raise InputError(f"{p}: not a mathneuro-edit mask or statistics file (format {fmt!r})")


def _module_type(name: str) -> str:
    """``model.layers.3.self_attn.q_proj.weight`` -> ``self_attn.q_proj``; experts keep their parameter name."""
    m = _LAYER.search(name)
    parts = (name[m.end() :] if m else name).split(".")
    return ".".join(parts[:-1][-2:] if parts[-1] == "weight" else parts[-2:])


def layer_fractions(mask: Any) -> dict[str, dict[int, float]]:
    """Selected fraction per module type and layer: ``{module type: {layer: fraction}}`` (layer-less tensors skipped)."""
    sel: dict[str, dict[int, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    for name, (s, t) in mask.counts().items():
        if (m := _LAYER.search(name)) is None:
            continue
        cell = sel[_module_type(name)][int(m.group(1))]
        cell[0] += s
        cell[1] += t
    return {mt: {layer: s / t for layer, (s, t) in sorted(d.items())} for mt, d in sel.items()}


def mask_table(mask: Any) -> str:
    """A text table: one row per tensor (selected, total, percent), then totals and provenance."""
    # a mask file may be someone else's: its names and provenance are shown escaped (never an ESC sequence or a
    # line of their own on the terminal)
    counts = {terminal_safe(n): c for n, c in mask.counts().items()}
    width = max((len(n) for n in counts), default=10)
    lines = [f"{'tensor':<{width}}  {'selected':>10}  {'total':>12}  {'percent':>8}"]
    for name, (s, t) in counts.items():
        lines.append(f"{name:<{width}}  {s:>10,}  {t:>12,}  {100 * s / t:>7.3f}%")
    s, t = mask.total()
    lines.append(f"{'TOTAL':<{width}}  {s:>10,}  {t:>12,}  {100 * s / max(t, 1):>7.3f}%")
    meta = ", ".join(
        f"{k}={terminal_safe(str(v))}" for k, v in mask.meta.items() if k in ("method", "top_k", "granularity", "seed")
    )
    lines.append(f"mask sha256 {mask.sha256}  ({meta})")
    return "\n".join(lines)


def mask_dict(mask: Any) -> dict[str, Any]:
    """The mask as JSON data (``inspect --json``): per tensor selected/total, totals, sha256 and provenance."""
    s, t = mask.total()
    return {
        "kind": "mask",
        "sha256": mask.sha256,
        "selected": s,
        "total": t,
        "meta": {k: v for k, v in mask.meta.items() if isinstance(v, (str, int, float, bool)) or v is None},
        "tensors": {name: {"selected": a, "total": b} for name, (a, b) in mask.counts().items()},
    }


def stats_dict(stats: Any) -> dict[str, Any]:
    """Statistics as JSON data (``inspect --json``): per target kind, shape, tokens and mean L2, then the summary."""
    return {
        "kind": "stats",
        "sha256": stats.sha256,
        "summary": stats.summary(),
        "targets": {
            name: {
                "kind": t.kind,
                "shape": list(t.stat_shape),
                "tokens": int(stats.token_count[name].sum()),
                "mean_l2": float(stats.norm_sum[name].mean()),
            }
            for name, t in stats.targets.items()
        },
    }


def stats_table(stats: Any) -> str:
    """A text table: one row per target (kind, groups x d_in, tokens seen, mean L2 statistic), then provenance."""
    rows = stats_dict(stats)["targets"]  # the same numbers as inspect --json
    width = max((len(terminal_safe(n)) for n in rows), default=10)
    lines = [f"{'target':<{width}}  {'kind':<8}  {'shape':>10}  {'tokens':>10}  {'mean l2':>10}"]
    for name, t in rows.items():
        g, d = t["shape"]
        lines.append(
            f"{terminal_safe(name):<{width}}  {terminal_safe(str(t['kind'])):<8}  {f'{g}x{d}':>10}  "
            f"{t['tokens']:>10,}  {t['mean_l2']:>10.4g}"
        )
    s = stats.summary()
    lines.append(
        f"{s['samples']} samples, {s['tokens']} tokens, {s['truncated']} truncated, {s['targets']} targets, "
        f"{s['bytes']:,} bytes; sha256 {stats.sha256}"
    )
    return "\n".join(lines)


def plot_layer_distribution(mask: Any, path: str | Path) -> Path:
    """Save a PNG of the selected fraction per layer, one line per module type (the paper's layer figure)."""
    plt = pyplot()
    fractions = layer_fractions(mask)
    if not fractions:
        raise InputError("the mask has no per-layer tensors to plot")
    fig, ax = plt.subplots(figsize=(8.5, 4.2))
    colors, styles, markers = plt.get_cmap("tab10"), ["-", "--", "-.", ":"], "osD^vP*Xh<>p"
    # distinguishable lines: colour, dash and marker all change from one module type to the next
    for i, (module_type, by_layer) in enumerate(sorted(fractions.items())):
        style = {"color": colors(i % 10), "ls": styles[i % len(styles)], "marker": markers[i % len(markers)]}
        ax.plot(list(by_layer), [100 * v for v in by_layer.values()], ms=5, lw=1.4, label=module_type, **style)
    ax.set_xlabel("layer")
    ax.xaxis.get_major_locator().set_params(integer=True)  # layers are whole numbers
    ax.set_ylabel("selected (% of the module's weights)")
    ax.set_ylim(bottom=0)
    ax.set_title(f"{mask.meta.get('method', 'mask')} top_k={mask.meta.get('top_k')}: selected weights per layer")
    # outside the axes, right: the legend never hides a line
    ax.legend(
        fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0, title="module", title_fontsize=7
    )
    ax.grid(alpha=0.3)
    return save_figure(fig, path)
