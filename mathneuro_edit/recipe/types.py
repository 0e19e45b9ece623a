"""The building blocks of the recipe's sections: the strict base model and the constrained value types.

Each constrained type rejects a bad value with ``<what is wrong> (got <value>)``, which
:mod:`mathneuro_edit.recipe.io` puts on the one error line with the key's dotted path. The sections themselves
are defined in :mod:`.input_sections`, :mod:`.edit_sections` and :mod:`.job_sections`, and composed into the
:class:`~mathneuro_edit.recipe.schema.Recipe` (the single source of truth for recipe keys).
"""

from __future__ import annotations

import math
import re
import typing
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Discriminator, StrictInt, Tag

from ..engine.edit_map import check_map
from ..engine.top_k_rule import is_top_k, top_k_hint
from ..util.patterns import pattern_problem

_SIZE = re.compile(r"^\d+(\.\d+)?\s*([KMGT]i?)?B$", re.IGNORECASE)
_DEVICE = re.compile(r"^(cpu|auto|mps|cuda(:\d+)?)$")


def value_rule(ok: typing.Callable[[Any], bool], message: str) -> AfterValidator:
    """An AfterValidator whose error reads ``<message> (got <value>)``."""

    def validate(value: Any) -> Any:
        if not ok(value):
            raise ValueError(f"{message} (got {show_value(value)})")
        return value

    return AfterValidator(validate)


def _regex(value: str) -> str:
    problem = pattern_problem(value)  # invalid, or a repeat inside a repeat (minutes of backtracking)
    if problem is not None:
        raise ValueError(f"{problem} (got {show_value(value)})")
    return value


# Why strict ints and bools: YAML `batch_size: true` or `prune: "yes"` is a mistake, not 1 / True.
Positive = Annotated[StrictInt, value_rule(lambda v: v >= 1, "must be an integer >= 1")]
NonNegative = Annotated[StrictInt, value_rule(lambda v: v >= 0, "must be an integer >= 0")]
# Why upper bounds: `calibration.batch_size: 1e18` passed as valid and `plan` estimated 180 billion TB with exit 0
# (issue 48); no machine runs a forward pass of 65,536 texts, and no model reads 16 Mi tokens at once.
MAX_BATCH = 1 << 16
MAX_TOKENS = 1 << 24
BatchSize = Annotated[
    Positive, value_rule(lambda v: v <= MAX_BATCH, f"must be at most {MAX_BATCH:,} (texts in one forward pass)")
]
Tokens = Annotated[
    Positive,
    value_rule(lambda v: v <= MAX_TOKENS, f"must be at most {MAX_TOKENS:,} tokens (longer than any model's context)"),
]


def check_top_k(value: float) -> float:
    if not is_top_k(value):
        raise ValueError(f"must be in (0, 1] (got {show_value(value)}){top_k_hint(value)}")
    return value


TopK = Annotated[float, AfterValidator(check_top_k)]
FiniteNonNegative = Annotated[float, value_rule(lambda v: math.isfinite(v) and v >= 0, "must be a finite number >= 0")]
# the edit is computed in float32 (engine.apply.edited_values): a scale above its largest value is inf there
Scale = Annotated[
    FiniteNonNegative,
    value_rule(
        lambda v: v <= 3.4028234663852886e38,
        "is inf in float32, the dtype the edit is computed in (at most 3.4e38): choose a smaller scale",
    ),
]


def _map_keys(value: dict[str, Any]) -> dict[str, Any]:
    check_map(value)  # its ValueError names the key; the recipe error line adds the dotted path
    return value


