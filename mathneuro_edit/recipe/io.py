"""Reading recipes: YAML (duplicate keys refused), ``--set key=value`` overrides, and one error listing every problem.

Built on :mod:`mathneuro_edit.recipe.schema` (the validated type); the dependency is one way: ``recipe`` never imports
this module.
"""

from __future__ import annotations

import copy
import difflib
import json
import re
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ValidationError

from ..errors import InputError
from ..util.paths import ORGANISM
from .schema import Recipe, Source
from .types import _show

__all__ = [
    "load_recipe",
    "load_yaml",
    "dump_yaml",
    "recipe_from_dict",
    "quickstart_recipe",
    "recipe_fields",
    "MAX_RECIPE_BYTES",
    "MAX_DEPTH",
    "MAX_NODES",
    "MAX_INT_DIGITS",
]

MAX_RECIPE_BYTES = 1024 * 1024  # a recipe is a page of YAML; a lock (read with its own size limit) holds one
MAX_DEPTH = 64  # sections nest 4 deep; deeper is a hostile file (PyYAML would recurse until RecursionError)
MAX_NODES = 200_000  # values after alias expansion: an alias bomb of 300 bytes expands to billions
MAX_INT_DIGITS = 40  # the largest meaningful integer (a seed) has 20 digits; Python refuses to parse 4,300+


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
    return f"{where}: {err['msg'][0].lower()}{err['msg'][1:]} (got {_show(err['input'])})"


