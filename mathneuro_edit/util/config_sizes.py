"""The sizes a model's ``config.json`` may state, checked before anything is built from them.

A ``config.json`` may come from someone else. Its sizes decide how many layers a meta-device model gets, how much
memory the plan promises and how many tensors a GGUF writer loops over: ``num_hidden_layers: 1000000000`` makes
building the model hang, ``hidden_size: 1099511627776`` an internal error. :func:`check_config_sizes` refuses, in
one line naming the key, any size that is not an integer in the range a real model has (the largest released
models are two orders of magnitude inside every bound).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import InputError
from .reading import read_json

__all__ = [
    "SIZE_LIMITS",
    "VALUE_KINDS",
    "MAX_CONFIG_BYTES",
    "check_config_sizes",
    "check_config_file_sizes",
    "read_model_json",
    "model_json_object",
    "known_rope_types",
]

MAX_CONFIG_BYTES = 16 * 1024 * 1024  # the largest released config.json files are tens of KB
# key -> (smallest, largest) a model may state; the same keys in a sub-config (text_config, ...) too
SIZE_LIMITS: dict[str, tuple[int, int]] = {
    **dict.fromkeys(("num_hidden_layers", "n_layer", "num_layers"), (1, 10_000)),
    **dict.fromkeys(("hidden_size", "n_embd", "d_model"), (1, 1 << 20)),
    **dict.fromkeys(("intermediate_size", "moe_intermediate_size", "n_inner"), (1, 1 << 22)),
    "vocab_size": (1, 1 << 24),
    **dict.fromkeys(("num_attention_heads", "n_head", "num_key_value_heads", "head_dim"), (1, 1 << 14)),
    **dict.fromkeys(("num_local_experts", "num_experts", "n_routed_experts", "num_experts_per_tok"), (0, 1 << 16)),
    # Llama 4 Scout's 10M context is 6x inside
    **dict.fromkeys(("max_position_embeddings", "n_positions"), (1, 1 << 26)),
}


# the names ``getattr(torch, name)`` is a dtype for (transformers reads ``dtype`` so: ``float99`` was an internal
# AttributeError), and ``auto``
_DTYPE_NAMES = frozenset(
    "auto float double half bfloat16 float16 float32 float64 bool complex64 complex128 int8 int16 int32 int64 uint8 "
    "uint16 uint32 uint64 short int long float8_e4m3fn float8_e5m2 float8_e4m3fnuz float8_e5m2fnuz float8_e8m0fnu "
    "float4_e2m1fn_x2".split()
)
# rope types every transformers version since 4.45 builds (when transformers is not importable here)
_ROPE_TYPES = frozenset({"default", "su", "mrope", "linear", "dynamic", "yarn", "longrope", "llama3"})
# keys transformers builds layers from whose type it checks late or not at all (``rope_theta: "abc"`` reached the
# rotary embedding as a string: an internal TypeError; ``model_type: ["llama"]`` an internal "unhashable type"):
# key -> (what it must be, the check), in the config or a sub-config (``rope_parameters``, ``text_config``)
_FINITE = lambda v: not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)  # noqa: E731
_POSITIVE = ("a positive number", lambda v: _FINITE(v) and v > 0)
_DTYPE = ("a torch dtype name (bfloat16, float16, float32, ...)", lambda v: isinstance(v, str) and v in _DTYPE_NAMES)
VALUE_KINDS: dict[str, tuple[str, Any]] = {
    **dict.fromkeys(("rope_theta", "rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon", "factor"), _POSITIVE),
    "partial_rotary_factor": ("a number in (0, 1]", lambda v: _FINITE(v) and 0 < v <= 1),
    "model_type": ("a name (a string)", lambda v: isinstance(v, str) and v != ""),
    "architectures": ("a list of class names", lambda v: isinstance(v, list) and all(isinstance(a, str) for a in v)),
    "tie_word_embeddings": ("true or false", lambda v: isinstance(v, bool)),
    # the types every version has need no import of transformers (~20 MB a GGUF export would carry otherwise)
    "rope_type": (
        "a rope type transformers knows",
        lambda v: isinstance(v, str) and (v in _ROPE_TYPES or v in known_rope_types()),
    ),
    **dict.fromkeys(("dtype", "torch_dtype"), _DTYPE),
}


def known_rope_types() -> frozenset[str]:
    """The ``rope_type`` values the installed transformers builds (``default`` and its ``ROPE_INIT_FUNCTIONS``):
    an unknown one was an internal ``KeyError`` when the rotary embedding was built (issue 48).

    Example:
        >>> {"default", "llama3", "yarn"} <= known_rope_types() and "weird" not in known_rope_types()
        True
    """
    try:
        from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    except Exception:  # noqa: BLE001 - an older or partial transformers: the types every version has
        return _ROPE_TYPES
    # su: Phi-3's older name of longrope, which transformers converts; mrope: Qwen2-VL's, read by its own classes
    return frozenset({"default", "su", "mrope", *ROPE_INIT_FUNCTIONS})


def _value_problem(key: str, value: Any, vocab: Any) -> str | None:
    """What is wrong with one (not null) config value (``None``: nothing), by its key's rule."""
    if key in VALUE_KINDS:
        what, ok = VALUE_KINDS[key]
        return None if ok(value) else f"is not {what}"
    if key == "pad_token_id":  # nn.Embedding(padding_idx=...) asserts: 10**12 was an internal AssertionError
        if isinstance(value, bool) or not isinstance(value, int):
            return "is not a token id (an integer)"
        if isinstance(vocab, int) and not isinstance(vocab, bool) and not -vocab <= value < vocab:
            return f"is not a token id of its {vocab:,} (vocab_size)"
    elif key in SIZE_LIMITS:
        low, high = SIZE_LIMITS[key]
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            return f"is not a size a model has (an integer from {low} to {high:,})"
    return None


