"""How many ``[i/n]`` stage lines a composition of steps announces, from the steps it lists (never a hand count)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...recipe.schema import Recipe


def stage_count(recipe: Recipe, steps: Sequence[str], *, tasks: Sequence[Any] = (), kinds: Sequence[str] = ()) -> int:
    """How many ``[i/n]`` lines the listed steps announce: load 1, calibrate one per set, mask 1, evaluate 1 (when
    there are tasks), export one per output kind, seal 1."""
    lines = {
        "load": 1,
        "calibrate": 1 + len(recipe.data.general),
        "mask": 1,
        "evaluate": int(bool(tasks)),
        "export": len(kinds),
        "seal": 1,
    }
    return sum(lines[s] for s in steps)
