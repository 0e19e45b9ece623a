"""Reading recipes: YAML (duplicate keys refused), ``--set key=value`` overrides, and one error listing every problem.

Built on :mod:`.schema` (never the other way round), :mod:`.safe_yaml` and :mod:`.overrides`: this module validates
the result, turns pydantic's errors into one line, and lists every key for the docs (:func:`recipe_fields`).
"""

from __future__ import annotations

import copy
import difflib
import json
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ValidationError

from ..errors import InputError
from ..util.paths import ORGANISM
from .input_sections import Source
from .overrides import apply_overrides
from .safe_yaml import MAX_RECIPE_BYTES, load_yaml
from .schema import Recipe
from .types import show_value

__all__ = ["load_recipe", "as_recipe", "recipe_from_dict", "quickstart_recipe", "recipe_fields"]


def _model_at(loc: Sequence[Any]) -> type[BaseModel] | None:
    """The section model reached by following ``loc`` from :class:`Recipe`."""
    cls: type[BaseModel] | None = Recipe
    for part in loc:
        if isinstance(part, int) or cls is None:
            continue
        info = cls.model_fields.get(str(part))
        cls = _find_model(info.annotation) if info else None
    return cls


def _find_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        if (found := _find_model(arg)) is not None:
            return found
    return None


def _problem(err: Any) -> str:
    loc = [p for p in err["loc"] if not (isinstance(p, str) and ("[" in p or p in ("str", "int", "dict")))]
    where = ".".join(str(p) for p in loc) or "recipe"
    kind = err["type"]
    if kind == "extra_forbidden":
        parent = _model_at(loc[:-1])
        allowed = sorted(parent.model_fields) if parent else []
        close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
        hint = f", did you mean {close[0]!r}?" if close else ""
        return f"{where}: unknown key{hint} (allowed: {' '.join(allowed)})"
    if kind == "missing":
        return f"{where}: required key is missing"
    if kind in ("value_error", "assertion_error"):
        return f"{where}: {err['ctx']['error']}"
    return f"{where}: {err['msg'][0].lower()}{err['msg'][1:]} (got {show_value(err['input'])})"


def _refuse_nul(data: Any, where: str, at: str = "") -> None:
    """Refuse a NUL character in any key or value: no path or name holds one (the OS refuses it as a path, which
    would otherwise surface as an internal error when the file is opened)."""
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ()
    for k, v in items:  # (a list is never the top level: its items' keys are ``at.i``)
        key = f"{at}.{k}" if at else str(k)
        if isinstance(k, str) and "\x00" in k:
            raise InputError(f"{where}: {key!r}: a key holding a NUL character; fix the recipe")
        _refuse_nul(v, where, key)
    if isinstance(data, str) and "\x00" in data:
        raise InputError(
            f"{where}: {at}: {data[:80]!r} holds a NUL character, which no path or name may hold; fix the value"
        )


def recipe_from_dict(data: dict[str, Any], overrides: Sequence[str] = (), *, where: str = "recipe") -> Recipe:
    """Validate plain data (e.g. parsed YAML; not modified) as a :class:`Recipe`, after applying ``key.path=value``
    overrides (values parsed as YAML scalars: ``edit.scale=1.2``). A bad recipe is one :class:`InputError` naming
    every problem with its dotted path, after ``where`` (the file).

    Example:
        >>> r = recipe_from_dict({"base": {"model": "organism"}, "data": {"math": "organism:math",
        ...     "general": "organism:general"}, "edit": {"scale": 1.1}}, ["mask.top_k=0.1"])
        >>> r.mask.top_k, r.edit.effective_scale
        (0.1, 1.1)
    """
    if not isinstance(data, dict):
        raise InputError(f"{where}: must be a mapping of sections (base, data, edit, ...), got {type(data).__name__}")
    data = copy.deepcopy(data)  # never modify the caller's data
    apply_overrides(data, overrides, where)
    _refuse_nul(data, where)
    try:
        return Recipe.model_validate(data)
    except ValidationError as e:
        problems = [_problem(err) for err in e.errors()]
        n = len(problems)
        raise InputError(f"{where}: {n} problem{'s' if n != 1 else ''}: {'; '.join(problems)}") from None


