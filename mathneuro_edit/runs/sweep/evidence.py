"""From a sweep to a release: the setting a sweep confirmed, read back and applied to a recipe (``run --from-sweep``).

:func:`read_sweep` reads a sweep folder's ``sweep.json`` and accepts it only when its confirmation holds (its
counts give ``p < alpha`` and its problems are not the selection's, and it names the model it measured by content:
``base_identity``); :func:`recipe_from_sweep` applies the setting to a recipe whose base is that model
(:func:`base_difference`) and whose every key that decides the weights has the sweep's value
(:func:`release_difference`, the recipe schema's ``RELEASE_KEYS``); :func:`run_from_sweep` runs it, refuses a
mask that is not the one the confirmation tested (:func:`mask_refusal`: the claim covers only the weights measured),
and the lock and card record the evidence (:meth:`SweepEvidence.lock_entry`).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from ...engine.edit_map import check_map
from ...errors import InputError
from ...evaluation.report import format_p
from ...evaluation.significance import mcnemar_exact
from ...layout import SWEEP_JSON
from ...recipe.io import as_recipe, recipe_from_dict
from ...recipe.overrides import public_override
from ...recipe.schema import Recipe, release_rule
from ...util.outdir import check_output
from ...util.reading import open_regular
from ..pipeline import run_recipe
from ..steps.export import base_identity

__all__ = [
    "SweepEvidence",
    "read_sweep",
    "release_difference",
    "base_difference",
    "mask_refusal",
    "recipe_from_sweep",
    "run_from_sweep",
]


def _differences(mine: Any, theirs: Any, key: str = "") -> Iterator[tuple[str, Any, Any]]:
    """Every key where two recipes differ, as deep as both sides go (``data.math.template``, not ``data``; a list
    of another length as a whole), with both values, in the recipe's order."""
    if mine == theirs:
        return
    if isinstance(mine, Mapping) and isinstance(theirs, Mapping):
        for k in [*mine, *(k for k in theirs if k not in mine)]:
            yield from _differences(mine.get(k), theirs.get(k), f"{key}.{k}" if key else str(k))
    elif isinstance(mine, list) and isinstance(theirs, list) and len(mine) == len(theirs):
        for i, (a, b) in enumerate(zip(mine, theirs)):
            yield from _differences(a, b, f"{key}.{i}")
    else:
        yield key, mine, theirs


def release_difference(mine: Mapping[str, Any], theirs: Mapping[str, Any]) -> tuple[str, Any, Any] | None:
    """The first key that decides the weights (:func:`~mathneuro_edit.recipe.schema.release_rule`: ``same``)
    whose value differs between a release's public recipe and its sweep's, with both values; ``None`` when the
    release may take the sweep's setting. The base model's keys are not among them: the base is compared by
    content (:func:`base_difference`).

    Example:
        >>> from mathneuro_edit.recipe.io import quickstart_recipe
        >>> sweep = quickstart_recipe().public_dict()
        >>> release_difference(quickstart_recipe(["mask.reference=official"]).public_dict(), sweep)
        ('mask.reference', 'official', None)
        >>> release_difference(quickstart_recipe(["evaluation.samples=7", "edit.scale=2"]).public_dict(), sweep)
    """
    return next(((k, a, b) for k, a, b in _differences(mine, theirs) if release_rule(k) == "same"), None)


def _identity_text(identity: Mapping[str, Any]) -> str:
    if "gguf_sha256" in identity:
        return f"GGUF sha256 {identity['gguf_sha256']}"
    if "hub_id" in identity:
        return f"Hub model {identity['hub_id']} at commit {identity['revision']}"
    files = identity.get("weights_sha256") or {}
    return "safetensors " + ", ".join(f"{name} sha256 {sha}" for name, sha in files.items())


