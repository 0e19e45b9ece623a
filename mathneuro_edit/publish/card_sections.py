"""What the model card shows from the lock alone: the base, the data, reproducing, versions, a sweep's evidence.

The card's text is its template (``card_template.md``); these functions give it data, every text taken from a
file escaped (:func:`card_text`). Every function reads the lock's public form (no local path can reach the card
through here); the snippets that differ per output live in that output's module (:mod:`mathneuro_edit.outputs`).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from ..engine.edit_map import show_setting
from ..evaluation.report import format_p
from ..evaluation.significance import wilson_interval
from ..outputs.common import BASE_ENV, BASE_GGUF_ENV, base_kind, hub_origin, label, lock_base
from .model_index import prompt_format

__all__ = [
    "PROJECT_URL",
    "pct",
    "base_facts",
    "data_rows",
    "reproduce_args",
    "local_files",
    "version_rows",
    "sweep_facts",
    "gain_operations",
    "figures_prompt",
    "card_text",
]

PROJECT_URL = "https://github.com/mathneuro-edit/mathneuro-edit"  # pyproject.toml's [project.urls] Repository


def _described(lock: Mapping[str, Any]) -> str:
    desc = lock_base(lock).get("description") or {}
    arch, mtype = desc.get("architecture"), desc.get("model_type")
    params = (lock.get("edit_summary") or {}).get("model_params")
    parts = [
        card_text(arch) if arch else "",
        f"model type {card_text(mtype)}" if mtype else "",
        f"{params:,} parameters" if params else "",
    ]
    return ", ".join(p for p in parts if p)


def base_facts(lock: Mapping[str, Any]) -> dict[str, Any]:
    """What the card says of the base (``card_template.md``'s ``base_sentence`` and ``## Base model``): its kind
    (``hub``, ``organism``, ``local``), a Hub base's id and revision, what a local base's config describes, its
    weight files' sha256, a local base's variable (``env``), GGUF entry (with its own metadata's name and
    organization) and Hub origin (``base.hub_id``)."""
    base, kind = lock_base(lock), base_kind(lock)
    gguf, (origin, origin_revision) = base.get("gguf") or None, hub_origin(lock)
    own = (gguf or {}).get("general") or {}
    shown = {"file": (gguf or {}).get("file"), "name": own.get("name"), "organization": own.get("organization")}
    return {
        "kind": kind,
        "model": base.get("model"),
        "revision": base.get("revision") or "main (not resolved)",
        "short_revision": base["revision"][:12] if base.get("revision") else None,
        "described": _described(lock),
        "files": [{"name": card_text(n), "sha256": sha} for n, sha in (base.get("weights_sha256") or {}).items()],
        "gguf_file": gguf,
        "gguf_text": {k: card_text(v) for k, v in shown.items() if v},  # its file and its own metadata's names
        "env": BASE_GGUF_ENV if gguf else BASE_ENV,
        "hub_id": origin,
        "hub_revision": origin_revision,
    }


def data_rows(lock: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The calibration sets' rows: set, source, split, texts, the sha256 of the sampled texts (and of a local
    file, as a code span, or ``""``)."""
    rows = []
    for name in ("math", "general"):
        for rec in (lock.get("data") or {}).get(name) or []:
            src = rec.get("source") or {}
            rows.append(
                {
                    "set": name,
                    "source": card_text(src.get("path", "")),
                    "split": card_text(src.get("split") or ""),
                    "texts": rec.get("n_sampled", ""),
                    "sha256": rec.get("sha256", ""),
                    "file_sha256": f"`{rec['file_sha256']}`" if rec.get("file_sha256") else "",
                }
            )
    return rows


# line breaks and tabs by their usual escapes; any other character a renderer or terminal would act on by its code
_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r", "\\": "\\\\"}


def _escaped(c: str) -> str:
    if c in _NAMED:
        return _NAMED[c]
    if c.isprintable():
        return c
    return f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}" if ord(c) < 0x10000 else f"\\U{ord(c):08x}"


