"""A shared sweep.json names which of the recipe's own variants was confirmed; it never chooses recipe settings
(issue 41, class 6).

``confirmation.variant_set`` was applied as recipe overrides after a prefix check only (``data.``,
``calibration.``, ``targets.``): a sweep.json could make ``run --from-sweep`` read and calibrate on a local file
(``data.math.path=/etc/...``), hang in a catastrophic ``targets.include`` regex, or exhaust memory with a
format-string template. Now the confirmed variant must be one of the recipe's own ``sweep.variants``, by name and
with exactly its overrides, and the overrides applied are the recipe's, never the file's."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from mathneuro_edit.cli.main import main
from mathneuro_edit.errors import InputError
from mathneuro_edit.recipe.io import quickstart_recipe
from mathneuro_edit.runs.sweep.evidence import read_sweep, recipe_from_sweep

from ._sweep_json import valid_sweep as _valid

OWN = "sweep.variants=[{name: mlp, set: ['targets.include=[mlp]']}]"


def _sweep(tmp_path: Path, name: str, overrides: list) -> Path:
    data = _valid()
    data["confirmation"]["variant"] = name
    data["confirmation"]["variant_set"] = overrides
    folder = tmp_path / "sweep"
    folder.mkdir(exist_ok=True)
    (folder / "sweep.json").write_text(json.dumps(data))
    return folder


def _dry_run(sweep: Path, tmp_path: Path, *sets: str) -> tuple[int, str]:
    args = ["run", "--out", str(tmp_path / "release"), "--from-sweep", str(sweep), "--dry-run"]
    result = CliRunner().invoke(main, [*args, *[x for s in sets for x in ("--set", s)]])
    return result.exit_code, result.output


@pytest.mark.parametrize(
    ("name", "overrides"),
    [
        ("leak", ["data.math.path=/etc/hostname"]),  # a local file, read and calibrated on before a late exit 3
        ("regex", ["targets.include=['(a+)+$', '(x|x)*y']"]),  # catastrophic backtracking
        ("fmt", ["data.math.template='{question:>999999999999}'"]),  # a format string that exhausts memory
        ("mlp", ["targets.include=[attn]"]),  # the recipe's variant's name with other overrides
        ("mlp", ["targets.include=[mlp]", "data.samples=1"]),  # its overrides and one more
        ("", ["targets.include=[mlp]"]),  # overrides without a variant
        ("other", ["targets.include=[mlp]"]),  # its overrides under another name
    ],
)
def test_a_variant_the_recipe_does_not_have_is_refused_before_anything_runs(
    tmp_path: Path, name: str, overrides: list[str]
) -> None:
    sweep = _sweep(tmp_path, name, overrides)
    start = time.monotonic()
    code, text = _dry_run(sweep, tmp_path, OWN)
    assert code == 2, text
    lines = [ln for ln in text.splitlines() if ln.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in text, text
    assert "is not one of this recipe's sweep.variants" in lines[0], lines[0]
    assert "a sweep.json cannot choose recipe settings" in lines[0]
    assert time.monotonic() - start < 10
    with pytest.raises(InputError, match="is not one of this recipe's sweep.variants"):
        recipe_from_sweep(quickstart_recipe([OWN]), read_sweep(sweep))


def test_a_recipe_without_variants_takes_no_variant(tmp_path: Path) -> None:
    code, text = _dry_run(_sweep(tmp_path, "mlp", ["targets.include=[mlp]"]), tmp_path)
    assert code == 2 and "is not one of this recipe's sweep.variants (it has none)" in text, text


def test_the_recipe_s_own_variant_is_applied(tmp_path: Path) -> None:
    sweep = _sweep(tmp_path, "mlp", ["targets.include=[mlp]"])
    code, text = _dry_run(sweep, tmp_path, OWN)
    assert code == 0, text
    release = recipe_from_sweep(quickstart_recipe([OWN]), read_sweep(sweep))
    assert release.targets.include == ["mlp"] and release.mask.top_k == 0.05 and release.edit.scale == 1.1


def test_the_recipe_itself_is_taken_without_a_variant(tmp_path: Path) -> None:
    for name, overrides in (("", []), ("", None)):
        release = recipe_from_sweep(quickstart_recipe([OWN]), read_sweep(_sweep(tmp_path, name, overrides)))
        assert release.targets.include == quickstart_recipe().targets.include


@pytest.mark.parametrize("overrides", ["targets.include=[mlp]", [["targets.include=[mlp]"]], [3], {"a": 1}])
def test_a_variant_set_that_is_not_a_list_of_strings_is_refused(tmp_path: Path, overrides) -> None:
    sweep = _sweep(tmp_path, "mlp", overrides)
    with pytest.raises(InputError, match="is not one of this recipe's sweep.variants"):
        recipe_from_sweep(quickstart_recipe([OWN]), read_sweep(sweep))