# a value per layer band and component (engine.edit_map): {default: 1.05, mlp: 1.1, "layers 0-5": 1.0}
ScaleMap = Annotated[dict[str, Scale], AfterValidator(_map_keys)]
TopKMap = Annotated[dict[str, TopK], AfterValidator(_map_keys)]
# a number or a map, told apart before validating (a bad map gets its own errors, not also "not a number")
_BY_SHAPE = Discriminator(lambda v: "[map]" if isinstance(v, dict) else "[number]")  # "[...]": no path part
ScaleSetting = Annotated[Annotated[Scale, Tag("[number]")] | Annotated[ScaleMap, Tag("[map]")], _BY_SHAPE]
TopKSetting = Annotated[Annotated[TopK, Tag("[number]")] | Annotated[TopKMap, Tag("[map]")], _BY_SHAPE]
Level = Annotated[float, value_rule(lambda v: 0 < v < 1, "must be in (0, 1), e.g. 0.05")]
Device = Annotated[str, value_rule(_DEVICE.match, "must be cpu, cuda, cuda:N, mps or auto")]
ShardSize = Annotated[str, value_rule(_SIZE.match, 'must be a size such as "2GB" or "500MiB"')]
_REPO_PART = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9._-]*[A-Za-z0-9_])?")
_NO_DOTS = "no '..', no part starting or ending with '.' or '-'"


def is_repo_id(value: str) -> bool:
    """A Hub repo id the Hub takes as written: ``name`` or ``user/name``, parts of letters, digits and ``._-`` that
    neither start nor end with ``.`` or ``-``, no ``..`` or ``--`` (``../..`` is a path, not a repo), at most 96."""
    parts = value.split("/")
    return (
        len(parts) <= 2
        and len(value) <= 96
        and ".." not in value
        and "--" not in value
        and all(_REPO_PART.fullmatch(p) for p in parts)
    )


# a branch name the Hub takes as written (publish.hub.check_branch applies it to --branch and a lock's)
_BRANCH_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")


def is_branch_name(value: str) -> bool:
    return is_well_formed_ref(value) and not is_hub_ref(value)


def is_well_formed_ref(value: str) -> bool:
    """Whether the Hub takes ``value`` as written as a branch or ref name (no ``..``, no part starting with ``.``
    or ``-``, letters, digits, ``.``, ``_``, ``-`` and ``/`` only, at most 200 characters)."""
    return (
        isinstance(value, str)
        and 0 < len(value) <= 200
        and ".." not in value
        and not value.endswith((".lock", "."))
        and all(_BRANCH_PART.fullmatch(p) for p in value.split("/"))
    )


def is_hub_ref(value: str) -> bool:
    """Whether ``value`` names one of the Hub's refs rather than a branch (``refs/pr/1``: a pull request's).

    Why refused as a branch: a commit to ``refs/pr/N`` lands in an open pull request, which may be someone else's,
    and ``create_branch`` would make a branch literally named ``refs/...``; ``push --create-pr`` opens a new one.
    """
    return value == "refs" or value.startswith("refs/")


RepoId = Annotated[
    str,
    value_rule(is_repo_id, f"must be a Hub repo id like user/name (letters, digits, '.', '_', '-'; {_NO_DOTS})"),
]
_REF_RULE = "(letters, digits, '.', '_', '-', '/' between parts not starting with '.' or '-'; no '..')"
Branch = Annotated[str, value_rule(is_branch_name, f"must be a branch name such as main or exp/boost-1.1 {_REF_RULE}")]
# Why a format, not any string: a revision is shown on the model card and in its Python snippets
# (``revision="..."``); a line break, ``<``, a quote or a backtick there would be a heading, HTML or code (issue 48)
_REVISION = "must be a branch, tag or commit of the Hub such as main, v1.0 or a 40-hex sha"
Revision = Annotated[str, value_rule(is_well_formed_ref, f"{_REVISION} {_REF_RULE}")]
Regex = Annotated[str, AfterValidator(_regex)]


class StrictModel(BaseModel):
    """The base of every recipe section: unknown keys refused."""

    # Why coerce numbers to str: YAML reads `split: 2021` or `revision: 1234` as ints.
    model_config = ConfigDict(extra="forbid", coerce_numbers_to_str=True)


def show_value(value: Any) -> str:
    """``value`` as an error line shows it after ``got``: its repr (a float as str), cut to 60 characters."""
    text = repr(value) if not isinstance(value, float) else str(value)
    return text if len(text) <= 60 else text[:57] + "..."