def card_text(value: Any) -> str:
    r"""Any string the card takes from a file (a file name, an ``eval.json`` task or metric name or value, the
    base's ``architectures[0]`` and ``model_type``, a GGUF's own name, a library version): one inline code span,
    in which Markdown and HTML are shown as written and never acted on; ``""`` for an empty value.

    Why one rule: these files are someone else's (``push`` renders the card again from ``eval.json``, which the
    lock does not cover; a base's ``config.json`` comes from its author). Inside a code span nothing is a heading,
    a tag or a link; the span cannot be left because a backtick becomes ``'``, cannot end its line because line
    breaks, control and bidi characters are escaped (``\n``, ``\x1b``, ``\u202e``; a backslash doubled), and cannot
    split a table row because ``|`` is escaped.

    Example:
        >>> print(card_text("x`\n## Injected <img src=x onerror=alert(1)>"))
        `x'\n## Injected <img src=x onerror=alert(1)>`
    """
    text = "".join(_escaped(c) for c in str(value)).replace("`", "'").replace("|", "\\|")
    return f"`{text}`" if text else ""


def _shell(arg: str) -> str:
    """One bash argument, quoted: ``shlex.quote``, or ANSI-C ``$'...'`` when it holds a control character (so a
    newline in a file name keeps the printed command on one line)."""
    if arg.isprintable():
        return shlex.quote(arg)
    body = "".join(
        c
        if c.isprintable() and c not in "\\'"
        else {"\\": "\\\\", "'": "\\'", "\n": "\\n", "\t": "\\t"}.get(
            c, f"\\x{ord(c):02x}" if ord(c) < 256 else f"\\u{ord(c):04x}"
        )
        for c in arg
    )
    return f"$'{body}'"


def reproduce_args(repo: str | None, lock: Mapping[str, Any]) -> str:
    """The arguments of the card's ``mathneuro-edit reproduce`` command: the repo (``None``: ``.``, a card in its
    local folder), then ``--base`` and ``--set`` for the local paths the public lock redacts, each shell-quoted (a
    data file name holding ``;``, a space or a newline stays one argument)."""
    args = [repo or "."]
    if base_kind(lock) == "local":
        args.append(f'--base "${BASE_GGUF_ENV if lock_base(lock).get("gguf") else BASE_ENV}"')
    return " ".join(args + ["--set " + _shell(f"{k}={e['name']}") for k, e in (lock.get("files") or {}).items()])


def local_files(lock: Mapping[str, Any]) -> list[dict[str, str]]:
    """The local calibration/evaluation files ``reproduce`` needs: recipe key, file name (escaped), sha256."""
    return [
        {"key": k, "name": card_text(e["name"]), "sha256": e["sha256"]} for k, e in (lock.get("files") or {}).items()
    ]


def version_rows(lock: Mapping[str, Any]) -> list[dict[str, str]]:
    """The library versions the edit was made with, as the card's rows (``tool``: mathneuro-edit)."""
    versions = lock.get("versions") or {}
    return [
        {"name": "mathneuro-edit" if k == "tool" else card_text(k), "version": card_text(v)}
        for k, v in versions.items()
    ]


def pct(part: int, whole: int, digits: str = ".1f", none: str = "-") -> str:
    """``part`` as a percentage of ``whole`` in the format ``digits`` (the card's tables: ``.1f``; its share of
    the weights edited: ``.3g``), or ``none`` when ``whole`` is 0.

    Example:
        >>> pct(1, 3), pct(1, 3, ".3g", "n/a"), pct(1, 0)
        ('33.3%', '33.3%', '-')
    """
    return f"{100 * part / whole:{digits}}%" if whole else none


def _ci(k: int, n: int) -> str:
    lo, hi = wilson_interval(int(k), int(n))
    return f"{100 * lo:.1f}-{100 * hi:.1f}"


def _g(x: Any) -> str:
    return f"{x:.3g}" if isinstance(x, (int, float)) else "?"


def _p(p: Any) -> str:
    return format_p(float(p)) if isinstance(p, (int, float)) else "p = ?"


_OPERATIONS = {"+": "addition", "-": "subtraction", "*": "multiplication", "/": "division"}
_OPERATIONS.update({"\u00d7": "multiplication", "\u00f7": "division"})


def gain_operations(formats: list[Mapping[str, Any]]) -> list[str]:
    """The operations (words) where the recipe's prompt format's candidate got more problems right than the base
    (``[]``: no per-operation record): what the headline names beside the confirmed gain.

    Example:
        >>> arm = lambda plus, minus: {"by_operation": {"+": {"correct": plus}, "-": {"correct": minus}}}
        >>> gain_operations([{"primary": True, "arms": {"base": arm(142, 36), "candidate": arm(168, 35)}}])
        ['addition']
    """
    base, cand = _by_operation(formats)
    ops = sorted(set(base) & set(cand))
    return [
        _OPERATIONS.get(op, "?") for op in ops if int(cand[op].get("correct") or 0) > int(base[op].get("correct") or 0)
    ]


