"""``run --dry-run`` refuses an output the recipe asks for and the family does not get, reading which outputs the
recipe asks for from the registry (issue 49 item 5: no list of the kinds outside it), and says nothing of an output
the family does not get but the recipe does not ask for. Millisecond tests on the plan's ``outputs`` record."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from mathneuro_edit.errors import InputError
from mathneuro_edit.recipe.io import quickstart_recipe
from mathneuro_edit.runs.plan import Plan

REFUSED = {"checkpoint": None, "adapter": "outputs.adapter: no adapter here", "gguf": "outputs.gguf: no GGUF here"}


def _check(*sets: str) -> None:
    Plan.check_outputs(SimpleNamespace(outputs=REFUSED), quickstart_recipe(sets))  # type: ignore[arg-type]


def test_an_asked_output_the_family_does_not_get_is_refused_in_one_line() -> None:
    with pytest.raises(InputError, match="^outputs.adapter: no adapter here$"):
        _check("outputs.adapter=true")
    with pytest.raises(InputError, match="^outputs.gguf: no GGUF here$"):
        _check("outputs.adapter=false", "outputs.gguf=Q8_0")


def test_an_output_not_asked_for_is_not_refused() -> None:
    _check("outputs.adapter=false", "outputs.gguf=null")
