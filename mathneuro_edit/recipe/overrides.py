"""``--set key.path=value`` overrides applied to a recipe's plain data before it is validated.

Apart from :mod:`mathneuro_edit.recipe.io` because it is the one place that edits a recipe rather than reads it:
walking a dotted key into sections, lists and bare-path sources, parsing each value as YAML with the same loader and
limits as a recipe file (:mod:`mathneuro_edit.recipe.safe_yaml`), and the rule that an explicit ``edit.scale`` or
``edit.prune`` replaces the other. :func:`~mathneuro_edit.recipe.io.recipe_from_dict` calls it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import yaml

from ..errors import InputError
from .safe_yaml import _check_limits, _UniqueKeyLoader


def _apply_overrides(data: dict[str, Any], overrides: Sequence[str], where: str) -> None:
    """Set ``key.path=value`` overrides (values parsed as YAML scalars) in place.

    An explicit ``edit.prune=true`` or ``edit.scale=X`` replaces the recipe's other edit key (see
    :func:`_explicit_edit_wins`).
    """
    _set_each(data, overrides, where)
    _explicit_edit_wins(data, overrides, where)


def _explicit_edit_wins(data: dict[str, Any], overrides: Sequence[str], where: str) -> None:
    """``--set edit.prune=true`` on a recipe with ``scale`` clears the scale (and ``edit.scale=X`` the prune).

    Why: an edit is exactly one of scale or prune, and an override is an explicit request for this run; asking
    the user to also write ``edit.scale=null`` would only repeat it. Setting both in the overrides is refused.
    """
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


def _set_each(data: dict[str, Any], overrides: Sequence[str], where: str) -> None:
    for item in overrides:
        key, sep, raw = item.partition("=")
        parts = key.strip().split(".")
        if not sep or not all(parts):
            raise InputError(f"{where}: override {item!r} is not key.path=value; e.g. edit.scale=1.2")
        try:
            _check_limits(raw, f"{where}: override {key.strip()}")
            value = yaml.load(raw, Loader=_UniqueKeyLoader)
        except InputError:
            raise
        except (RecursionError, ValueError) as e:
            raise InputError(f"{where}: override {key.strip()}: cannot read the value ({str(e)[:120]})") from None
        except yaml.reader.ReaderError:  # a control character YAML cannot hold (ESC in a file name): that text
            value = raw
        except yaml.YAMLError as e:
            raise InputError(f"{where}: override {item!r}: value is not valid YAML ({e})") from None
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