def base_difference(mine: Mapping[str, Any], theirs: Mapping[str, Any], model: str) -> str | None:
    """What differs between a release's base identity and the one its sweep measured
    (:func:`~mathneuro_edit.runs.steps.export.base_identity`), both whole, on one line; ``None`` when they are the
    same model. ``model`` is how the release names its base (a local path may be shown here: the line is the
    user's, never published).

    Example:
        >>> base_difference({"gguf_sha256": "a" * 64}, {"gguf_sha256": "a" * 64}, "m.gguf") is None
        True
    """
    if dict(mine) == dict(theirs):
        return None
    return (
        f"the recipe's base.model ({_shown(model, None)}: {_identity_text(mine)}) is not the model the sweep measured "
        f"({_identity_text(theirs)})"
    )


def mask_refusal(mask_sha256: str, confirmed: str | None) -> str | None:
    """Why a release from a sweep may not take the sweep's claim, its mask computed (``run --from-sweep``): the
    confirmation tested another mask (``confirmed``, its ``mask_sha256``), so its gain was not measured on these
    weights; one line with both sha256 whole, the likely causes and the ways out. ``None`` when the masks are the
    same or the confirmation records no mask.

    Why: the recipe, the base and every deciding key are compared before the model loads
    (:func:`recipe_from_sweep`), but not the contents of local data files (another file of the same name) nor a
    device's ties near a threshold; such a run used to be released with the confirmed gain on its card.

    Example:
        >>> mask_refusal("a" * 64, "a" * 64) is None, mask_refusal("b" * 64, None) is None
        (True, True)
        >>> mask_refusal("b" * 64, "a" * 64)[:46]
        "--from-sweep: this run's mask (sha256 bbbbbbbb"
    """
    if not confirmed or mask_sha256 == confirmed:
        return None
    return (
        f"--from-sweep: this run's mask (sha256 {mask_sha256}) is not the mask the sweep's confirmation tested "
        f"(sha256 {confirmed}), so the confirmed gain was not measured on these weights; likely causes: local data "
        "files with other contents than the sweep's (a file of the same name), or another device's float ties near "
        "a selection threshold; run on the sweep's data files and device, re-run the sweep on these, or release "
        "without --from-sweep (which makes no confirmed claim)"
    )


@dataclass(frozen=True)
class SweepEvidence:
    """What a release takes from a sweep whose candidate was confirmed (read with :func:`read_sweep`)."""

    top_k: float | dict[str, float]  # a map per layer band and component from sweep.search: optuna
    scale: float | dict[str, float]
    selection_sha256: tuple[str, ...]
    confirmation: dict[str, Any]
    selection_point: dict[str, Any]
    n_settings: int
    sweep_sha256: str
    recipe: dict[str, Any]
    selection_base_correct: int | None = None
    base_identity: dict[str, Any] = field(default_factory=dict)  # the model the sweep measured, by content

    def lock_entry(self) -> dict[str, Any]:
        """The lock's ``sweep`` section: the sweep file's hash, the chosen setting, the selection and the
        confirmation, each with its problems' sha256 for the run to count its own evaluation's overlap with them
        (:func:`~mathneuro_edit.runs.steps.seal.evidence_with_overlap`), which records the section without those
        lists (:func:`~mathneuro_edit.runs.steps.seal.without_problem_lists`: they stay in the sweep folder)."""
        c = self.confirmation
        ev = self.recipe.get("evaluation") if isinstance(self.recipe.get("evaluation"), dict) else {}
        own = {k: ev.get(k) for k in _PROMPT_KEYS}  # the recipe's own prompt format: the primary one's
        return {
            "sweep_sha256": self.sweep_sha256,
            "base_identity": dict(self.base_identity),
            "top_k": self.top_k,
            "scale": self.scale,
            "variant": self.confirmation.get("variant") or "",
            "variant_set": [public_override(o) for o in self.confirmation.get("variant_set") or []],
            "settings": self.n_settings,
            "selection": {
                "n": len(self.selection_sha256),
                "problems_sha256": list(self.selection_sha256),
                "base_correct": self.selection_base_correct,
                **{k: self.selection_point.get(k) for k in _SELECTION_KEYS},
            },
            "confirmation": {k: c.get(k) for k in _CONFIRMATION_KEYS}
            | {"compute_dtype": c.get("compute_dtype") or recipe_compute_dtype(self.recipe)},
            "controls": [
                {k: x.get(k) for k in ("name", "method", "seed", "selected", "mask_sha256", "general")}
                for x in c.get("controls") or []
                if isinstance(x, dict)
            ],
            "formats": [_format_entry(f, own) for f in c.get("formats") or [] if isinstance(f, dict)],
            "problems": {"source": ev.get("math"), "seed": ev.get("seed")},
        }


