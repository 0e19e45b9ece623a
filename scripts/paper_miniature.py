"""Run the paper's experiment in miniature on the shipped organism and print the results as Markdown + JSON.

Usage: python scripts/paper_miniature.py [--top-k 0.05] [--n-eval 200] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the harness lives in tests/ (a checkout)

from tests._paper_miniature import run_miniature  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--top-k", type=float, default=0.05)
    p.add_argument("--n-calib", type=int, default=100)
    p.add_argument("--n-eval", type=int, default=200)
    p.add_argument("--json")
    args = p.parse_args()
    t0 = time.perf_counter()
    r = run_miniature(top_k=args.top_k, n_calib=args.n_calib, n_eval=args.n_eval)
    print(r.to_markdown())
    print(f"\none-sample mask overlap (Jaccard) with the {args.n_calib}-sample mask: {r.one_sample_overlap:.3f}")
    print(f"({time.perf_counter() - t0:.0f} s)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(r.to_dict(), f, indent=2)


if __name__ == "__main__":
    main()
