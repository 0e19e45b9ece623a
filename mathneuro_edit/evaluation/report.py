"""Evaluation results as text: the before/after table (console and model card) and the one-line verdict.

Both read the dict form of :meth:`~mathneuro_edit.evaluation.results.EvalResults.to_dict` (= ``eval.json``), so a card
rebuilt from a saved ``eval.json`` shows exactly what the run printed. Cells:

- accuracy: ``62.0% (124/200, 55.1-68.4)``: percent, correct/n, 95% Wilson interval;
- its change: ``+3.5 pp, p = 0.21 (not significant)``: percentage points and the paired exact McNemar test;
- general loss: ``2.501 ± 0.031`` (standard error over texts); its change with the paired standard error.

Older ``eval.json`` files without counts or intervals still render (the missing parts are left out).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping
from typing import Any

__all__ = ["eval_markdown", "effect_sentence", "format_accuracy", "format_p", "NOT_A_TEST"]

Row = Mapping[str, Any]
_SKIP = {"math_correct", "math_total", "math_ci95_low", "math_ci95_high", "general_loss_se", "general_texts"}
_LABELS = {
    "math_accuracy": "math accuracy",
    "general_loss": "general loss (± SE)",
    "general_perplexity": "general perplexity",
    "general_kl": "general KL to base",
}


def _num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def format_p(p: float) -> str:
    """``p = 0.21`` / ``p < 0.001``.

    Example:
        >>> format_p(0.2134), format_p(0.00001), format_p(1.0)
        ('p = 0.213', 'p < 0.001', 'p = 1')
    """
    return "p < 0.001" if p < 0.001 else f"p = {p:.3g}"


def format_accuracy(row: Row) -> str:
    """``62.0% (124/200, 55.1-68.4)`` from a task row (``math_accuracy`` plus counts and interval when present).

    Example:
        >>> format_accuracy({"math_accuracy": 0.62, "math_correct": 124, "math_total": 200,
        ...                  "math_ci95_low": 0.5511, "math_ci95_high": 0.6844})
        '62.0% (124/200, 55.1-68.4)'
    """
    acc = row.get("math_accuracy")
    if not _num(acc):
        return "-"
    parts = []
    if _num(row.get("math_correct")) and _num(row.get("math_total")):
        parts.append(f"{int(row['math_correct'])}/{int(row['math_total'])}")
    if _num(row.get("math_ci95_low")) and _num(row.get("math_ci95_high")):
        parts.append(f"{100 * row['math_ci95_low']:.1f}-{100 * row['math_ci95_high']:.1f}")
    return f"{100 * acc:.1f}%" + (f" ({', '.join(parts)})" if parts else "")


def _value(key: str, row: Row, shown: Callable[[Any], str] = str) -> str:
    if key == "math_accuracy":
        return format_accuracy(row)
    v = row.get(key)
    if key == "general_loss" and _num(v) and _num(row.get("general_loss_se")):
        return f"{v:.4g} ± {row['general_loss_se']:.2g}"
    return _plain(v, shown)


# what a math change measured on a sweep's selection problems is said to be instead of (not) significant
NOT_A_TEST = "selection problems: biased upward, not a test"


def _change(key: str, base: Row, edited: Row, comparison: Row, tested: bool = True) -> str:
    b, e = base.get(key), edited.get(key)
    if key == "math_accuracy" and _num(b) and _num(e):
        text = f"{100 * (e - b):+.1f} pp"
        p = comparison.get("mcnemar_p")
        if _num(p) and not tested:
            text += f", {format_p(p)} ({NOT_A_TEST})"
        elif _num(p):
            text += f", {format_p(p)} ({'significant' if comparison.get('significant') else 'not significant'})"
        return text
    if key == "general_kl":
        return ""  # the edited value IS the change (the base's KL to itself is 0)
    if not (_num(b) and _num(e)):
        return "-"
    if key == "general_loss" and _num(comparison.get("loss_change_se")):
        return f"{e - b:+.4g} ± {comparison['loss_change_se']:.2g}"
    return f"{e - b:+.4g}"


def _row(*cells: str) -> str:
    return "| " + " | ".join(cells) + " |"


def _plain(x: Any, shown: Callable[[Any], str] = str) -> str:
    """A number as the card prints it (4 significant digits), ``-`` when missing."""
    return f"{x:.4g}" if _num(x) else ("-" if x is None else shown(x))


def eval_markdown(
    results: Mapping[str, Mapping[str, Row]], shown: Callable[[Any], str] = str, untested: Collection[str] = ()
) -> str:
    """The table (Markdown, ending in a newline): one row per metric; columns base / edited / change (just
    ``value`` without an edit).

    Args:
        results: ``{task: {"base": row, "edited": row, "comparison": {...}}}`` (eval.json); parts may be missing.
        shown: how a name or value taken from ``results`` is written (a task, an lm-eval task or metric, a value
            that is not a number): as it is on the console; the model card passes its escaping rule
            (:func:`~mathneuro_edit.publish.card_sections.card_text`), since eval.json may be someone else's.
        untested: tasks measured on problems the edit's setting was chosen on (a release from a sweep whose own
            evaluation reuses selection problems): their math change is shown with its p and :data:`NOT_A_TEST`,
            never "significant".

    Example:
        >>> print(eval_markdown({"m": {"base": {"math_accuracy": 0.5, "math_correct": 1, "math_total": 2}}}), end="")
        | task | metric | value |
        |---|---|---:|
        | m | math accuracy | 50.0% (1/2) |
    """
    with_edit = any(r.get("edited") for r in results.values())
    lines = (
        ["| task | metric | base | edited | change |", "|---|---|---:|---:|---|"]
        if with_edit
        else ["| task | metric | value |", "|---|---|---:|"]
    )
    for task, r in results.items():
        base, edited, comparison = r.get("base") or {}, r.get("edited") or {}, r.get("comparison") or {}
        keys = list(dict.fromkeys([*base, *edited]))
        for key in keys:
            if key in _SKIP or key == "predictions":
                continue
            if "/" in key:  # an lm-eval metric "{lm task}/{metric,filter}", shown with its n
                lm_task, _, metric = key.partition("/")
                if metric == "n" or "_stderr" in metric:
                    continue
                n = base.get(f"{lm_task}/n", edited.get(f"{lm_task}/n"))
                b, e = base.get(key), edited.get(key)
                name, _, filt = metric.partition(",")  # lm-eval's standard error: "{metric}_stderr,{filter}"
                se_key = f"{lm_task}/{name}_stderr" + (f",{filt}" if filt else "")

                def with_se(row: Row, value: Any) -> str:
                    se = row.get(se_key)  # noqa: B023 - with_se is called only in this iteration, just below
                    return f"{_plain(value)} ± {_plain(se)}" if _num(value) and _num(se) else _plain(value, shown)

                cells = [with_se(base, b)]
                if with_edit:  # lm-eval's metrics do not say which direction is better: a change without a verdict
                    cells += [with_se(edited, e), f"{e - b:+.4g}" if _num(b) and _num(e) else "-"]
                lines.append(_row(shown(f"{task}: {lm_task}"), f"{shown(metric)} (n={_plain(n, shown)})", *cells))
                continue
            label = _LABELS.get(key) or shown(key)
            if key == "general_loss" and not (_num(base.get("general_loss_se")) or _num(edited.get("general_loss_se"))):
                label = "general loss"
            if with_edit:
                b = "-" if key == "general_kl" else _value(key, base, shown)
                cells = [b, _value(key, edited, shown), _change(key, base, edited, comparison, task not in untested)]
            else:
                cells = [_value(key, base, shown)]
            lines.append(_row(shown(task), label, *cells))
    return "\n".join(lines) + "\n"


def effect_sentence(
    results: Mapping[str, Mapping[str, Row]] | None, shown: Callable[[Any], str] = lambda task: f"`{task}`"
) -> str:
    """One sentence on the math effect for the card's first paragraph ("" when nothing was paired); ``shown``
    writes the task's name (the card passes its escaping rule, as to :func:`eval_markdown`).

    A change that the paired test does not find significant is stated as no significant effect, so that a
    boost that did nothing is not presented as one.

    Example:
        >>> r = {"math": {"base": {"math_accuracy": 1.0, "math_total": 100}, "edited": {"math_accuracy": 1.0},
        ...               "comparison": {"mcnemar_p": 1.0, "significant": False, "base_only": 0, "edited_only": 0}}}
        >>> effect_sentence(r).startswith("**The edit has no significant effect on math accuracy**")
        True
    """
    parts = []
    for task, r in (results or {}).items():
        c, base, edited = r.get("comparison") or {}, r.get("base") or {}, r.get("edited") or {}
        p = c.get("mcnemar_p")
        if not (_num(p) and _num(base.get("math_accuracy")) and _num(edited.get("math_accuracy"))):
            continue
        n = base.get("math_total")
        before, after = (int(x) if _num(x) else "?" for x in (c.get("base_only"), c.get("edited_only")))
        moved = f"{before} problems right only before, {after} only after"  # numbers only: eval.json is data
        how = (
            f"{100 * base['math_accuracy']:.1f}% -> {100 * edited['math_accuracy']:.1f}% on "
            f"{int(n) if _num(n) else '?'} problems of {shown(task)}, {moved}; paired exact McNemar {format_p(p)}"
        )
        if c.get("significant"):
            word = "raised" if edited["math_accuracy"] > base["math_accuracy"] else "lowered"
            parts.append(f"The edit significantly {word} math accuracy ({how}).")
        else:
            parts.append(
                f"**The edit has no significant effect on math accuracy** ({how}): do not present it as a "
                "math improvement (or loss) over the base."
            )
    return " ".join(parts)
