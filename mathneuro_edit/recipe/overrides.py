"""``--set key.path=value`` overrides applied to a recipe's plain data before it is validated.

Apart from :mod:`mathneuro_edit.recipe.io` because it is the one place that edits a recipe rather than reads it:
walking a dotted key into sections, lists and bare-path sources, parsing each value as YAML with the same loader and
limits as a recipe file (:mod:`mathneuro_edit.recipe.safe_yaml`), and the rule that an explicit ``edit.scale`` or
``edit.prune`` replaces the other. :func:`~mathneuro_edit.recipe.io.recipe_from_dict` calls it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from ..errors import InputError
from ..util.paths import LOCAL, is_local_path
from .safe_yaml import UniqueKeyLoader, check_limits

__all__ = ["apply_overrides", "public_override"]


def apply_overrides(data: dict[str, Any], overrides: Sequence[str], where: str) -> None:
    """Set ``key.path=value`` overrides (values parsed as YAML scalars) in place. ``--set edit.prune=true`` on a
    recipe with ``scale`` clears the scale (and ``edit.scale=X`` the prune); setting both is refused.

    Why: an edit is exactly one of scale or prune, and an override is an explicit request for this run; asking
    the user to also write ``edit.scale=null`` would only repeat it.
    """
    _set_each(data, overrides, where)
    keys = {item.partition("=")[0].strip() for item in overrides}
    edit = data.get("edit")
    if not isinstance(edit, dict) or not ({"edit.scale", "edit.prune"} & keys):
        return
    scaled, pruned = edit.get("scale") is not None, edit.get("prune") is True
    if {"edit.scale", "edit.prune"} <= keys and scaled and pruned:
        raise InputError(
            f"{where}: overrides edit.scale={edit['scale']} and edit.prune=true conflict (an edit "
            "scales or prunes); drop one"
        )
    if "edit.prune" in keys and pruned:
        edit["scale"] = None
    elif "edit.scale" in keys and scaled and "prune" in edit:
        edit["prune"] = False


def _value(item: str, where: str) -> tuple[list[str], Any]:
    """The dotted key's parts and the value of one ``key.path=value`` override, read as :func:`_set_each` sets it
    and :func:`public_override` publishes it (one reading: what is redacted is what was applied)."""
    key, sep, raw = item.partition("=")
    parts = key.strip().split(".")
    if not sep or not all(parts):
        raise InputError(f"{where}: override {item!r} is not key.path=value; e.g. edit.scale=1.2")
    try:
        check_limits(raw, f"{where}: override {key.strip()}")
        return parts, yaml.load(raw, Loader=UniqueKeyLoader)
    except InputError:
        raise
    except (RecursionError, ValueError) as e:
        raise InputError(f"{where}: override {key.strip()}: cannot read the value ({str(e)[:120]})") from None
    except yaml.reader.ReaderError:  # a control character YAML cannot hold (ESC in a file name): that text
        return parts, raw
    except yaml.YAMLError as e:
        raise InputError(f"{where}: override {item!r}: value is not valid YAML ({e})") from None


# recipe keys (list indices left out) whose string value names a local file or folder, besides any ``*.path`` /
# ``*_path`` key: a data source given as a bare path (``data.math=/x.jsonl``, ``data.general=[/x.jsonl]``) and the
# base; published as :meth:`~mathneuro_edit.recipe.schema.Recipe.public_dict` publishes them
_SOURCE_KEYS = frozenset(f"{section}.{name}" for section in ("data", "evaluation") for name in ("math", "general"))
_BASE_KEYS = frozenset({"base.model", "base.offload_folder"})


def _public_value(key: str, value: Any) -> Any:
    """``value`` set at ``key`` with every local path in it redacted, at any depth (a list of sources, a source
    given as a mapping): ``<local>`` for the base, ``<local>/NAME`` for a data file, as in the recipe's public form."""
    if isinstance(value, dict):
        return {k: _public_value(f"{key}.{k}", v) for k, v in value.items()}
    if isinstance(value, list):
        return [_public_value(key, v) for v in value]  # an item's key is its list's: indices do not change meaning
    if not isinstance(value, str) or not is_local_path(value):
        return value
    bare = ".".join(part for part in key.split(".") if not part.isdigit())
    last = bare.rsplit(".", 1)[-1]
    if bare in _BASE_KEYS:
        return LOCAL
    if bare in _SOURCE_KEYS or last == "path" or last.endswith("_path"):
        return f"{LOCAL}/{Path(value).name}"
    return value


def _yaml_text(value: Any) -> str:
    """``value`` as override text that reads back as ``value``: a plain string when YAML reads it as written,
    else JSON (which YAML reads; a name such as ``a: b.jsonl`` needs the quotes)."""
    if isinstance(value, str):
        try:
            if yaml.load(value, Loader=UniqueKeyLoader) == value:
                return value
        except yaml.YAMLError:
            pass
    return json.dumps(value, default=str)


def public_override(override: object, where: str = "sweep.variants") -> object:
    """A recipe override ``KEY=VALUE`` as published (lock, card, recipe hash): every local path it sets, whatever
    its spelling (``data.math.path=/p``, ``data.math=/p``, ``data.general=[/p]``, ``data.general.0=/p``,
    ``data.general=[{path: /p}]``), becomes ``<local>/NAME`` (``<local>`` for the base), as the recipe's own paths
    do; an override that names no local file is unchanged, byte for byte.

    Why one rule by meaning: the value is read as :func:`_set_each` applies it and each string is judged by the
    recipe key it lands on, so no spelling of a source can carry a path past the redaction (only ``*.path`` keys
    were redacted: ``data.math=/home/me/x.jsonl`` reached the lock, the card and the Hub).

    Raises:
        InputError: the value cannot be read (the same error applying it gives).

    Example:
        >>> public_override("data.general=[/home/me/data/g.jsonl]"), public_override("targets.include=[mlp]")
        ('data.general=["<local>/g.jsonl"]', 'targets.include=[mlp]')
    """
    if not isinstance(override, str) or "=" not in override:
        return override
    parts, value = _value(override, where)
    public = _public_value(".".join(parts), value)
    if json.dumps(public, default=str) == json.dumps(value, default=str):  # (NaN != NaN: compare the text)
        return override
    return f"{override.partition('=')[0]}={_yaml_text(public)}"


def _set_each(data: dict[str, Any], overrides: Sequence[str], where: str) -> None:
    for item in overrides:
        parts, value = _value(item, where)
        node: Any = data
        for i, part in enumerate(parts):
            step: Any = part
            if isinstance(node, list):
                if not (part.isdigit() and int(part) < len(node)):
                    where_in = ".".join(parts[: i + 1])
                    raise InputError(f"{where}: override {item!r}: {where_in} is not an item of the list")
                step = int(part)
            if i == len(parts) - 1:
                node[step] = value
                break
            child = node[step] if isinstance(node, list) else node.get(step)
            if parts[i + 1].isdigit() and not isinstance(child, list):  # one source stands for a list of one
                child = [] if child is None else [child]
            elif isinstance(child, str):  # a source given as a bare path: expand it to set one of its keys
                child = {"path": child}
            elif not isinstance(child, (dict, list)):
                child = {}
            node[step] = child
            node = child
