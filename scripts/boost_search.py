"""Run (or resume) the boost search of one real model and log its CPU time (docs/results.md "The boost search").

    python scripts/boost_search.py smollm2 --gguf PATH/SmolLM2-135M-Instruct.Q4_1.gguf
    python scripts/boost_search.py gemma3 --gguf PATH/gemma-3-270m-q4_k_m.gguf

Runs ``mathneuro-edit sweep RECIPE --out docs/data/search-MODEL`` with the recipe's own sweep section (the grid,
variants, successive halving and sizes), and appends one line per invocation to ``docs/data/search-MODEL/runs.jsonl``
(wall and CPU seconds, exit status): a search killed and resumed adds its parts, and
benchmarks/bench_search.py sums them. Kill it at any moment; the same command continues where it stopped.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

RECIPES = {"smollm2": "recipes/smollm2-arithmetic-boost.yaml", "gemma3": "recipes/gemma3-270m-arithmetic-boost.yaml"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", choices=sorted(RECIPES))
    ap.add_argument("--gguf", required=True, help="the model's GGUF file")
    ap.add_argument("--out", default=None, help="sweep folder (default docs/data/search-MODEL)")
    ap.add_argument("sets", nargs="*", help="extra key=value overrides")
    a = ap.parse_args()
    out = Path(a.out or f"docs/data/search-{a.model}")
    cmd = [
        sys.executable,
        "-m",
        "mathneuro_edit.cli",
        "sweep",
        RECIPES[a.model],
        "--out",
        str(out),
        "--set",
        f"base.model={a.gguf}",
        *[x for s in a.sets for x in ("--set", s)],
    ]
    t0 = time.time()
    child = subprocess.Popen(cmd)

    def stop(signum, _frame):  # a kill of this script stops the sweep cleanly and still logs its CPU time
        child.send_signal(signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    rc = child.wait()
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "runs.jsonl", "a", encoding="utf-8") as f:
        f.write(
            json.dumps(
                {
                    "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t0)),
                    "wall_s": round(time.time() - t0, 1),
                    "cpu_s": round(ru.ru_utime + ru.ru_stime, 1),
                    "exit": rc,
                    "threads": os.environ.get("OMP_NUM_THREADS", "default"),
                }
            )
            + "\n"
        )
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
