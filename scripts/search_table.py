"""Render a finished boost search (sweep.json) as the markdown table of docs/results.md.

    python scripts/search_table.py docs/data/search-smollm2/sweep.json

One row per point (variant, top_k, scale, the round it reached, n, accuracy with its 95% Wilson interval, the
gain over the base on the same problems in percentage points, raw and Holm-adjusted exact McNemar p, general KL
(- where the selection never needed it)),
the base row first and the confirmation row last; then the recommendation sentence.
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
    return "\n".join(rows) + "\n\n" + data["recommendation"] + "\n"


if __name__ == "__main__":
    print(table(json.loads(Path(sys.argv[1]).read_text())))
