"""How far an unfinished boost search has come, from its cache alone (no model needed).

    python scripts/search_progress.py docs/data/search-smollm2

Prints the calibration sets done, the base's problems, how many points have math results and on how many problems,
how many have their general-text KL, and the CPU seconds the computed blocks took (each block records its own).
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path


def progress(folder: Path) -> dict:
    base = 0
    per_point: Counter = Counter()
    general = 0
    cpu = 0.0
    for p in sorted((folder / "cache").glob("*.json")):
        entry = json.loads(p.read_text())
        key, result = entry["key"], entry["result"]
        cpu += result.get("cpu_s", 0.0)
        if key["what"] == "math":
            if key.get("base"):
                base += len(key["problems"])
            else:
                per_point[(key["mask"], key["scale"])] += len(key["problems"])
        elif key["what"] == "general":
            general += 1
    stats = len(list((folder / "stats").glob("*.key.json")))
    return {
        "calibration_sets": stats,
        "base_problems": base,
        "points_with_math": len(per_point),
        "point_problems": sum(per_point.values()),
        "points_with_kl": general,
        "block_cpu_s": round(cpu, 1),
        "problems_per_point": dict(Counter(per_point.values())),
    }


if __name__ == "__main__":
    print(json.dumps(progress(Path(sys.argv[1])), indent=1))