# what the lock and the card keep of the chosen point, the confirmation and an arm (their per-problem data stays in
# the sweep folder)
_SELECTION_KEYS = ("math_correct", "math_total", "mcnemar_p", "holm_p", "general_kl")
_CONFIRMATION_KEYS = (
    "n base_correct edited_correct base_only edited_only mcnemar_p alpha confirmed mask_sha256 problems_sha256 verdict "
    "weights_dtype general"
).split()
_ARM_KEYS = ("n", "correct", "answered", "restarts", "no_number", "correct_among_answers")


# the evaluation settings that make a prompt format (what a card's snippet needs to prompt as the confirmation did)
_PROMPT_KEYS = ("n_shot", "chat_template", "prompt_style", "max_new_tokens")


def recipe_compute_dtype(recipe: Mapping[str, Any]) -> str | None:
    """The dtype a (public) recipe's model computed in, for a sweep.json written before the confirmation recorded
    its ``compute_dtype``: ``base.dtype`` when set, float32 for a GGUF base (dequantized to float32), else ``None``
    (the base's own dtype, not recorded).

    Example:
        >>> recipe_compute_dtype({"base": {"dtype": "float32"}}), recipe_compute_dtype({"base": {"dtype": "auto"}})
        ('float32', None)
    """
    base = recipe.get("base") if isinstance(recipe.get("base"), Mapping) else {}
    dtype = base.get("dtype")
    if dtype in ("float32", "bfloat16", "float16"):
        return str(dtype)
    return "float32" if base.get("gguf_file") else None


def _format_entry(f: Mapping[str, Any], own_prompt: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One prompt format of a confirmation as the lock records it: its verdict, its prompt settings (the recipe's
    own, ``own_prompt``, for the primary format, which the sweep file leaves ``null``), each arm's counts (overall,
    by form, by operation) and each paired test's counts and p."""
    arms = f.get("arms") if isinstance(f.get("arms"), dict) else {}
    prompt = f.get("prompt") if f.get("prompt") is not None or not f.get("primary") else own_prompt
    return {
        "name": f.get("name"),
        "primary": f.get("primary"),
        "prompt": dict(prompt) if isinstance(prompt, Mapping) else prompt,
        "n": f.get("n"),
        "verdict": f.get("verdict"),
        "arms": {
            str(name): {
                **{k: a.get(k) for k in _ARM_KEYS},
                "by_operation": {
                    str(op): {k: v.get(k) for k in ("n", "correct", "answered")}
                    for op, v in (a.get("by_operation") or {}).items()
                    if isinstance(v, dict)
                },
            }
            for name, a in arms.items()
            if isinstance(a, dict)
        },
        "tests": [
            {k: t.get(k) for k in ("before", "after", "answered_only", "n", "before_only", "after_only", "mcnemar_p")}
            for t in f.get("tests") or []
            if isinstance(t, dict)
        ],
    }


MAX_SWEEP_BYTES = 64 * 1024 * 1024  # a sweep.json lists its points and each problem's sha256: a few MB
MAX_PROBLEMS = 20_000  # problems of a selection or a confirmation (the recipe's default confirms on 600)
MAX_POINTS = 10_000  # grid points of one sweep
_SHA = re.compile(r"[0-9a-f]{64}")
_POINT_NUMBERS = (
    "top_k scale selected math_correct math_total math_accuracy mcnemar_p holm_p general_kl general_loss".split()
)


def _shown(value: Any, limit: int | None = 80) -> str:
    """A value as one safe line of at most ``limit`` characters: ``repr`` escapes every character that is not
    printable (a newline of a template, ESC, the other controls, bidi overrides), so none is shown raw. A recipe's
    own value is shown whole (``limit=None``), so two values that differ never print alike."""
    return repr(value)[:limit]