def _by_operation(formats: list[Mapping[str, Any]]) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    """The per-operation records of the base and candidate arms of the recipe's prompt format (else the first)."""
    primary = next((f for f in formats if f.get("primary")), formats[0] if formats else {})
    arms = primary.get("arms") if isinstance(primary.get("arms"), Mapping) else {}
    return (arms.get("base") or {}).get("by_operation") or {}, (arms.get("candidate") or {}).get("by_operation") or {}


def _setting(value: Any) -> Any:
    """A confirmed top_k or scale as card text: a map (an Optuna trial's, ``sweep.search: optuna``) in its short
    form (``default 1, layers 0-9 mlp 1.1``), a number as it always was; a map whose keys are not a map's: ``?``."""
    if not isinstance(value, Mapping):
        return value
    try:
        return show_setting(value)
    except (ValueError, TypeError):
        return "?"


def sweep_facts(lock: Mapping[str, Any], chat: bool = False) -> dict[str, Any] | None:
    """What the card says of a ``run --from-sweep`` release (``None`` without one), for its first paragraph and its
    "Evidence for the boost": the selection, the confirmation (its prompt format in words, ``chat``: the model's
    tokenizer has a chat template), every prompt format's arms and tests against the controls, the recipe's format
    by operation, the general cost, and how the run's own evaluation overlaps the sweep's problems. Every name taken
    from the sweep file is a label (:func:`~mathneuro_edit.outputs.common.label`); the run's own evaluation is named a confirmation never."""
    sw = lock.get("sweep")
    if not isinstance(sw, Mapping):
        return None
    sel, c = sw.get("selection") or {}, sw.get("confirmation") or {}
    n, bc, ec = int(c.get("n") or 0), int(c.get("base_correct") or 0), int(c.get("edited_correct") or 0)
    formats = [f for f in sw.get("formats") or [] if isinstance(f, Mapping)]
    recipe_format = next((f for f in formats if f.get("primary")), None)
    base, cand = _by_operation(formats)
    by_operation = []
    for op in sorted(set(base) & set(cand)):
        b, e = base[op], cand[op]
        bn, en, bk, ek = (int(x.get(k) or 0) for x, k in ((b, "n"), (e, "n"), (b, "correct"), (e, "correct")))
        by_operation.append(
            {"op": _op(op), "n": bn, "from": pct(bk, bn), "to": pct(ek, bn)}
            | {
                "base": f"{b.get('correct')}/{b.get('n')} ({pct(bk, bn)})",
                "edited": f"{e.get('correct')}/{e.get('n')} ({pct(ek, en)})",
            }
        )
    g = c.get("general")
    return {
        "top_k": _setting(sw.get("top_k")),
        "scale": _setting(sw.get("scale")),
        "settings": sw.get("settings"),
        "sha256": sw.get("sweep_sha256"),
        "selection": {
            "n": int(sel.get("n") or 0),
            "correct": sel.get("math_correct"),
            "total": sel.get("math_total"),
            "base": sel.get("base_correct", "?"),
            "p": _p(sel.get("mcnemar_p")),
            "holm_p": _p(sel.get("holm_p")),
            "kl": _g(sel.get("general_kl")),
        },
        "confirmation": {
            "n": n,
            "from": pct(bc, n),
            "to": pct(ec, n),
            "base": f"{pct(bc, n)} ({bc}/{n}, {_ci(bc, n)})",
            "edited": f"{pct(ec, n)} ({ec}/{n}, {_ci(ec, n)})",
            "gain": f"{100 * (ec - bc) / n if n else 0:+.1f}",
            "base_only": c.get("base_only"),
            "edited_only": c.get("edited_only"),
            "p": _p(c.get("mcnemar_p")),
            "alpha": c.get("alpha"),
            "stored": label(c.get("weights_dtype")),
            "computed": label(c["compute_dtype"]) if c.get("compute_dtype") else None,
        },
        "prompt": prompt_format(recipe_format.get("prompt") if recipe_format is not None else None, chat),
        "gain_in": gain_operations(formats),
        "formats": bool(formats),
        "arm_rows": [row for f in formats for row in _arm_rows(f)],
        "others": [
            {"name": label(f.get("name")), "n": f.get("n"), "verdict": label(f.get("verdict"))}
            | {"confirmed": f.get("verdict") == "math-boost"}
            for f in formats
            if not f.get("primary")
        ],
        "by_operation": by_operation,
        "general": {
            "texts": g.get("texts"),
            "tokens": g.get("tokens"),
            "loss": _g(g.get("loss_change")),
            "se": _g(g.get("loss_change_se")),
            "kl": _g(g.get("kl")),
        }
        if isinstance(g, Mapping)
        else None,
        "overlap": sw.get("evaluation_overlap") or {},
    }


