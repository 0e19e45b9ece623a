"""Write docs/families.md: every output of a run on a tiny model of each family (tests/_families.py).

Usage: python scripts/families.py [--out docs/families.md]   (about a minute on one CPU core)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the harness lives in tests/ (a checkout)

from tests._families import matrix_markdown, run_all  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "docs" / "families.md"))
    args = p.parse_args()
    torch.set_num_threads(1)  # tiny models: threads only add contention
    transformers.utils.logging.disable_progress_bar()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="mathneuro-families-") as work:
        rows, tokenizers = run_all(work)
    Path(args.out).write_text(matrix_markdown(rows, tokenizers), encoding="utf-8")
    print(f"wrote {args.out}: {len(rows)} families ({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