def _gist(text: str, limit: int = 300) -> str:
    """The first sentence of a sweep's recommendation without its bracketed details, escaped as :func:`_shown`
    does and cut only between words (``...`` marks a cut): a refusal names what the confirmation measured, and
    never cuts a figure in two (it once read "(22.3% -> 2").

    Example:
        >>> _gist("nothing confirmed: X (22.3% -> 23.2%) did not confirm: 14.5% -> 14.4% [a | b]; do not publish")
        'nothing confirmed: X did not confirm: 14.5% -> 14.4%'
        >>> _gist("a 12.5% b 13.5% c", 12)
        'a 12.5% ...'
    """
    text = text[:4000]  # a recommendation is a few hundred characters; a longer one is not read further
    for _ in range(8):  # innermost groups first: "(...)" within "[...]"
        text = re.sub(r"\s*(\([^()\[\]]*\)|\[[^()\[\]]*\])", "", text)
    shown = repr(" ".join(text.split(";")[0].split()))[1:-1]
    if len(shown) <= limit:
        return shown
    cut = shown.rfind(" ", 0, limit - 3)
    return shown[: cut if cut > 0 else limit - 4] + " ..."


def _edited(what: str) -> InputError:
    """The refusal of a field this version never writes so: ``what`` is wrong, and how to get a good file."""
    return InputError(f"{what}; the file was edited: re-run the sweep")


def _count(c: Mapping[str, Any], key: str, most: int, where: str) -> int:
    v = c.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= most:
        raise _edited(f"{where}.{key}: must be an integer in [0, {most}], got {_shown(v)}")
    return v


def _is_number(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)


def _nonnegative(v: Any, where: str) -> Any:
    if not (_is_number(v) and v >= 0):
        raise _edited(f"{where}: must be a finite number >= 0, got {_shown(v)}")
    return v


def _fraction(v: Any, where: str, low_open: bool = False, high_open: bool = False, optional: bool = False) -> Any:
    if v is None and optional:
        return v
    if not (_is_number(v) and (0 < v if low_open else 0 <= v) and (v < 1 if high_open else v <= 1)):
        interval = f"{'(' if low_open else '['}0, 1{')' if high_open else ']'}"
        raise _edited(f"{where}: must be a number in {interval}, got {_shown(v)}")
    return v


def _hashes(v: Any, where: str) -> list[str]:
    if not isinstance(v, list) or len(v) > MAX_PROBLEMS or not all(isinstance(h, str) and _SHA.fullmatch(h) for h in v):
        raise _edited(f"{where}: must be a list of at most {MAX_PROBLEMS:,} sha256 (64 hex digits)")
    return v


def _point(p: Any, where: str) -> dict[str, Any]:
    if not isinstance(p, dict):
        raise _edited(f"{where}: must be a mapping of a grid point's results, got {type(p).__name__}")
    for key in _POINT_NUMBERS:
        v = p.get(key)
        if key in ("top_k", "scale") and isinstance(v, dict):  # an Optuna trial's map: its values are the numbers
            _setting(v, f"{where}.{key}", key)
        elif v is not None:
            _nonnegative(v, f"{where}.{key}")
    return p


def _setting(value: Any, where: str, key: str) -> Any:
    """A confirmed ``top_k`` or ``scale``: a number (a fraction in (0, 1], a finite number >= 0), or a map of them
    per layer band and component (:mod:`~mathneuro_edit.engine.edit_map`: ``default`` and keys of its forms)."""
    for v in value.values() if isinstance(value, dict) else [value]:
        if key == "top_k":
            _fraction(v, where, low_open=True)
        else:
            _nonnegative(v, where)
    if isinstance(value, dict):
        try:
            check_map(value)
        except ValueError as e:
            raise _edited(f"{where}: {_shown(str(e), 160)}") from None
    return value


def _override(value: Any) -> str:
    """A confirmed setting as the value of a ``--set`` override: a number's repr, a map as JSON (a YAML flow map)."""
    return json.dumps(value) if isinstance(value, dict) else repr(value)