def _arm_rows(f: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One prompt format's rows of the evidence's table: each arm's accuracy, answer rate, accuracy among answers
    and the candidate's test against it; then the verdict, with the test among problems both answered."""
    arms = f.get("arms") if isinstance(f.get("arms"), Mapping) else {}
    tests = {
        (t.get("before"), t.get("answered_only")): t
        for t in f.get("tests") or []
        if isinstance(t, Mapping) and t.get("after") == "candidate"
    }
    rows: list[dict[str, Any]] = []
    for name, a in arms.items():
        if not isinstance(a, Mapping):
            continue
        n, k, ans = int(a.get("n") or 0), int(a.get("correct") or 0), int(a.get("answered") or 0)
        ra, t = int(a.get("correct_among_answers") or 0), tests.get((name, False))
        rows.append(
            {
                "format": label(f.get("name")) + (" (the recipe)" if f.get("primary") else ""),
                "n": n,
                "arm": label(name),
                "accuracy": f"{pct(k, n)} ({_ci(k, n)})",
                "answered": pct(ans, n),
                "among": f"{pct(ra, ans)} ({ra}/{ans})",
                "vs": "-"
                if t is None
                else f"{t.get('after_only')} vs {t.get('before_only')}, {_p(t.get('mcnemar_p'))}",
            }
        )
    both = tests.get(("base", True))
    if both is not None:
        rows.append(
            {
                "verdict": label(f.get("verdict")),
                "both": f"{both.get('after_only')} vs {both.get('before_only')}, {_p(both.get('mcnemar_p'))}",
            }
        )
    return rows


def _op(x: Any) -> str:
    """An operation symbol from a sweep file: one of the task's (``+ - * /``), else ``?``."""
    return x if isinstance(x, str) and len(x) == 1 and x in "+-*/\u00d7\u00f7" else "?"


def figures_prompt(lock: Mapping[str, Any]) -> dict[str, Any] | None:
    """The prompt the card's math figures were measured under, for its snippet
    (:attr:`~mathneuro_edit.outputs.registry.CardView.prompt`): a sweep's confirmation's (the recipe's own format,
    on the sweep's problems), else the run's own evaluation's; ``prefill``: the problems are arithmetic's, whose
    answer the prompt starts. ``None`` without an evaluation.

    Example:
        >>> ev = {"n_shot": 0, "chat_template": "auto", "max_new_tokens": 8, "math": {"path": "arithmetic"}}
        >>> figures_prompt({"recipe": {"evaluation": ev}})["prefill"]
        True
    """
    sw = lock.get("sweep")
    if isinstance(sw, Mapping):
        formats = [f for f in sw.get("formats") or [] if isinstance(f, Mapping)]
        prompt = next((f.get("prompt") for f in formats if f.get("primary")), None)
        problems = sw.get("problems") if isinstance(sw.get("problems"), Mapping) else {}
        source = problems.get("source") if isinstance(problems.get("source"), Mapping) else {}
        if isinstance(prompt, Mapping):
            return {**prompt, "prefill": source.get("path") == "arithmetic"}
    recipe = lock.get("recipe") if isinstance(lock.get("recipe"), Mapping) else {}
    ev = recipe.get("evaluation")
    if not isinstance(ev, Mapping):
        return None
    keys = ("n_shot", "chat_template", "prompt_style", "max_new_tokens")
    math = ev.get("math") if isinstance(ev.get("math"), Mapping) else {}
    return {**{k: ev.get(k) for k in keys}, "prefill": math.get("path") == "arithmetic"}
