"""Every figure README.md, docs/results.md, docs/releasing.md and the two real-model recipes quote about a committed
search equals its sweep.json (``python scripts/check_release_numbers.py --docs``): a doc that says 16% where the
file has 452 of 1,000, or 17.0% where it has 203/1200, fails here, naming the doc, the figure and the file's value.
"""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def check():
    return runpy.run_path(str(ROOT / "scripts" / "check_release_numbers.py"), run_name="check_release_numbers")


def test_every_figure_the_docs_quote_about_the_committed_searches_equals_its_sweep_json(check) -> None:
    assert check["check_docs"](ROOT) == []


def test_a_figure_agrees_only_at_the_precision_it_is_quoted(check) -> None:
    agrees = check["agrees"]
    assert agrees("14.8", 14.8333) and agrees("16.9", 16.9167) and not agrees("17.0", 16.9167)
    assert agrees("1.7e-4", 1.70155e-4) and not agrees("1.8e-4", 1.70155e-4) and agrees("0.0034", 0.0033779)
    assert agrees("1,200", 1200) and not agrees("1,201", 1200) and agrees("-0.1", -0.1333) and agrees("45", 45.2)
    assert not agrees("16", 45.2) and not agrees("1.6", float("nan"))


@pytest.mark.parametrize(
    "doc,old,new,named",
    [
        ("README.md", "14.8% -> 16.9% on", "14.8% -> 17.0% on", "quotes 17.0 for s.cand_pct"),
        ("docs/releasing.md", "(6.0% -> 5.8% of 602)", "(6.0% -> 6.8% of 602)", "quotes 6.8 for s.sub_cand_pct"),
        (
            "recipes/gemma3-270m-arithmetic-boost.yaml",
            "in 452 of these 1,000, 45%)",
            "in 452 of these 1,000, 16%)",
            "quotes 16 for g.f2_base_restart_pct",
        ),
        ("recipes/smollm2-arithmetic-boost.yaml", "p = 0.064;", "p = 0.046;", "quotes 0.046 for s.f2_p"),
        ("docs/results.md", "(178, 12.9-17.0)", "(179, 12.9-17.0)", "quotes 179 for s.base_correct"),
        ("docs/results.md", "| 34 / 8, p = 6.9e-05 |", "| 34 / 8, p = 6.9e-06 |", "lacks this line of"),
        ("docs/results.md", "base 14.8% (178/1200", "base 14.9% (178/1200", "14.9% (178/1200 is not 178/1200"),
    ],
)
def test_one_wrong_figure_is_named(check, doc: str, old: str, new: str, named: str) -> None:
    text = (ROOT / doc).read_text()
    assert old in text, f"{doc} no longer says {old!r}: pick another figure for this test"
    errors = check["check_docs"](ROOT, {doc: text.replace(old, new, 1)})
    assert errors and all(e.startswith(doc) for e in errors) and any(named in e for e in errors), errors


def test_a_statement_reworded_away_from_its_template_is_reported(check) -> None:
    text = (ROOT / "README.md").read_text().replace("a gain of 1.3 points was detectable", "1.3 points detectable")
    errors = check["check_docs"](ROOT, {"README.md": text})
    assert len(errors) == 1 and "README.md: no longer says" in errors[0], errors
