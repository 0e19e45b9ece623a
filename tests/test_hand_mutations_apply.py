"""scripts/hand_mutations.py never rots: each mutation's original text stands exactly once in its file and each test
it names exists, so the next round of `python scripts/hand_mutations.py` measures the code, not a stale table (ten
entries had gone stale when the code they mutate moved)."""

from __future__ import annotations

import runpy
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_hand_mutation_applies_once_and_names_existing_tests() -> None:
    mutations = runpy.run_path(str(ROOT / "scripts" / "hand_mutations.py"), run_name="hand_mutations")["MUTATIONS"]
    stale = {}
    for label, (file, original, mutated, tests) in mutations.items():
        text = (ROOT / file).read_text(encoding="utf-8") if (ROOT / file).is_file() else ""
        if text.count(original) != 1 or original == mutated or not tests:
            stale[label] = f"{file}: original text found {text.count(original)} times"
        missing = [t for t in tests if not (ROOT / t.split("::")[0]).is_file()]
        if missing:
            stale[label] = f"names missing test files {missing}"
    assert stale == {}
    assert len(mutations) >= 100
