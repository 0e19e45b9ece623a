"""Edits with structure: a scale or a top_k per layer band and per component, written as a small map.

A recipe's ``edit.scale`` and ``mask.top_k`` are a number (every matrix the same, as before) or a map::

    edit:
      scale: {default: 1.05, mlp: 1.1, "layers 0-5": 1.0, "layers 6-11 q_proj": 1.2}

Keys: ``default`` (required: every matrix no other key matches), a part (``attention``, ``mlp``, or one
projection's own name such as ``q_proj`` or ``down_proj``), a layer band ``layers A-B`` (inclusive; ``layers A``
is one layer), or a band and a part (``layers 0-5 mlp``). A matrix takes the value of the most specific key that
matches it, in this order: band and projection, band and component, band, projection, component, ``default``.
Two keys of one rank whose bands overlap are refused (which one would win is not obvious); a key that matches no
edited matrix is refused when the map meets the model (:func:`unmatched_keys`), so a typo never passes silently.

One pure function decides a matrix's value (:func:`value_for`); every output (the in-memory edit, the checkpoint,
the SHiRA adapter, the GGUF, ``verify``) calls it through :func:`~.apply.scale_of`. No torch here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = [
    "Setting",
    "COMPONENTS",
    "MapKey",
    "parse_key",
    "check_map",
    "matrix_place",
    "value_for",
    "unmatched_keys",
    "setting_values",
    "show_setting",
]

# a number (every matrix) or a map from keys (``default``, ``mlp``, ``layers 0-5``, ...) to numbers
Setting = float | Mapping[str, float]

# the components a key may name, and the path segments that place a matrix in them
COMPONENTS = {
    "attention": ("attn", "attention", "self_attn", "self_attention", "cross_attn", "mixer"),
    "mlp": ("mlp", "feed_forward", "ffn", "ff", "block_sparse_moe", "experts"),
}
_KEY = re.compile(r"^(?:layers (\d+)(?:-(\d+))?)?(?:(?<=\d) )?([A-Za-z_][A-Za-z0-9_]*)?$")


@dataclass(frozen=True)
class MapKey:
    """One key of a map: its layer band (inclusive, or ``None``) and its part (a component, a projection's name,
    or ``None``)."""

    band: tuple[int, int] | None
    part: str | None

    @property
    def rank(self) -> int:
        """How specific the key is (higher wins): index in ``default, component, projection, band, band and
        component, band and projection``."""
        part = 0 if self.part is None else 1 if self.part in COMPONENTS else 2
        return part + (3 if self.band is not None else 0)

    def matches(self, layer: int | None, component: str | None, projection: str) -> bool:
        """Whether a matrix at ``layer`` in ``component`` named ``projection`` takes this key's value."""
        if self.band is not None and (layer is None or not self.band[0] <= layer <= self.band[1]):
            return False
        if self.part is None:
            return True
        return self.part == component if self.part in COMPONENTS else self.part == projection


def parse_key(key: str) -> MapKey:
    """A map key: ``default``, a part, ``layers A-B``, ``layers A``, or a band and a part (a ValueError for any
    other form, or a band whose end is before its start).

    Example:
        >>> parse_key("layers 0-5 mlp"), parse_key("q_proj"), parse_key("default")
        (MapKey(band=(0, 5), part='mlp'), MapKey(band=None, part='q_proj'), MapKey(band=None, part=None))
    """
    text = " ".join(str(key).split())
    if text == "default":
        return MapKey(None, None)
    found = _KEY.match(text)
    if found is None or not text or (found.group(1) is None and found.group(3) == "layers"):
        raise ValueError(
            f"key {key!r} is not default, a part (attention, mlp or a projection such as q_proj), "
            '"layers A-B" or "layers A-B <part>"'
        )
    start, end, part = found.group(1), found.group(2), found.group(3)
    band = None if start is None else (int(start), int(end if end is not None else start))
    if band is not None and band[1] < band[0]:
        raise ValueError(f'key {key!r}: the band ends before it starts; write "layers {band[1]}-{band[0]}"')
    return MapKey(band, part)


def check_map(spec: Mapping[str, float]) -> dict[str, MapKey]:
    """Every key of ``spec`` parsed, ``default`` present, and no two keys of one rank with overlapping bands (a
    ValueError naming the key(s) of the first problem).

    Example:
        >>> sorted(check_map({"default": 1.0, "mlp": 1.1}))
        ['default', 'mlp']
        >>> check_map({"default": 1.0, "layers 0-5": 1.1, "layers 4-8": 1.2})
        Traceback (most recent call last):
        ...
        ValueError: keys 'layers 0-5' and 'layers 4-8' overlap (layers 4-5); a matrix there would match both: make the bands disjoint
    """
    if not spec:
        raise ValueError("an empty map; give a number, or a map with a default such as {default: 1.1, mlp: 1.2}")
    keys = {k: parse_key(k) for k in spec}
    if not any(m.band is None and m.part is None for m in keys.values()):
        raise ValueError("a map needs a default (the value of every matrix no other key matches)")
    if sum(1 for m in keys.values() if m.band is None and m.part is None) > 1:
        raise ValueError("two keys both mean default; keep one")
    items = list(keys.items())
    for i, (a, ka) in enumerate(items):
        for b, kb in items[i + 1 :]:
            if ka.part == kb.part and ka.band is not None and kb.band is not None:
                lo, hi = max(ka.band[0], kb.band[0]), min(ka.band[1], kb.band[1])
                if lo <= hi:
                    where = f"layer {lo}" if lo == hi else f"layers {lo}-{hi}"
                    raise ValueError(
                        f"keys {a!r} and {b!r} overlap ({where}); a matrix there would match both: make the "
                        "bands disjoint"
                    )
    return keys