def _load(path: Path) -> tuple[bytes, Any]:
    """The bytes and JSON of a shared ``sweep.json``: a regular file (a FIFO would block, a device never end) of at
    most :data:`MAX_SWEEP_BYTES`, nested no deeper than the parser allows."""
    try:
        fd, st = open_regular(path, "pass the --out folder of a `mathneuro-edit sweep`")
        with os.fdopen(fd, "rb") as f:
            if st.st_size > MAX_SWEEP_BYTES:
                raise InputError(
                    f"{path}: {st.st_size:,} bytes, more than a sweep.json holds ({MAX_SWEEP_BYTES:,}); re-run the sweep"
                )
            raw = f.read(MAX_SWEEP_BYTES + 1)
        if len(raw) > MAX_SWEEP_BYTES:
            raise InputError(f"{path}: more than a sweep.json holds ({MAX_SWEEP_BYTES:,} bytes); re-run the sweep")
        return raw, json.loads(raw)
    except InputError:  # a ValueError too
        raise
    except FileNotFoundError:
        raise InputError(f"{path}: not found; pass the --out folder of a `mathneuro-edit sweep`") from None
    except RecursionError:
        raise InputError(f"{path}: nested too deep to be a sweep.json; re-run the sweep") from None
    except (OSError, ValueError) as e:
        raise InputError(f"{path}: cannot read it as JSON ({_shown(str(e), 120)}); re-run the sweep") from None


# the paired tests a confirmed boost rests on (:func:`~.procedure.format_verdict`), in the recipe's own
# prompt format: (the arm it is tested against, only the problems both answered)
_REQUIRED_TESTS = (("base", False), ("base", True), ("general-specific", False))


def _check_controls(c: Mapping[str, Any], n: int, alpha: float, where: str) -> None:
    """A confirmation that says confirmed must show it: its verdict is a math boost and, in the recipe's own prompt
    format, the candidate's counts beat the base, the base among the problems both answered, and the
    magnitude-matched control, each by an exact McNemar p below ``alpha`` recomputed from the counts here (a
    sweep written before the controls, or a verdict its own counts do not support, is refused).
    """
    formats = c.get("formats")
    if not isinstance(formats, list) or not formats or not isinstance(formats[0], dict):
        raise InputError(
            f"{where}: no control edits or prompt formats (a sweep.json written before the confirmation tested the "
            "candidate against control edits); re-run the sweep"
        )
    primary = formats[0]
    tests = primary.get("tests") if isinstance(primary.get("tests"), list) else []
    found = {
        (t.get("before"), t.get("answered_only")): t
        for t in tests
        if isinstance(t, dict) and t.get("after") == "candidate"
    }
    if c.get("verdict") != "math-boost" or primary.get("verdict") != "math-boost":
        raise _edited(f"{where}: says confirmed, but its verdict is {_shown(c.get('verdict'))}, not math-boost")
    for arm, answered in _REQUIRED_TESTS:
        t = found.get((arm, answered))
        label = f"the candidate against {arm}" + (" (problems both answered)" if answered else "")
        if t is None:
            raise _edited(f"{where}: says confirmed, but has no test of {label}")
        # a test's own n: all problems, or only those both arms answered (never more than the confirmation's)
        tn = _count(t, "n", n, where)
        b, k = _count(t, "before_only", n, where), _count(t, "after_only", n, where)
        if b + k > tn or not (k > b and mcnemar_exact(b, k) < alpha):
            raise _edited(
                f"{where}: says confirmed, but its test of {label} ({k} vs {b} discordant, "
                f"{format_p(mcnemar_exact(b, k))}, level {alpha:g}) does not show a gain"
            )


