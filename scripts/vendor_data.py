"""Write the small data subsets shipped in recipes/data/ (deterministic: the same files on every run).

Usage (the source folder holds the GSM8K release and WikiText-2 raw; see recipes/data/README.md):

    python scripts/vendor_data.py --src /path/to/data --out recipes/data

Selection (Python's random.Random(seed).sample over record indices, kept in their original order):

- gsm8k_test_300.jsonl: 300 of the 1,319 GSM8K test problems (seed 0): evaluation (n up to 300).
- gsm8k_train_200.jsonl: 200 of the 7,473 GSM8K train problems (seed 0): calibration.
- wikitext2_test_calib.txt: 200 paragraphs of WikiText-2 test (seed 0): calibration's general text.
- wikitext2_valid_eval.txt: 300 paragraphs of WikiText-2 valid (seed 0): held-out general loss.

A WikiText paragraph is a non-heading line of at least 200 characters, stripped; the .txt files put one blank
line between paragraphs (the format the data loader reads as one text per block). The script checks that no
paragraph is in both WikiText files and no problem in both GSM8K files.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

MIN_CHARS = 200  # why: shorter lines are list items and captions, too short to say much about general loss


def _sample(items: list, k: int, seed: int) -> list:
    picked = sorted(random.Random(seed).sample(range(len(items)), k))
    return [items[i] for i in picked]


def _paragraphs(path: Path) -> list[str]:
    lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    return [line for line in lines if len(line) >= MIN_CHARS and not line.startswith("=")]


def _gsm8k(path: Path) -> list[dict[str, str]]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [{"question": r["question"], "answer": r["answer"]} for r in rows]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", type=Path, required=True, help="folder with gsm8k_*.jsonl and wikitext2_*.txt")
    ap.add_argument("--out", type=Path, default=Path("recipes/data"))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    test = _sample(_gsm8k(args.src / "gsm8k_test.jsonl"), 300, 0)
    train = _sample(_gsm8k(args.src / "gsm8k_train.jsonl"), 200, 0)
    assert not {r["question"] for r in test} & {r["question"] for r in train}, "GSM8K train and test overlap"
    calib = _sample(_paragraphs(args.src / "wikitext2_test.txt"), 200, 0)
    held_out = _sample(_paragraphs(args.src / "wikitext2_valid.txt"), 300, 0)
    assert not set(calib) & set(held_out), "a WikiText paragraph is in both the calibration and the evaluation file"
    for name, rows in (("gsm8k_test_300.jsonl", test), ("gsm8k_train_200.jsonl", train)):
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
        (args.out / name).write_text(text, encoding="utf-8")
    for name, paras in (("wikitext2_test_calib.txt", calib), ("wikitext2_valid_eval.txt", held_out)):
        (args.out / name).write_text("\n\n".join(paras) + "\n", encoding="utf-8")
    print(f"wrote {args.out}: {len(test)} + {len(train)} GSM8K problems, {len(calib)} + {len(held_out)} paragraphs")


if __name__ == "__main__":
    main()