def load_recipe(path: str | Path, overrides: Sequence[str] = ()) -> Recipe:
    """Read a YAML recipe, apply ``key.path=value`` overrides (``edit.scale=1.2``) and validate it. Relative data
    paths inside it are relative to the working directory. A missing or unreadable file, invalid YAML (with line
    and column) or every validation problem is one :class:`InputError`."""
    p = Path(path)
    try:
        if p.exists() and not p.is_file():  # a FIFO would block, a device never end
            raise InputError(f"{p}: not a regular file; pass the recipe's YAML file")
        if p.is_file() and p.stat().st_size > MAX_RECIPE_BYTES:  # before reading it: a recipe is a page of YAML
            raise InputError(
                f"{p}: {p.stat().st_size:,} bytes, more than a recipe may hold ({MAX_RECIPE_BYTES:,}); "
                "pass the recipe file"
            )
        with open(p, encoding="utf-8") as f:
            text = f.read(MAX_RECIPE_BYTES + 1)  # a device or pipe given as the recipe is read only so far
    except FileNotFoundError:
        raise InputError(f"{p}: recipe file not found; check the path (examples are in recipes/)") from None
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{p}: cannot read the recipe ({e}); check the file") from None
    data = load_yaml(text, str(p))
    if data is None:
        raise InputError(f"{p}: the recipe is empty; start from recipes/quickstart.yaml")
    return recipe_from_dict(data, overrides, where=str(p))


def as_recipe(recipe: Recipe | str | Path) -> Recipe:
    """What every job of the API takes as its recipe, as the CLI takes it: a :class:`Recipe`, or the path of a recipe
    file (read by :func:`load_recipe`).

    Example:
        >>> as_recipe(quickstart_recipe()) == quickstart_recipe()
        True
        >>> as_recipe(3)
        Traceback (most recent call last):
        ...
        mathneuro_edit.errors.InputError: recipe: got int; pass a Recipe (load_recipe) or the path of a recipe file
    """
    if isinstance(recipe, Recipe):
        return recipe
    if isinstance(recipe, (str, Path)):
        return load_recipe(recipe)
    raise InputError(f"recipe: got {type(recipe).__name__}; pass a Recipe (load_recipe) or the path of a recipe file")


_QUICKSTART: dict[str, Any] = {
    "base": {"model": ORGANISM, "dtype": "float32"},
    "data": {
        "math": {"path": "organism:math", "split": "train"},
        "general": [{"path": "organism:general", "split": "train"}],
        "samples": 100,
        "seed": 0,
    },
    "mask": {"method": "mathneuro", "top_k": 0.05},
    "edit": {"prune": True},
    "outputs": {"checkpoint": True, "adapter": True},
    "evaluation": {
        "math": {"path": "organism:math", "split": "test"},
        "general": [{"path": "organism:general", "split": "test"}],
        "samples": 100,
        "n_shot": 0,
        "max_new_tokens": 64,
    },
}


def quickstart_recipe(overrides: Sequence[str] = ()) -> Recipe:
    """The embedded default recipe (same as ``recipes/quickstart.yaml``): the shipped organism's math-specific
    weights pruned (MathNeuro's headline experiment: math accuracy collapses, general text holds);
    ``["edit.scale=1.1"]`` as ``overrides`` boosts instead (it replaces the prune).

    Example:
        >>> quickstart_recipe().base.model
        'organism'
    """
    return recipe_from_dict(_QUICKSTART, overrides, where="quickstart recipe")


def _type_name(t: Any) -> str:
    """A short, readable name of a field's type for docs (``float | null``, ``"matrix" | "row"``)."""
    origin, args = typing.get_origin(t), typing.get_args(t)
    if origin is Annotated:
        return _type_name(args[0])
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(a) for a in args)
    if origin is Literal:
        return " | ".join(json.dumps(a) for a in args)
    if origin in (list, dict):
        return f"{origin.__name__}[{', '.join(_type_name(a) for a in args)}]"
    return {type(None): "null", Source: "source"}.get(t, getattr(t, "__name__", str(t)))


def recipe_fields() -> list[tuple[str, str, Any, str]]:
    """Every recipe key as ``(dotted key, type, default, description)``, in documentation order.

    For docs and CLI help. ``default`` is ``"(required)"`` for required keys; the keys of a data source (used by
    ``data.math``, ``data.general``, ``evaluation.math``, ``evaluation.general``) are listed as ``source.*``.

    Example:
        >>> next(row for row in recipe_fields() if row[0] == "edit.prune")[:3]
        ('edit.prune', 'bool', False)
    """
    rows: list[tuple[str, str, Any, str]] = []

    def walk(cls: type[BaseModel], prefix: str) -> None:
        for name, info in cls.model_fields.items():
            sub = _find_model(info.annotation)
            if sub is not None and sub is not Source:
                walk(sub, f"{prefix}{name}.")
                continue
            default = "(required)" if info.is_required() else info.get_default(call_default_factory=True)
            rows.append((prefix + name, _type_name(info.annotation), default, info.description or ""))

    walk(Recipe, "")
    walk(Source, "source.")
    return rows
