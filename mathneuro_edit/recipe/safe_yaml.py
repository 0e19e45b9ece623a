"""YAML read and written safely: the limits a hostile file meets before anything is built, duplicate keys refused,
numbers without YAML 1.1's base-60 forms, and control or bidi characters written as escapes.

Apart from :mod:`mathneuro_edit.recipe.io` because it knows nothing of recipes: the lock file is read and written
with the same functions (:mod:`mathneuro_edit.publish.lock`), and ``--set`` values are parsed with the same loader
and limits (:mod:`mathneuro_edit.recipe.overrides`).
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from ..errors import InputError

__all__ = [
    "load_yaml",
    "dump_yaml",
    "check_limits",
    "UniqueKeyLoader",
    "MAX_RECIPE_BYTES",
    "MAX_DEPTH",
    "MAX_NODES",
    "MAX_INT_DIGITS",
]

MAX_RECIPE_BYTES = 1024 * 1024  # a recipe is a page of YAML; a lock (read with its own size limit) holds one
MAX_DEPTH = 64  # sections nest 4 deep; deeper is a hostile file (PyYAML would recurse until RecursionError)
MAX_NODES = 200_000  # values after alias expansion: an alias bomb of 300 bytes expands to billions
MAX_INT_DIGITS = 40  # the largest meaningful integer (a seed) has 20 digits; Python refuses to parse 4,300+


class UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys (PyYAML silently keeps the last one)."""


def _mapping(loader: UniqueKeyLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node)


UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)

# YAML 1.1 reads `1:30` as the base-60 integer 90 (and `1:30.5` as 90.5): `samples: 1:30` would silently be 90.
# Our loader resolves ints and floats without the base-60 forms, so such a value stays the string it looks like
# (and a number key refuses it); every other YAML 1.1 number reads as before.
UniqueKeyLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag not in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
UniqueKeyLoader.add_implicit_resolver(
    "tag:yaml.org,2002:int",
    re.compile(r"^(?:[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+)$"),
    list("-+0123456789"),
)
UniqueKeyLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?|\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
    ),
    list("-+0123456789."),
)

_LONG_INT = re.compile(r"^[-+]?([0-9_]+|0x[0-9a-fA-F_]+|0o[0-7_]+|0b[01_]+|[0-9][0-9_]*(:[0-5]?[0-9])+)$")


def check_limits(text: str, where: str) -> None:
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
        else:
            total += n
        if total + sum(c for _, c in stack) > MAX_NODES:  # (every open collection's count is in the sum)
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
    duplicate keys refused. Any of those, or invalid YAML, is one :class:`InputError` line naming ``where`` (and
    the line and column).

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
        check_limits(text, where)
        return yaml.load(text, Loader=UniqueKeyLoader)
    except InputError:
        raise
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        problem = getattr(e, "problem", None) or str(e)
        raise InputError(f"{where}: invalid YAML{_at(mark)}: {problem}; fix the syntax") from None
    except (RecursionError, ValueError) as e:  # a limit PyYAML or Python hits first
        raise InputError(f"{where}: cannot read this {what} ({str(e)[:120]}); fix the file") from None