def matrix_place(name: str) -> tuple[int | None, str | None, str]:
    """``(layer, component, projection)`` of a parameter name: the first all-digit path segment (``None``: the
    matrix is in no layer, e.g. ``lm_head``), ``attention`` / ``mlp`` / ``None`` from its path segments
    (:data:`COMPONENTS`), and its own name (the segment before ``weight``).

    Example:
        >>> matrix_place("model.layers.3.self_attn.q_proj.weight")
        (3, 'attention', 'q_proj')
        >>> matrix_place("transformer.h.0.mlp.c_fc.weight"), matrix_place("lm_head.weight")
        ((0, 'mlp', 'c_fc'), (None, None, 'lm_head'))
    """
    parts = name.split(".")
    if len(parts) > 1 and parts[-1] in ("weight", "bias"):
        parts = parts[:-1]
    layer = next((int(p) for p in parts if p.isdigit()), None)
    component = None
    for p in parts[:-1]:
        component = next((c for c, segs in COMPONENTS.items() if p.lower() in segs), None)
        if component is not None:
            break
    return layer, component, parts[-1]


def value_for(setting: Setting, name: str) -> float:
    """The value (scale or top_k) of the matrix ``name`` under ``setting``: the number itself, or the map's most
    specific matching key (module docstring).

    Example:
        >>> spec = {"default": 1.05, "mlp": 1.1, "layers 0-1": 1.0, "layers 0-1 down_proj": 0.0}
        >>> [value_for(spec, f"model.layers.{i}.mlp.{p}.weight") for i, p in ((0, "up_proj"), (0, "down_proj"), (2, "up_proj"))]
        [1.0, 0.0, 1.1]
        >>> value_for(spec, "model.layers.2.self_attn.q_proj.weight"), value_for(1.2, "anything")
        (1.05, 1.2)
    """
    if not isinstance(setting, Mapping):
        return float(setting)
    layer, component, projection = matrix_place(name)
    best: tuple[int, float] | None = None
    for key, value in setting.items():
        k = parse_key(key)
        if k.matches(layer, component, projection) and (best is None or k.rank > best[0]):
            best = (k.rank, float(value))
    if best is None:  # check_map refuses a map without a default; a map built in code may lack one
        raise ValueError(f"no key of the map matches {name!r} and it has no default")
    return best[1]


def unmatched_keys(setting: Setting, names: Iterable[str]) -> list[str]:
    """The keys of a map that match none of the matrices ``names`` (``default`` never counts): a typo such as
    ``q_porj`` or a band past the model's last layer.

    Example:
        >>> unmatched_keys({"default": 1, "q_porj": 2, "mlp": 3}, ["model.layers.0.mlp.up_proj.weight"])
        ['q_porj']
    """
    if not isinstance(setting, Mapping):
        return []
    places = [matrix_place(n) for n in names]
    out = []
    for key in setting:
        k = parse_key(key)
        if (k.band is not None or k.part is not None) and not any(k.matches(*p) for p in places):
            out.append(key)
    return out


def setting_values(setting: Setting) -> list[float]:
    """The distinct values of a setting, ascending (a top_k map needs one mask per value).

    Example:
        >>> setting_values({"default": 0.05, "mlp": 0.01, "q_proj": 0.05}), setting_values(0.1)
        ([0.01, 0.05], [0.1])
    """
    values = setting.values() if isinstance(setting, Mapping) else [setting]
    return sorted({float(v) for v in values})


def show_setting(setting: Setting) -> str:
    """A setting as one short text: ``1.1``, or ``default 1.05, mlp 1.1, layers 0-5 1`` (keys by rank).

    Example:
        >>> show_setting({"layers 0-5": 1.0, "default": 1.05, "mlp": 1.1}), show_setting(0.05)
        ('default 1.05, mlp 1.1, layers 0-5 1', '0.05')
    """
    if not isinstance(setting, Mapping):
        return f"{float(setting):g}"
    ranked = sorted(setting.items(), key=lambda kv: (parse_key(kv[0]).rank, parse_key(kv[0]).band or (-1, -1)))
    return ", ".join(f"{' '.join(str(k).split())} {float(v):g}" for k, v in ranked)