def check_config_sizes(config: Mapping[str, Any], where: str = "config.json") -> None:
    """Refuse a size of ``config`` (or of a sub-config, e.g. ``text_config``) outside :data:`SIZE_LIMITS`, and a
    value of :data:`VALUE_KINDS` of the wrong kind, in one line naming the key, its value and what it must be.

    Example:
        >>> check_config_sizes({"num_hidden_layers": 1e9})
        Traceback (most recent call last):
        ...
        mathneuro_edit.errors.InputError: config.json: num_hidden_layers: 1000000000.0 is not a size a model has (an integer from 1 to 10,000); this config.json is corrupt or edited: use the model's own
    """
    stack: list[tuple[str, Mapping[str, Any], int]] = [("", config, 0)]
    while stack:
        prefix, node, depth = stack.pop()
        for key, value in node.items():
            if isinstance(value, Mapping) and depth < 8:
                stack.append((f"{prefix}{key}.", value, depth + 1))
                continue
            kind = "rope_type" if key == "type" and prefix.endswith("rope_scaling.") else key  # its older name
            if value is not None and (why := _value_problem(kind, value, node.get("vocab_size"))):
                raise InputError(
                    f"{where}: {prefix}{key}: {repr(value)[:40]} {why}; this config.json is corrupt or edited: use "
                    "the model's own"
                )


def read_model_json(path: str | Path) -> Any:
    """A model folder's small JSON file (``config.json``, ``tokenizer_config.json``, ``generation_config.json``)
    through the one regular-file reader (:func:`~mathneuro_edit.util.reading.read_json`): a regular file of at most
    :data:`MAX_CONFIG_BYTES`, nested no deeper than a parser allows (a missing file and text that is not JSON raise
    as there: the caller's to report)."""
    name = Path(path).name
    return read_json(path, MAX_CONFIG_BYTES, f"a {name}", f"a model's {name} is a small JSON file: use the model's own")


def model_json_object(path: str | Path) -> dict[str, Any] | None:
    """:func:`read_model_json` for a reader that can do without the file: ``None`` when it is missing, unreadable,
    not JSON or not a JSON object. A FIFO, a device or an oversized file still raises its one-line
    :class:`~mathneuro_edit.errors.InputError` (never a hang, never a silent skip of a hostile file)."""
    try:
        data = read_model_json(path)
    except InputError:
        raise
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def check_config_file_sizes(folder: str | Path) -> None:
    """:func:`check_config_sizes` of ``folder/config.json`` when there is one, which must be a regular file of at
    most :data:`MAX_CONFIG_BYTES` (a FIFO would block the reader, a device never end), as must the folder's
    ``generation_config.json``, ``tokenizer_config.json`` and ``special_tokens_map.json`` (not nested too deep
    either). A file that is not JSON is left to the reader that follows, which names it."""
    for name in _OTHER_JSON:  # read by transformers or copied into outputs: a FIFO, a device, 100,000 levels
        model_json_object(Path(folder) / name)  # one line here (a RecursionError or SpecialFileError later)
    path = Path(folder) / "config.json"
    if (data := model_json_object(path)) is not None:  # none, or not JSON: the reader that follows names it
        check_config_sizes(data, str(path))


# the model folder's other JSON files transformers reads or a run copies (issue 48: a FIFO as generation_config.json
# was an internal SpecialFileError when copied, one nested 100,000 deep an internal RecursionError)
_OTHER_JSON = ("generation_config.json", "tokenizer_config.json", "special_tokens_map.json")