# ---------------------------------------------------------------------------------------------- loading


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys (PyYAML silently keeps the last one)."""


def _mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)

# YAML 1.1 reads `1:30` as the base-60 integer 90 (and `1:30.5` as 90.5): `samples: 1:30` would silently be 90.
# Our loader resolves ints and floats without the base-60 forms, so such a value stays the string it looks like
# (and a number key refuses it); every other YAML 1.1 number reads as before.
_UniqueKeyLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag not in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_UniqueKeyLoader.add_implicit_resolver(
    "tag:yaml.org,2002:int",
    re.compile(r"^(?:[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+)$"),
    list("-+0123456789"),
)
_UniqueKeyLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?|\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
    ),
    list("-+0123456789."),
)

_LONG_INT = re.compile(r"^[-+]?([0-9_]+|0x[0-9a-fA-F_]+|0o[0-7_]+|0b[01_]+|[0-9][0-9_]*(:[0-5]?[0-9])+)$")


def _check_limits(text: str, where: str) -> None:
    """Refuse YAML deeper than :data:`MAX_DEPTH`, expanding to more than :data:`MAX_NODES` values (aliases
    counted as what they expand to) or holding an integer longer than :data:`MAX_INT_DIGITS` digits.

    Checked on the event stream, which PyYAML produces without recursion or expansion, and stopped at the first
    excess, so a hostile file costs microseconds (composing it would recurse, expanding it would never end).
    """
    stack: list[list[Any]] = []  # per open collection: [anchor, values inside so far]
    anchors: dict[str, int] = {}
    total = 0

    def add(n: int, mark: Any) -> None:
        nonlocal total
        if stack:
            stack[-1][1] += n
            size = stack[-1][1]
        else:
            total += n
            size = total
        if size > MAX_NODES or total + sum(c for _, c in stack) > MAX_NODES:
            raise InputError(
                f"{where}: expands to more than {MAX_NODES:,} values{_at(mark)} (aliases are counted as "
                "what they repeat); a recipe is a short file: remove the repeated anchors"
            )

    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        mark = event.start_mark
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            stack.append([event.anchor, 1])
            if len(stack) > MAX_DEPTH:
                raise InputError(
                    f"{where}: nested more than {MAX_DEPTH} levels deep{_at(mark)}; a recipe's sections "
                    "nest a few levels: fix the file"
                )
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            anchor, size = stack.pop()
            if anchor is not None:
                anchors[anchor] = size
            add(size, mark)
        elif isinstance(event, yaml.ScalarEvent):
            if event.style is None and len(event.value) > MAX_INT_DIGITS and _LONG_INT.match(event.value):
                raise InputError(
                    f"{where}: an integer of {len(event.value)} digits{_at(mark)}; no recipe value needs "
                    f"more than {MAX_INT_DIGITS}: fix the value"
                )
            if event.anchor is not None:
                anchors[event.anchor] = 1
            add(1, mark)
        elif isinstance(event, yaml.AliasEvent):
            add(anchors.get(event.anchor, 1), mark)


# what a terminal or an editor would act on rather than show (util/console.py's set, line breaks and tabs aside)
_SHOWN_ESCAPED = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]")


class _EscapingDumper(yaml.SafeDumper):
    r"""PyYAML's safe dumper, but a string holding a control or bidi character is written double-quoted with that
    character as an escape (``"math\u202Etxt"``, ``"\e[31m"``): PyYAML counts the bidi overrides as printable
    and writes them raw, so a file name could reorder what ``cat`` shows of a lock. The value read back is the
    same string; a string without such characters is written as before (UTF-8 letters kept)."""

    def analyze_scalar(self, scalar: str) -> Any:
        if not _SHOWN_ESCAPED.search(scalar):
            return super().analyze_scalar(scalar)
        keep, self.allow_unicode = self.allow_unicode, False  # "special characters": double-quoted, escaped
        try:
            return super().analyze_scalar(scalar)
        finally:
            self.allow_unicode = keep

    def process_scalar(self) -> None:
        if self.analysis is None:
            self.analysis = self.analyze_scalar(self.event.value)
        if not _SHOWN_ESCAPED.search(self.analysis.scalar):
            return super().process_scalar()
        keep, self.allow_unicode = self.allow_unicode, False  # write_double_quoted escapes every non-ASCII then
        try:
            super().process_scalar()
        finally:
            self.allow_unicode = keep


def dump_yaml(data: Any) -> str:
    r"""``data`` as YAML (keys in their order, UTF-8 letters as they are), with every control or bidi character
    written as an escape, so the file's bytes hold none raw; :func:`load_yaml` reads back the same data.

    Example:
        >>> print(dump_yaml({"path": "math\u202etxt.exe.txt", "name": "café"}), end="")
        path: "math\u202Etxt.exe.txt"
        name: café
        >>> load_yaml(dump_yaml({"p": "a\x1b[31m\u2066b"}), "x")["p"] == "a\x1b[31m\u2066b"
        True
    """
    return yaml.dump(data, Dumper=_EscapingDumper, sort_keys=False, allow_unicode=True)


def _at(mark: Any) -> str:
    return f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""


def load_yaml(text: str, where: str, what: str = "recipe") -> Any:
    """Parse YAML safely: size, depth, alias expansion and integer size limited before anything is built;
    duplicate keys refused.

    Raises:
        InputError: one line naming ``where`` (and the line and column) for any of those, or invalid YAML.

    Example:
        >>> load_yaml("{a: &x [1, 2], b: *x}", "r.yaml")
        {'a': [1, 2], 'b': [1, 2]}
    """
    if len(text) > MAX_RECIPE_BYTES and what == "recipe":
        raise InputError(
            f"{where}: {len(text):,} characters, more than a {what} may hold ({MAX_RECIPE_BYTES:,}); "
            "this is not a recipe"
        )
    try:
        _check_limits(text, where)
        return yaml.load(text, Loader=_UniqueKeyLoader)
    except InputError:
        raise
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        problem = getattr(e, "problem", None) or str(e)
        raise InputError(f"{where}: invalid YAML{_at(mark)}: {problem}; fix the syntax") from None
    except (RecursionError, ValueError) as e:  # a limit PyYAML or Python hits first
        raise InputError(f"{where}: cannot read this {what} ({str(e)[:120]}); fix the file") from None


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


def _refuse_nul(data: Any, where: str, at: str = "") -> None:
    """Refuse a NUL character in any key or value: no path or name holds one (the OS refuses it as a path, which
    would otherwise surface as an internal error when the file is opened)."""
    if isinstance(data, dict):
        for k, v in data.items():
            key = f"{at}.{k}" if at else str(k)
            if isinstance(k, str) and "\x00" in k:
                raise InputError(f"{where}: {key!r}: a key holding a NUL character; fix the recipe")
            _refuse_nul(v, where, key)
    elif isinstance(data, list):
        for i, v in enumerate(data):
            _refuse_nul(v, where, f"{at}.{i}")
    elif isinstance(data, str) and "\x00" in data:
        raise InputError(
            f"{where}: {at}: {data[:80]!r} holds a NUL character, which no path or name may hold; fix the value"
        )


def recipe_from_dict(data: dict[str, Any], overrides: Sequence[str] = (), *, where: str = "recipe") -> Recipe:
    """Validate plain data (e.g. parsed YAML) as a :class:`Recipe`, after applying overrides.

    Args:
        data: the recipe's keys; not modified.
        overrides: ``key.path=value`` strings, values parsed as YAML scalars (``edit.scale=1.2``).
        where: name used at the start of error messages (the file name).

    Returns:
        The validated recipe.

    Raises:
        InputError: every problem at once, each with its dotted path.

    Example:
        >>> r = recipe_from_dict({"base": {"model": "organism"}, "data": {"math": "organism:math",
        ...     "general": "organism:general"}, "edit": {"scale": 1.1}}, ["mask.top_k=0.1"])
        >>> r.mask.top_k, r.edit.effective_scale
        (0.1, 1.1)
    """
    if not isinstance(data, dict):
        raise InputError(f"{where}: must be a mapping of sections (base, data, edit, ...), got {type(data).__name__}")
    data = copy.deepcopy(data)  # never modify the caller's data
    _apply_overrides(data, overrides, where)
    _refuse_nul(data, where)
    try:
        return Recipe.model_validate(data)
    except ValidationError as e:
        problems = [_problem(err) for err in e.errors()]
        n = len(problems)
        raise InputError(f"{where}: {n} problem{'s' if n != 1 else ''}: {'; '.join(problems)}") from None


def load_recipe(path: str | Path, overrides: Sequence[str] = ()) -> Recipe:
    """Read and validate a YAML recipe.

    Args:
        path: the YAML file. Relative data paths inside it are relative to the working directory.
        overrides: ``key.path=value`` strings applied after reading (``edit.scale=1.2``, ``data.samples=50``).

    Returns:
        The validated recipe.

    Raises:
        InputError: missing/unreadable file, invalid YAML (with line and column), or every validation problem.

    Example:
        >>> recipe = load_recipe("recipes/quickstart.yaml", ["edit.scale=1.2"])  # doctest: +SKIP
    """
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
    weights pruned (MathNeuro's headline experiment: math accuracy collapses, general text holds).

    Args:
        overrides: ``key.path=value`` strings, e.g. ``["edit.scale=1.1"]`` to boost instead (replaces the prune).

    Returns:
        The validated recipe.

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
        >>> ("edit.scale", "float | null", None, "multiply selected weights by this (paper: 1.1)") in recipe_fields()
        True
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