def _confirmed(path: Path, data: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(selection, confirmation)`` of a sweep.json of this contract whose confirmation says confirmed."""
    if not isinstance(data, dict) or not isinstance(data.get("selection"), dict) or "confirmation" not in data:
        raise InputError(
            f"{path}: not a sweep.json with selection and confirmation (written before select-then-"
            "confirm?); re-run the sweep"
        )
    c = data["confirmation"]
    if not (isinstance(c, dict) and c.get("confirmed") is True):
        why = _gist(str(data.get("recommendation") or "nothing confirmed"))
        raise InputError(f"{path}: nothing was confirmed ({why}); there is no setting to release from this sweep")
    return data["selection"], c


def _confirmation_counts(c: Mapping[str, Any], n: int, where: str) -> tuple[int, int, float]:
    """The confirmation's ``(base_only, edited_only, alpha)`` in range (the discordant counts within its ``n``
    problems), its p-value in [0, 1] and its mask a sha256."""
    b, k = _count(c, "base_only", n, where), _count(c, "edited_only", n, where)
    for key in ("base_correct", "edited_correct"):
        _count(c, key, n, where)
    if b + k > n:
        raise _edited(f"{where}: {b} + {k} discordant problems of {n}")
    alpha = _fraction(c.get("alpha"), f"{where}.alpha", low_open=True, high_open=True)
    _fraction(c.get("mcnemar_p"), f"{where}.mcnemar_p", optional=True)
    mask = c.get("mask_sha256")
    if mask not in (None, "") and not (isinstance(mask, str) and _SHA.fullmatch(mask)):
        raise _edited(f"{where}.mask_sha256: must be a sha256 (64 hex digits) or empty")
    return b, k, alpha


def _chosen_point(
    path: Path, sel: Mapping[str, Any], c: Mapping[str, Any], where: str
) -> tuple[list[Any], int, Any, Any]:
    """``(points, chosen index, top_k, scale)``: every selection point checked, the confirmed one among them."""
    points = sel.get("points")
    if not isinstance(points, list) or not 0 < len(points) <= MAX_POINTS:
        raise _edited(f"{path}: selection.points: must be a list of 1 to {MAX_POINTS:,} grid points")
    for i, p in enumerate(points):
        _point(p, f"{path}: selection.points[{i}]")
    chosen = c.get("point")
    if isinstance(chosen, bool) or not isinstance(chosen, int) or not 0 <= chosen < len(points):
        raise _edited(
            f"{where}.point: must be the index of a selection point (0 to {len(points) - 1}), got {_shown(chosen)}"
        )
    top_k = _setting(c.get("top_k"), f"{where}.top_k", "top_k")
    scale = _setting(c.get("scale"), f"{where}.scale", "scale")
    return points, chosen, top_k, scale


def _base_correct(path: Path, sel: Mapping[str, Any], n_selection: int) -> Any:
    """The base's correct count on the selection (``None`` in older files), within the selection's size."""
    base = sel.get("base") if isinstance(sel.get("base"), dict) else {}
    if base.get("math_correct") is None:
        return None
    return _count(base, "math_correct", n_selection, f"{path}: selection.base")


_COMMIT = re.compile(r"[0-9a-f]{40}")
_HUB_ID = re.compile(r"[A-Za-z0-9_][\w.-]{0,95}(/[A-Za-z0-9_][\w.-]{0,95})?")
_WEIGHTS_FILE = re.compile(r"[^/\\\x00-\x1f\x7f]{1,200}\.safetensors(\.index\.json)?")


def _base_identity(value: Any, path: Path) -> dict[str, Any]:
    """The sweep's ``base_identity``, in one of the three forms
    :func:`~mathneuro_edit.runs.steps.export.base_identity` writes (none: how to add it to an older file)."""
    if value is None:
        raise InputError(
            f"{path}: records no base_identity (written before a sweep recorded the model it measured), so its "
            "gain cannot be bound to a base; re-run the sweep, or, holding the very model it ran on, add it to "
            'the file: "base_identity": {"gguf_sha256": "<sha256sum of the .gguf>"} (a model folder: '
            '{"weights_sha256": {"<file>.safetensors": "<sha256>"}}; docs/releasing.md)'
        )
    ok = isinstance(value, dict) and (
        (
            set(value) == {"gguf_sha256"}
            and isinstance(value["gguf_sha256"], str)
            and _SHA.fullmatch(value["gguf_sha256"])
        )
        or (
            set(value) == {"weights_sha256"}
            and isinstance(value["weights_sha256"], dict)
            and 0 < len(value["weights_sha256"]) <= 10_000
            and all(
                isinstance(k, str) and _WEIGHTS_FILE.fullmatch(k) and isinstance(v, str) and _SHA.fullmatch(v)
                for k, v in value["weights_sha256"].items()
            )
        )
        or (
            set(value) == {"hub_id", "revision"}
            and all(isinstance(value[k], str) for k in value)
            and _HUB_ID.fullmatch(value["hub_id"])
            and _COMMIT.fullmatch(value["revision"])
        )
    )
    if not ok:
        raise _edited(
            f"{path}: base_identity: must be {{gguf_sha256}}, {{weights_sha256}} or {{hub_id, revision}} of the "
            f"model the sweep ran on, got {_shown(value)}"
        )
    return dict(value)


def read_sweep(sweep_dir: str | Path) -> SweepEvidence:
    """The confirmed setting of a sweep folder. A sweep.json may come from someone else: it is data, checked
    before use (:func:`_load`: a regular file of bounded size; every field the release takes of the right type and
    range: counts within the problems, ``alpha`` in (0, 1), p-values in [0, 1], points of non-negative numbers,
    problem lists of sha256 that do not overlap), and nothing of it is shown unescaped. Anything else, or nothing
    confirmed, is an :class:`InputError` line.
    """
    path = Path(sweep_dir) / SWEEP_JSON
    raw, data = _load(path)
    sel, c = _confirmed(path, data)
    where = f"{path}: confirmation"
    selection = _hashes(sel.get("problems_sha256"), f"{path}: selection.problems_sha256")
    problems = _hashes(c.get("problems_sha256"), f"{where}.problems_sha256")
    n = _count(c, "n", MAX_PROBLEMS, where)
    if n != len(problems):
        raise _edited(f"{where}.n: {n}, but it lists {len(problems)} problems")
    b, k, alpha = _confirmation_counts(c, n, where)
    points, chosen, top_k, scale = _chosen_point(path, sel, c, where)
    base_correct = _base_correct(path, sel, len(selection))
    if not isinstance(data.get("recipe"), dict):
        raise InputError(f"{path}: recipe: must be the sweep's recipe (a mapping); re-run the sweep")
    p = mcnemar_exact(b, k)
    if not (k > b and p < alpha and set(problems).isdisjoint(selection)):
        raise _edited(
            f"{path}: its confirmation says confirmed, but its counts ({b} right only before, {k} only after: "
            f"{format_p(p)}, level {alpha:g}) or its problem lists do not"
        )
    _check_controls(c, n, alpha, where)
    identity = _base_identity(data.get("base_identity"), path)
    return SweepEvidence(
        dict(top_k) if isinstance(top_k, dict) else float(top_k),
        dict(scale) if isinstance(scale, dict) else float(scale),
        tuple(selection),
        dict(c),
        dict(points[chosen]),
        len(points),
        hashlib.sha256(raw).hexdigest(),
        dict(data["recipe"]),
        base_correct,
        identity,
    )


def recipe_from_sweep(
    recipe: Recipe, evidence: SweepEvidence, where: str = "--from-sweep", *, base: Mapping[str, Any] | None = None
) -> Recipe:
    """``recipe`` with the confirmed ``mask.top_k`` and edit (``scale``, or ``prune`` for 0), when its base is the
    model the sweep measured (:func:`base_difference`; ``base``: its identity, by default
    :func:`~mathneuro_edit.runs.steps.export.base_identity`, which hashes its files), every key that decides the
    weights has the sweep's value (:func:`release_difference`) and the confirmed variant is one of its own
    (:func:`_own_variant`); else an :class:`InputError` line.
    """
    found = release_difference(recipe.public_dict(), evidence.recipe)
    if found is not None:
        name, a, b = found
        raise InputError(
            f"{where}: the recipe's {name} differs from the sweep's ({_shown(a, None)} vs {_shown(b, None)}); the "
            "confirmed setting holds only for the sweep's recipe: use it, or sweep this one"
        )
    model = recipe.base.model + (f" ({recipe.base.gguf_file})" if recipe.base.gguf_file else "")
    other = base_difference(base_identity(recipe.base) if base is None else base, evidence.base_identity, model)
    if other is not None:
        raise InputError(
            f"{where}: {other}; the confirmed gain was measured on that model only: release from it, or sweep this one"
        )
    edit = ["edit.prune=true"] if evidence.scale == 0 else [f"edit.scale={_override(evidence.scale)}"]
    variant = _own_variant(recipe, evidence.confirmation, where)
    stale = _replaced_provenance(recipe.resolved_dict(), variant)
    return recipe_from_dict(
        recipe.resolved_dict(), [*variant, *stale, f"mask.top_k={_override(evidence.top_k)}", *edit], where=where
    )


def _own_variant(recipe: Recipe, confirmation: Mapping[str, Any], where: str) -> list[str]:
    """The overrides of the confirmed variant, taken from the recipe's own ``sweep.variants``: the one whose name
    and overrides are exactly the confirmation's ``variant`` and ``variant_set`` (``[]``: the recipe itself).

    Why from the recipe, never from the file: a sweep.json may be someone else's, and its overrides were applied
    after a prefix check only, so it could make the release read a local file (``data.math.path=/etc/...``),
    hang in a catastrophic ``targets.include`` regex or exhaust memory with a template. The file now only names
    which of the recipe's variants was confirmed; the recipe's own text is what is applied (a variant the recipe
    does not have with exactly those overrides is refused).
    """
    name, given = confirmation.get("variant") or "", confirmation.get("variant_set") or []
    if name == "" and given == []:
        return []
    for v in recipe.sweep.variants:
        if v.name == name and list(v.set) == given:
            return list(v.set)
    own = ", ".join(v.name for v in recipe.sweep.variants) or "it has none"
    raise InputError(
        f"{where}: the sweep confirmed variant {_shown(name, 60)} with overrides {_shown(given, 120)}, which "
        f"is not one of this recipe's sweep.variants ({own}) with exactly those overrides; a sweep.json cannot "
        "choose recipe settings: pass the recipe the sweep ran, or sweep this one"
    )


def _replaced_provenance(resolved: Mapping[str, Any], variant: list[str]) -> list[str]:
    """``data.X.hub_dataset=null`` for each data source whose path the confirmed variant replaces without naming
    its origin: the recipe's ``hub_dataset`` describes the recipe's file, not the variant's (SmolLM2's
    ``arith-calib`` calibrates on generated arithmetic, not on GSM8K), and a card must not name it."""
    keys = {v.split("=", 1)[0].strip() for v in variant}
    data = resolved["data"]
    sources = {"data.math": data["math"], **{f"data.general.{i}": g for i, g in enumerate(data["general"])}}
    return [
        f"{prefix}.hub_dataset=null"
        for prefix, source in sources.items()
        if f"{prefix}.path" in keys and f"{prefix}.hub_dataset" not in keys and source.get("hub_dataset")
    ]


def run_from_sweep(recipe: Recipe | str | Path, sweep_dir: str | Path, out_dir: str | Path, **kwargs: Any):
    """``run`` with the setting a sweep confirmed: the lock records the sweep's evidence and the card states it
    (:func:`~mathneuro_edit.runs.pipeline.run_recipe` with ``sweep_evidence``); a mask that is not the one the
    confirmation tested is refused before anything is written (:func:`mask_refusal`)."""
    inputs = [("sweep folder", sweep_dir)]  # read, never written: a release into it replaced the sweep (issue 41)
    inputs += [("recipe", recipe)] if isinstance(recipe, (str, Path)) else []
    recipe = as_recipe(recipe)
    check_output(out_dir, [*recipe.local_inputs(), *inputs], kind="dir")  # before anything is read or loaded
    evidence = read_sweep(sweep_dir)
    return run_recipe(
        recipe_from_sweep(recipe, evidence),
        out_dir,
        sweep_evidence=evidence.lock_entry(),
        inputs=inputs,
        check_mask=partial(mask_refusal, confirmed=evidence.confirmation.get("mask_sha256")),
        **kwargs,
    )
