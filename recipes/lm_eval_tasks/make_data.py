"""Regenerate the vendored JSONL files of this task folder (deterministic: same bytes on every run).

Run from anywhere: ``python recipes/lm_eval_tasks/make_data.py --gsm8k-dir DIR``; DIR holds GSM8K's
``gsm8k_test.jsonl`` and ``gsm8k_train.jsonl`` (the release's files, MIT). Selection rule (README.md):

- ``gsm8k_test_50.jsonl``: the first 50 lines of GSM8K's test file, byte for byte (keys ``question``, ``answer``);
- ``gsm8k_train_8.jsonl``: the first 8 lines of GSM8K's train file (the few-shot pool, never evaluated);
- ``arithmetic_test_100.jsonl``: ``mathneuro_edit.organism.data.math_problems(100, seed=0, split="test")``;
- ``arithmetic_train_8.jsonl``: ``math_problems(8, seed=0, split="train")`` (few-shot pool; the two splits
  never share a problem's numbers-and-operations sequence).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _write(name: str, rows: list[dict[str, str]]) -> None:
    # fixed key order, one object per line: the same bytes on every run
    text = "".join(
        json.dumps({"question": r["question"], "answer": r["answer"]}, ensure_ascii=False) + "\n" for r in rows
    )
    (HERE / name).write_text(text, encoding="utf-8")


def _copy_head(src: Path, name: str, n: int) -> None:
    """The first ``n`` lines of ``src``, byte for byte (a plain subset of the release's file)."""
    with src.open("rb") as f:
        lines = [next(f) for _ in range(n)]
    (HERE / name).write_bytes(b"".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gsm8k-dir", required=True, help="folder with GSM8K's gsm8k_test.jsonl and gsm8k_train.jsonl")
    args = parser.parse_args()
    from mathneuro_edit.organism.data import math_problems

    src = Path(args.gsm8k_dir)
    _copy_head(src / "gsm8k_test.jsonl", "gsm8k_test_50.jsonl", 50)
    _copy_head(src / "gsm8k_train.jsonl", "gsm8k_train_8.jsonl", 8)
    _write("arithmetic_test_100.jsonl", math_problems(100, seed=0, split="test"))
    _write("arithmetic_train_8.jsonl", math_problems(8, seed=0, split="train"))


if __name__ == "__main__":
    main()
