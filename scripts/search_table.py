"""Render a finished boost search (sweep.json) as the markdown table of docs/results.md.

    python scripts/search_table.py docs/data/search-smollm2/sweep.json

One row per point (variant, top_k, scale, the round it reached, n, accuracy with its 95% Wilson interval, the
gain over the base on the same problems in percentage points, raw and Holm-adjusted exact McNemar p, general KL
(- where the selection never needed it)),
the base row first and the confirmation row last; then the confirmation's evidence (every prompt format: each arm's
accuracy, answer rate and accuracy among answers with 95% Wilson intervals, the paired tests against the candidate,
the verdict; by operation; the general cost) and the recommendation sentence.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _kl(kl: float | None) -> str:
    return "-" if kl is None else f"{kl:.3g}"  # null: ranked out before its KL was needed


def table(data: dict) -> str:
    sel = data["selection"]
    b = sel["base"]
    rows = [
        "| variant | top_k | scale | round | n | accuracy (95% CI) | gain (pp) | p | Holm p | general KL |",
        "|---|---:|---:|---:|---:|---|---:|---:|---:|---:|",
        f"| base | | | | {b['math_total']} | {100 * b['math_accuracy']:.1f}% ({100 * b['math_ci95_low']:.1f}-"
        f"{100 * b['math_ci95_high']:.1f}) | | | | |",
    ]
    for p in sorted(
        sel["points"], key=lambda p: (-p["round"], -(p["math_correct"] - p["base_correct"]) / p["math_total"])
    ):
        gain = 100 * (p["math_correct"] - p["base_correct"]) / p["math_total"]
        rows.append(
            f"| {p['variant'] or 'recipe'} | {p['top_k']:g} | {p['scale']:g} | {p['round']} | {p['math_total']} "
            f"| {100 * p['math_accuracy']:.1f}% ({100 * p['math_ci95_low']:.1f}-{100 * p['math_ci95_high']:.1f}) "
            f"| {gain:+.1f} | {p['mcnemar_p']:.3g} | {p['holm_p']:.3g} | {_kl(p['general_kl'])} |"
        )
    c = data.get("confirmation")
    if c:
        rows.append(
            f"| **confirmation** ({c['variant'] or 'recipe'}) | {c['top_k']:g} | {c['scale']:g} | | {c['n']} | "
            f"base {100 * c['base_correct'] / c['n']:.1f}% -> {100 * c['edited_correct'] / c['n']:.1f}% "
            f"({100 * c['edited_ci95'][0]:.1f}-{100 * c['edited_ci95'][1]:.1f}) | "
            f"{100 * (c['edited_correct'] - c['base_correct']) / c['n']:+.1f} | {c['mcnemar_p']:.3g} | - | |"
        )
    return "\n".join(rows) + "\n\n" + evidence(c or {}) + data["recommendation"] + "\n"


def _pct(k: int, n: int, ci: list[float] | None = None) -> str:
    text = f"{100 * k / n:.1f}% ({k}/{n}" if n else "- (0/0"
    return text + (f", {100 * ci[0]:.1f}-{100 * ci[1]:.1f})" if ci else ")")


def evidence(c: dict) -> str:
    """The confirmation's arms and tests per prompt format, by operation, and the general cost (markdown)."""
    formats = c.get("formats") or []
    if not formats:
        return ""
    rows = [
        f"Confirmation on {c.get('weights_dtype')} weights (as the release stores them):",
        "",
        "| prompt format | arm | accuracy (95% CI) | answer rate (restarts) | accuracy among answers (95% CI) "
        "| candidate vs this arm: right only with the candidate / only with this arm, exact McNemar p |",
        "|---|---|---|---|---|---|",
    ]
    for f in formats:
        tests = {(t["before"], t["answered_only"]): t for t in f["tests"] if t["after"] == "candidate"}
        for name, a in f["arms"].items():
            t = tests.get((name, False))
            vs = "" if t is None else f"{t['after_only']} / {t['before_only']}, p = {t['mcnemar_p']:.2g}"
            rows.append(
                f"| {f['name']} (n = {f['n']}) | {name} | {_pct(a['correct'], a['n'], a['ci95'])} | "
                f"{100 * a['answer_rate']:.1f}% ({a['restarts']}) | "
                f"{_pct(a['correct_among_answers'], a['answered'], a['accuracy_among_answers_ci95'])} | {vs} |"
            )
        both = tests.get(("base", True))
        rows.append(
            f"| {f['name']} | **verdict: {f['verdict']}** | | | problems both answered: "
            + ("-" if both is None else f"{both['after_only']} / {both['before_only']}, p = {both['mcnemar_p']:.2g}")
            + " | |"
        )
    rows += ["", "By operation (the recipe's prompt), correct/n: base -> candidate -> general-specific control", ""]
    arms = formats[0]["arms"]
    for op in sorted(arms["base"]["by_operation"]):
        cells = [arms[a]["by_operation"].get(op, {}) for a in ("base", "candidate", "general-specific") if a in arms]
        rows.append(f"- `{op}`: " + " -> ".join(_pct(x.get("correct", 0), x.get("n", 0)) for x in cells))
    g = c.get("general") or {}
    if g:
        rows += [
            "",
            f"General-text cost of the candidate ({g['texts']} WikiText-2 paragraphs, {g['tokens']} tokens, float32): "
            f"loss {g['loss_change']:+.4f} ± {g['loss_change_se']:.4f} nats/token, KL {g['kl']:.3g}; controls: "
            + ", ".join(
                f"{x['name']} {x['general']['loss_change']:+.4f} ± {x['general']['loss_change_se']:.4f}, KL "
                f"{x['general']['kl']:.3g}"
                for x in c.get("controls") or []
            ),
        ]
    return "\n".join(rows) + "\n\n"


if __name__ == "__main__":
    print(table(json.loads(Path(sys.argv[1]).read_text())))
