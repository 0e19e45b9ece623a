"""Sweep decisions on constructed points, against hand-computed answers.

The rule is select-then-confirm: the candidate is the largest selection gain within the KL budget (p-values play
no part; ties go to the lower KL, then to the earlier point), and only a confirmation test on other problems can
make it a recommendation. (Recommending the best point whose uncorrected McNemar p < 0.05 on the same problems
would let a 20-point grid make one point "significant" by chance in about a quarter of null sweeps,
tests/runs/test_sweep_procedure.py.) Also: the Pareto front, a point read from an eval dict (the general loss
error columns included), the Holm-adjusted p of the table, sweep.json, the CSV and the table, disjoint selection and
confirmation problems, and a released sweep read back as a recipe.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import replace

import pytest

from mathneuro_edit.data.sources import problem_sha256
from mathneuro_edit.errors import InputError
from mathneuro_edit.evaluation.results import (
    EvalResults,
    GeneralResult,
    MathPrediction,
    MathResult,
)
from mathneuro_edit.evaluation.significance import (
    discordant_pairs,
    holm_adjust,
    mcnemar_exact,
    ratio_se,
    wilson_interval,
)
from mathneuro_edit.recipe.io import quickstart_recipe
from mathneuro_edit.runs.sweep.evidence import read_sweep, recipe_from_sweep
from mathneuro_edit.runs.sweep.problems import sweep_problems
from mathneuro_edit.runs.sweep.procedure import (
    Confirmation,
    SweepPoint,
    confirm,
    math_merit,
    pareto_front,
    recommend,
    select_candidate,
    with_holm,
)
from mathneuro_edit.runs.sweep.result import SweepResult, _num, _point

from ._sweep_json import control_evidence

NAN = math.nan  # a point built without the loss columns holds nan (the same object, so dicts compare equal)

N = 100  # problems per evaluation: math_correct = accuracy * N


def P(acc: float, kl: float, top_k: float = 0.05, p: float = 0.01, scale: float = 1.1) -> SweepPoint:  # noqa: N802
    """A point of ``N`` problems with its Wilson interval and McNemar p (significant exactly when p < 0.05)."""
    k = round(acc * N)
    low, high = wilson_interval(k, N)
    return SweepPoint(top_k, scale, 10, acc, 2.0, kl, k, N, low, high, p, p < 0.05)


# index: (math accuracy, general KL, McNemar p)      hand-computed role (base 0.50, budget 0.05)
POINTS = [
    P(0.60, 0.020, 0.01, p=0.12),  # 0 front, within budget, NOT significant: never recommended
    P(0.70, 0.100, 0.02, p=0.0004),  # 1 front (best accuracy), significant, OVER budget
    P(0.60, 0.030, 0.03, p=0.03),  # 2 dominated by 0 (same accuracy, more KL)
    P(0.55, 0.010, 0.04, p=0.05),  # 3 front; p exactly 0.05 is NOT significant
    P(0.40, 0.005, 0.05, p=0.02),  # 4 front (least KL), a significant LOSS (below the base)
    P(0.58, 0.040, 0.06, p=0.04),  # 5 dominated by 0
    P(0.62, 0.050, 0.07, p=0.004),  # 6 front, exactly at the budget: the recommendation
    P(0.60, 0.020, 0.08, p=0.045),  # 7 identical to 0 but significant: both on the front
    P(0.30, 0.200, 0.09, p=0.001),  # 8 dominated by everything
]
FRONT = [0, 1, 3, 4, 6, 7]
SIGNIFICANT = [False, True, True, False, True, True, True, True, True]


def reference_front(points) -> list[int]:
    """Indices of the points no other point beats (>= merit and <= KL, one strictly): written out pairwise. The
    merit: the gain over the base on the point's own problems when every point records the base's count, else the
    accuracy."""
    with_base = all(p.base_correct is not None for p in points)

    def merit(p):
        return (p.math_correct - p.base_correct) / p.math_total if with_base else p.math_accuracy

    out = []
    for i, p in enumerate(points):
        beaten = False
        for j, q in enumerate(points):
            better_or_equal = merit(q) >= merit(p) and q.general_kl <= p.general_kl
            strictly = merit(q) > merit(p) or q.general_kl < p.general_kl
            beaten = beaten or (i != j and better_or_equal and strictly)
        if not beaten:
            out.append(i)
    return out


def test_reference_agrees_with_the_hand_computed_front():
    assert reference_front(POINTS) == FRONT
    assert [p.significant for p in POINTS] == SIGNIFICANT


def test_pareto_front_is_the_hand_computed_one():
    assert pareto_front(POINTS) == FRONT  # significance plays no part in the front: 0 and 3 are on it
    assert pareto_front([]) == []
    assert pareto_front([POINTS[8]]) == [0]
    assert pareto_front([POINTS[2], POINTS[0]]) == [1]
    assert pareto_front([P(0.5, 0.02), P(0.6, 0.02)]) == [1]  # equal KL, higher accuracy: that one beats it
    assert pareto_front([P(0.6, 0.02), P(0.6, 0.01)]) == [1]  # equal accuracy, lower KL


def test_pareto_front_compares_gains_over_the_base_across_rounds():
    # successive halving: an early point at 50% on the first 40 (easy) problems, base 19/40 there: +2.5 points;
    # a finalist at 30% on all 1,000, base 250: +5 points. By accuracy the early point would hide the finalist.
    early = SweepPoint(0.01, 1.1, 1, 0.5, 1.0, 0.01, 20, 40, base_correct=19, round=1)
    final = SweepPoint(0.01, 1.2, 1, 0.3, 1.0, 0.01, 300, 1000, base_correct=250, round=4)
    assert pareto_front([early, final]) == [1] == reference_front([early, final])
    cheaper_early = replace(early, general_kl=0.001)  # a lower KL keeps the early point on the front too
    assert pareto_front([cheaper_early, final]) == [0, 1] == reference_front([cheaper_early, final])
    assert math_merit([early, final]) == [2.5, 5.0]
    assert math_merit([early, replace(final, base_correct=None)]) == [50.0, 30.0]  # not recorded: accuracy


def test_point_takes_the_paired_comparison_of_the_eval():
    res = {
        "math": {
            "edited": {
                "math_accuracy": 0.62,
                "math_correct": 62,
                "math_total": 100,
                "math_ci95_low": 0.52,
                "math_ci95_high": 0.71,
            },
            "comparison": {"mcnemar_p": 0.004, "significant": True},
        },
        "general": {"edited": {"general_loss": 2.5, "general_kl": 0.03}},
    }
    assert _point(0.07, 1.1, 9, res) == SweepPoint(0.07, 1.1, 9, 0.62, 2.5, 0.03, 62, 100, 0.52, 0.71, 0.004, True)
    res["math"].pop("comparison")  # no paired comparison: never significant
    assert _point(0.07, 1.1, 9, res).significant is False and _point(0.07, 1.1, 9, res).mcnemar_p == 1.0


BASE = 50  # the base's correct answers on the N selection problems


def reference_candidate(points, base_correct: int, kl_budget: float) -> int | None:
    """Written out: keep the points within the budget that gain, order by most correct, then least KL, then
    index, take the first."""
    ok = [
        (-p.math_correct, p.general_kl, i)
        for i, p in enumerate(points)
        if p.general_kl <= kl_budget and p.math_correct - base_correct >= 1
    ]
    return sorted(ok)[0][2] if ok else None


def test_candidate_is_the_largest_selection_gain_within_the_budget():
    assert select_candidate(POINTS, BASE, 0.05) == 6  # 62/100 at KL exactly 0.05; point 1 (70) is over the budget
    assert select_candidate(POINTS, BASE, 0.1) == 1
    # 0, 2, 7 tie at 60: 0 and 7 share the least KL (0.02): the earlier one. Point 0 is NOT significant on the
    # selection set (p = 0.12): the p-value plays no part, the confirmation decides
    assert select_candidate(POINTS, BASE, 0.049) == 0
    assert select_candidate(POINTS, BASE, 0.015) == 3  # 55 at KL 0.01, p exactly 0.05: still the candidate
    assert select_candidate(POINTS, BASE, 0.009) is None  # only point 4 fits, and it is a loss
    assert select_candidate(POINTS, 70, 1.0) is None  # 70 equals the base: no gain at all
    assert select_candidate([], BASE, 1.0) is None


@pytest.mark.parametrize("budget", [0.0, 0.005, 0.01, 0.02, 0.03, 0.049, 0.05, 0.1, 0.2, 1.0])
@pytest.mark.parametrize("base", [0, 40, 55, 59, 60, 61, 69, 70])
def test_candidate_equals_reference_over_a_grid(base, budget):
    assert select_candidate(POINTS, base, budget) == reference_candidate(POINTS, base, budget)


def test_confirm_is_one_exact_mcnemar_test_of_a_gain():
    base = [True] * 30 + [False] * 70
    edited = [True] * 28 + [False] * 2 + [True] * 12 + [False] * 58  # 2 right only before, 12 only after
    assert discordant_pairs(base, edited) == (2, 12)
    b, c, p, ok = confirm(base, edited, 0.05)
    assert (b, c) == (2, 12) and p == mcnemar_exact(2, 12) and ok  # p = 2 * (1 + 14 + 91) / 2**14 = 0.01294
    assert p == pytest.approx(2 * 106 / 2**14, abs=1e-15)
    assert confirm(base, edited, 0.01)[3] is False  # the level is the recipe's sweep.alpha
    assert confirm(edited, base, 0.05)[3] is False  # a significant LOSS is never a confirmed gain
    assert confirm([True, False], [False, True], 0.05) == (1, 1, 1.0, False)
    with pytest.raises(ValueError, match="pair the same problems"):
        confirm([True], [True, False], 0.05)


def _conf(base_correct: int, edited_correct: int, b: int, c: int, point: int = 6, n: int = 200) -> Confirmation:
    p = mcnemar_exact(b, c)
    return Confirmation(
        n,
        tuple(f"{i:064x}" for i in range(1000, 1000 + n)),
        POINTS[point].top_k,
        POINTS[point].scale,
        base_correct,
        edited_correct,
        b,
        c,
        p,
        c > b and p < 0.05,
        0.05,
        point,
    )


def test_recommendation_says_what_selection_and_confirmation_showed():
    pts = with_holm(POINTS)
    best, text = recommend(pts, BASE, N, None, None, 0.009)
    assert best is None and text == (
        "nothing confirmed: no setting within the general-KL budget 0.009 raises math accuracy over the base "
        "(50.0% on 100 selection problems), so none was tested on the confirmation problems; do not publish a boost "
        "from this sweep"
    )
    # point 6: raw p = 0.004; Holm over 9 tests: sorted 0.001, 0.0004... by hand below
    chosen = (
        "top_k=0.07 scale=1.1, chosen among 9 settings on 100 selection problems (50.0% -> 62.0%, +12 "
        "problems, raw p = 0.004, Holm p = 0.028, general KL 0.05, budget 0.05)"
    )
    c = _conf(70, 78, 10, 18)  # 70/200 -> 78/200: p = 0.185, not confirmed
    best, text = recommend(pts, BASE, N, 6, c, 0.05)
    assert best is None and text == (
        f"nothing confirmed: the candidate {chosen} did not confirm on 200 other problems: base 35.0% (70/200, "
        "28.7-41.8) -> 39.0% (78/200, 32.5-45.9), +4.0 points, 10 right only before and 18 only after, exact McNemar "
        "p = 0.185 (a confirmed gain needs p < 0.05; the smallest gain 200 problems detect at 80% power: +7.7 "
        "points (14.0% of them changed)); do not publish a boost from this sweep"
    )
    c = _conf(70, 90, 5, 25)  # p = 2 * sum_{i<=5} C(30, i) / 2**30 = 0.000325
    best, text = recommend(pts, BASE, N, 6, c, 0.05)
    assert best == 6 and text == (
        f"recommended: {chosen}; confirmed on 200 other problems: base 35.0% (70/200, 28.7-41.8) -> 45.0% (90/200, "
        "38.3-51.9), +10.0 points, 5 right only before and 25 only after, exact McNemar p < 0.001 (< 0.05)"
    )
    assert best == recommend(pts, BASE, N, 6, c, 0.05)[0]
    assert recommend(pts, BASE, N, 6, None, 0.05)[0] is None  # a candidate never tested is not recommended


def test_holm_p_of_the_table_by_hand():
    # raw p: 0.12, 0.0004, 0.03, 0.05, 0.02, 0.04, 0.004, 0.045, 0.001 (m = 9); sorted with multipliers:
    # 0.0004*9 = 0.0036, 0.001*8 = 0.008, 0.004*7 = 0.028, 0.02*6 = 0.12, 0.03*5 = 0.15, 0.04*4 = 0.16,
    # 0.045*3 = 0.135 -> 0.16, 0.05*2 = 0.10 -> 0.16, 0.12*1 -> 0.16
    expected = [0.16, 0.0036, 0.15, 0.16, 0.12, 0.16, 0.028, 0.16, 0.008]
    assert [p.holm_p for p in with_holm(POINTS)] == pytest.approx(expected, abs=1e-12)
    assert [p.holm_p for p in with_holm(POINTS)] == holm_adjust([p.mcnemar_p for p in POINTS])


def _result(confirmation: Confirmation | None, candidate: int | None) -> SweepResult:
    pts = with_holm(POINTS)
    best, text = recommend(pts, BASE, N, candidate, confirmation, 0.05)
    sel = [f"{i:064x}" for i in range(N)]
    return SweepResult(
        0.5,
        2.0,
        pts,
        pareto_front(pts),
        text,
        best,
        {"math_correct": BASE, "math_total": N},
        NAN,
        sel,
        confirmation,
        candidate,
        0.05,
        0.05,
        4,
        {"mask": {"top_k": 0.05}},
        "r" * 64,
    )


def test_sweep_json_contract():
    for conf in (None, _conf(70, 78, 10, 18), _conf(70, 90, 5, 25)):
        d = _result(conf, None if conf is None else 6).to_dict()
        assert set(d) >= {"selection", "confirmation", "recommendation", "best"}
        sel = d["selection"]
        assert sel["n"] == N == len(sel["problems_sha256"]) and len(sel["points"]) == len(POINTS)
        for p in sel["points"]:
            assert {"top_k", "scale", "math_correct", "math_total", "mcnemar_p", "holm_p", "general_kl"} <= set(p)
        if conf is None:
            assert d["confirmation"] is None and d["best"] is None
            assert d["recommendation"].startswith("nothing confirmed:")
            continue
        c = d["confirmation"]
        assert {
            "n",
            "problems_sha256",
            "top_k",
            "scale",
            "base_correct",
            "edited_correct",
            "mcnemar_p",
            "confirmed",
        } <= set(c)
        assert not set(c["problems_sha256"]) & set(sel["problems_sha256"])
        # the recommendation is empty of a setting unless the confirmation passed
        if c["confirmed"]:
            assert d["best"] == 6 and d["recommendation"].startswith("recommended: top_k=0.07 scale=1.1")
        else:
            assert d["best"] is None and d["recommendation"].startswith("nothing confirmed:")


def test_csv_and_table_show_raw_and_holm_p():
    result = _result(_conf(70, 90, 5, 25), 6)
    rows = list(csv.reader(io.StringIO(result.to_csv())))
    assert rows[0] == [
        "variant",
        "round",
        "top_k",
        "scale",
        "selected",
        "math_accuracy",
        "math_correct",
        "math_total",
        "math_ci95_low",
        "math_ci95_high",
        "mcnemar_p",
        "holm_p",
        "significant",
        "general_loss",
        "general_loss_se",
        "loss_change",
        "loss_change_se",
        "general_kl",
        "pareto",
        "candidate",
        "confirmed",
    ]
    assert len(rows) == 1 + len(POINTS)
    assert rows[7][8:13] == ["0.5221", "0.7090", "0.004", "0.028", "True"]  # point 6, by hand (62/100)
    assert rows[7][-3:] == ["True", "True", "True"] and rows[1][-3:] == ["True", "False", "False"]
    text = result.to_text()
    assert "Holm p" in text.splitlines()[0]
    row6 = text.splitlines()[8].split()
    # variant, top_k, scale, ..., n, gain in percentage points over the base on the same problems
    assert row6[:3] == ["-", "0.07", "1.1"] and "100" in row6 and "+12.0" in row6 and "0.004" in row6
    assert "0.028" in row6
    confirm_row = text.splitlines()[-2].split()
    assert confirm_row[:3] == ["confirm", "0.07", "1.1"] and "200" in confirm_row and "confirmed" in confirm_row
    assert text.splitlines()[-1].startswith("gain: percentage points")  # the legend explains gain and marks
    # a confirmation that did not pass says what its n could have shown, not "no effect"
    failed = _result(_conf(70, 78, 10, 18), 6).to_text().splitlines()[-2]
    assert "not confirmed (base 35.0%; the smallest gain 200 problems detect at 80% power: +7.7 points" in failed


def _arith(*sets: str):
    return quickstart_recipe(["evaluation.math=arithmetic", *sets])


def test_selection_and_confirmation_problems_are_disjoint_by_construction():
    r = _arith("sweep.selection_samples=300", "sweep.confirmation_samples=600", "evaluation.n_shot=2")
    shots, sel, conf = sweep_problems(r)
    assert (len(shots), len(sel), len(conf)) == (2, 300, 600)
    hs, hc = [problem_sha256(p) for p in sel], [problem_sha256(p) for p in conf]
    assert not set(hs) & set(hc) and not set(hs + hc) & {problem_sha256(p) for p in shots}
    assert len(set(hc)) == 600
    # a new seed, new problems; the same seed, the same split
    again = sweep_problems(r)
    assert [p["question"] for p in again[1]] == [p["question"] for p in sel]
    other = sweep_problems(
        _arith(
            "sweep.selection_samples=300", "sweep.confirmation_samples=600", "evaluation.n_shot=2", "evaluation.seed=1"
        )
    )
    assert [p["question"] for p in other[1]] != [p["question"] for p in sel]


def test_a_file_with_repeated_questions_still_gives_disjoint_sets(tmp_path):
    import json

    path = tmp_path / "probs.jsonl"
    rows = [{"question": f"q{i % 7}", "answer": f"#### {i % 7}"} for i in range(30)]  # 7 distinct questions
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = quickstart_recipe([f"evaluation.math={path}", "sweep.selection_samples=10", "sweep.confirmation_samples=20"])
    _, sel, conf = sweep_problems(r)
    assert len(sel) == 10 and not {p["question"] for p in sel} & {p["question"] for p in conf}
    assert len(conf) == len({p["question"] for p in conf})  # a repeat is dropped, not tested twice
    small = quickstart_recipe(
        [f"evaluation.math={path}", "sweep.selection_samples=20", "sweep.confirmation_samples=20"]
    )
    with pytest.raises(
        InputError,
        match=r"has 30 problems; the sweep needs .* = 0 \+ 20 \+ 20 = 40; lower "
        r"sweep.selection_samples or sweep.confirmation_samples",
    ):
        sweep_problems(small)


def _write_sweep(folder, confirmed: bool | None, recipe=None, base=None):
    """A sweep.json of ``recipe`` (the quickstart's) measured on ``base`` (an identity; the organism's)."""
    import json

    from ._sweep_json import organism_identity

    folder.mkdir(parents=True, exist_ok=True)
    conf = (
        None
        if confirmed is None
        else _conf(70, 90 if confirmed else 78, 5 if confirmed else 10, 25 if confirmed else 18)
    )
    d = _result(conf, None if conf is None else 6).to_dict()
    if conf is not None:  # the control edits' tests a confirmed boost also needs (read_sweep checks them)
        d["confirmation"].update(control_evidence(conf.n, conf.base_only, conf.edited_only))
    d["recipe"] = (recipe or quickstart_recipe()).public_dict()
    d["base_identity"] = base or organism_identity()
    (folder / "sweep.json").write_text(json.dumps(d, allow_nan=True))
    return d


def test_read_sweep_refuses_anything_but_a_confirmed_setting(tmp_path):
    for confirmed, name in ((None, "none"), (False, "no")):
        _write_sweep(tmp_path / name, confirmed)
        with pytest.raises(
            InputError,
            match=r"sweep.json: nothing was confirmed \(nothing confirmed: .*\); there is "
            "no setting to release from this sweep",
        ):
            read_sweep(tmp_path / name)
    with pytest.raises(InputError, match="not found; pass the --out folder of a `mathneuro-edit sweep`"):
        read_sweep(tmp_path / "missing")
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "sweep.json").write_text('{"points": [], "best": null}')
    with pytest.raises(InputError, match="not a sweep.json with selection and confirmation"):
        read_sweep(tmp_path / "old")
    _write_sweep(tmp_path / "yes", True)
    ev = read_sweep(tmp_path / "yes")
    assert (ev.top_k, ev.scale, ev.n_settings, len(ev.selection_sha256)) == (0.07, 1.1, 9, N)
    entry = ev.lock_entry()
    assert entry["confirmation"]["confirmed"] is True and len(entry["confirmation"]["problems_sha256"]) == 200
    assert entry["selection"]["holm_p"] == pytest.approx(0.028) and entry["settings"] == 9
    assert (entry["selection"]["math_correct"], entry["selection"]["base_correct"]) == (62, BASE)


def test_the_refusal_of_a_sweep_that_did_not_confirm_keeps_every_figure_whole(tmp_path):
    """The refusal names what the confirmation measured (the recommendation's first sentence without its bracketed
    details) and cuts only between words: it once showed the committed Gemma search as "(22.3% -> 2)"."""
    import json
    from pathlib import Path

    gemma = Path(__file__).resolve().parents[2] / "docs" / "data" / "search-gemma3"
    with pytest.raises(InputError) as e:
        read_sweep(gemma)
    msg = str(e.value)
    assert "did not confirm on 1500 other problems: base 14.5% -> 14.4%, -0.1 points" in msg, msg
    assert msg.endswith("exact McNemar p = 0.885); there is no setting to release from this sweep"), msg
    d = _write_sweep(tmp_path / "long", False)
    d["recommendation"] = "nothing confirmed: " + " ".join(f"{i}.5% -> {i + 1}.25%," for i in range(100)) + "; x"
    (tmp_path / "long" / "sweep.json").write_text(json.dumps(d))
    with pytest.raises(InputError) as e:
        read_sweep(tmp_path / "long")
    why = str(e.value).split("nothing was confirmed (")[1].split(" ...); there is no setting")[0]
    assert 250 < len(why) <= 300 and set(why.split()) <= set(d["recommendation"].split()), why  # whole words


def test_the_lock_keeps_the_sweep_s_counts_and_leaves_its_problem_lists_in_the_sweep_folder(tmp_path):
    """A release's lock records the selection's and confirmation's counts and the overlap of its own evaluation
    with them, not the per-problem sha256 lists (208 of SmolLM2's 220 KB lock, copied into every repo); a lock's
    own section, re-run by ``reproduce``, keeps its recorded overlap."""
    from mathneuro_edit.evaluation.tasks import MathTask
    from mathneuro_edit.runs.steps.seal import evidence_with_overlap

    _write_sweep(tmp_path / "yes", True)
    entry = read_sweep(tmp_path / "yes").lock_entry()
    problems = [{"question": f"What is {a} + 1?", "answer": f"#### {a + 1}"} for a in range(3)]
    entry["selection"]["problems_sha256"][0] = problem_sha256(problems[0])  # the run evaluates one of each
    entry["confirmation"]["problems_sha256"][0] = problem_sha256(problems[1])
    sealed = evidence_with_overlap(entry, [MathTask("math", problems)], "m" * 64)
    assert "problems_sha256" not in repr(sealed) and sealed["selection"]["n"] == N
    assert sealed["evaluation_overlap"] == {"n": 3, "selection": 1, "confirmation": 1}
    assert sealed["mask_matches_confirmation"] is False
    recorded = {**sealed, "evaluation_overlap": {"n": 4, "selection": 3, "confirmation": 1}}
    again = evidence_with_overlap(recorded, [MathTask("math", problems)], "m" * 64)  # reproduce: no lists
    assert again["evaluation_overlap"] == {"n": 4, "selection": 3, "confirmation": 1}


def test_recipe_from_sweep_takes_the_setting_and_refuses_another_recipe(tmp_path):
    _write_sweep(tmp_path / "yes", True)
    ev = read_sweep(tmp_path / "yes")
    r = recipe_from_sweep(quickstart_recipe(), ev)  # the quickstart prunes; the confirmed edit scales by 1.1
    assert (r.mask.top_k, r.edit.scale, r.edit.prune) == (0.07, 1.1, False)
    other = quickstart_recipe(["data.samples=7"])
    with pytest.raises(
        InputError, match=r"--from-sweep: the recipe's data.samples differs from the sweep's \(7 vs 100\)"
    ):
        recipe_from_sweep(other, ev)
    pruned = ev.__class__(**{**ev.__dict__, "scale": 0.0})
    assert recipe_from_sweep(quickstart_recipe(["edit.scale=1.2"]), pruned).edit.prune is True


def test_recipe_from_sweep_applies_the_confirmed_variant_and_refuses_other_keys(tmp_path):
    _write_sweep(tmp_path / "yes", True)
    ev = read_sweep(tmp_path / "yes")
    mlp = ev.__class__(
        **{
            **ev.__dict__,
            "confirmation": {**ev.confirmation, "variant": "mlp-only", "variant_set": ["targets.include=[mlp]"]},
        }
    )
    # the variant must be one of the recipe's own (a sweep.json names it, it never chooses settings)
    with_variant = quickstart_recipe(["sweep.variants=[{name: mlp-only, set: ['targets.include=[mlp]']}]"])
    r = recipe_from_sweep(with_variant, mlp)
    assert r.targets.include == ["mlp"] and (r.mask.top_k, r.edit.scale) == (0.07, 1.1)
    assert mlp.lock_entry()["variant"] == "mlp-only"
    assert recipe_from_sweep(quickstart_recipe(), ev).targets.include == []  # no variant: the recipe's own
    hostile = ev.__class__(**{**ev.__dict__, "confirmation": {**ev.confirmation, "variant_set": ["edit.scale=9"]}})
    with pytest.raises(InputError, match="a sweep.json cannot choose recipe settings"):
        recipe_from_sweep(quickstart_recipe(), hostile)


SMOLLM2 = "recipes/smollm2-arithmetic-boost.yaml"
SMOLLM2_GGUF = {"gguf_sha256": "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"}  # its Q4_1 file
# docs/releasing.md's step 2: where the data came from and where the release goes (the weights see none of it)
STEP_2 = [
    "base.hub_id=HuggingFaceTB/SmolLM2-135M-Instruct",
    "data.math.hub_dataset=openai/gsm8k",
    "data.general.0.hub_dataset=Salesforce/wikitext",
    "evaluation.general.0.hub_dataset=Salesforce/wikitext",
    "outputs.gguf=Q8_0",
    "hub.repo_id=you/SmolLM2-135M-Instruct-MathNeuro",
]


def _smollm2_sweep(tmp_path, variant: str, sets: tuple[str, ...] = ()):
    """A confirmed sweep of SmolLM2's recipe as written (no hub_dataset; ``sets`` applied to both recipes), its
    candidate one of the recipe's own ``sweep.variants`` (``variant``; ``""``: the recipe itself)."""
    from pathlib import Path

    from mathneuro_edit.recipe.io import load_recipe

    root = Path(__file__).resolve().parents[2]
    swept = load_recipe(str(root / SMOLLM2), list(sets))
    _write_sweep(tmp_path / "sw", True, recipe=swept, base=SMOLLM2_GGUF)
    ev = read_sweep(tmp_path / "sw")
    chosen = [list(v.set) for v in swept.sweep.variants if v.name == variant] if variant else [[]]
    confirmation = {**ev.confirmation, "variant": variant, "variant_set": chosen[0]}
    return ev.__class__(**{**ev.__dict__, "confirmation": confirmation}), lambda more: load_recipe(
        str(root / SMOLLM2), [*sets, *more]
    )


def test_provenance_is_carried_not_compared(tmp_path):
    """The guide's step 2 adds hub_dataset to the data sources of the recipe the sweep ran: the release takes the
    confirmed setting and keeps every hub_dataset for the card (issue 39 item 2: it was refused, exit 2)."""
    ev, recipe = _smollm2_sweep(tmp_path, "mlp-only")
    r = recipe_from_sweep(recipe(STEP_2), ev, base=SMOLLM2_GGUF)
    assert (r.mask.top_k, r.edit.scale, r.targets.include) == (0.07, 1.1, ["mlp"])
    assert r.data.math.hub_dataset == "openai/gsm8k" and r.data.general[0].hub_dataset == "Salesforce/wikitext"
    assert r.base.hub_id == "HuggingFaceTB/SmolLM2-135M-Instruct" and r.hub.repo_id.endswith("-MathNeuro")


def test_a_variant_that_replaces_a_source_drops_that_source_s_provenance(tmp_path):
    """SmolLM2's arith-calib calibrates on generated arithmetic: the card must not say it came from GSM8K."""
    ev, recipe = _smollm2_sweep(tmp_path, "arith-calib")
    r = recipe_from_sweep(recipe(STEP_2), ev, base=SMOLLM2_GGUF)
    assert r.data.math.path.endswith("arithmetic_calib_200.jsonl") and r.data.math.hub_dataset is None
    assert r.data.general[0].hub_dataset == "Salesforce/wikitext"  # a source the variant keeps keeps its origin
    own = "sweep.variants=[{name: own, set: [data.math.path=a.jsonl, data.math.hub_dataset=me/arith]}]"
    ev, recipe = _smollm2_sweep(tmp_path / "own", "own", (own,))
    named = recipe_from_sweep(recipe(STEP_2), ev, base=SMOLLM2_GGUF)
    assert named.data.math.hub_dataset == "me/arith"  # the variant's own origin, when it names one


def test_the_refusal_names_the_differing_key_with_both_values_whole(tmp_path):
    """Two templates that differ after their 80th character: the key is named, and both values print in full and
    differ (they were cut at 80 characters and printed alike, under the key ``data``)."""
    ev, recipe = _smollm2_sweep(tmp_path, "")
    head = "<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
    with pytest.raises(InputError) as e:  # YAML's "\\n" is a newline of the template
        recipe_from_sweep(recipe([*STEP_2, f'data.math.template="{head}\\n{{question}}\\n{{answer}}"']), ev)
    line = str(e.value)
    assert "the recipe's data.math.template differs from the sweep's (" in line and "\n" not in line.strip()
    mine, theirs = line.split(" differs from the sweep's (", 1)[1].rsplit("); the confirmed", 1)[0].split(" vs ")
    assert mine.endswith("{question}\\n{answer}'") and len(mine) > 90 and theirs == "None"
    with pytest.raises(InputError, match=r"the recipe's data.general differs from the sweep's \(\[\{'path'"):
        recipe_from_sweep(recipe([*STEP_2, "data.general=[a.txt, b.txt]"]), ev)  # lists of other lengths: whole
    with pytest.raises(InputError, match=r"data.general.0.field differs from the sweep's \('body' vs None\)"):
        recipe_from_sweep(recipe([*STEP_2, "data.general.0.field=body"]), ev)  # a list item's key, by its index


def _math(flags: list[bool]) -> MathResult:
    preds = tuple(MathPrediction(f"q{i}", 1, "", int(ok)) for i, ok in enumerate(flags))
    return MathResult(sum(flags), len(flags), preds)


def test_point_reads_the_general_loss_error_columns() -> None:
    base_g = GeneralResult(2.0, 9, 0.0, "", (4.0, 14.0), (3, 6))
    edited_g = GeneralResult(2.1, 9, 0.02, "", (4.3, 14.6), (3, 6))
    d = EvalResults(
        {"math": _math([True, False]), "general": base_g}, {"math": _math([True, True]), "general": edited_g}
    ).to_dict()
    p = _point(0.05, 1.1, 7, d)
    assert p.general_loss_se == pytest.approx(ratio_se([4.3, 14.6], [3, 6]), rel=1e-12)
    assert p.loss_change == pytest.approx(0.1, rel=1e-12)
    assert p.loss_change_se == pytest.approx(ratio_se([0.3, 0.6], [3, 6]), rel=1e-12)
    # without per-text sums (no standard error) and without a general comparison: nan, not an error
    d = EvalResults(
        {"math": _math([True, False]), "general": GeneralResult(2.0, 9)},
        {"math": _math([True, True]), "general": GeneralResult(2.1, 9, 0.02)},
    ).to_dict()
    p = _point(0.05, 1.1, 7, d)
    assert math.isnan(p.general_loss_se) and math.isnan(p.loss_change) and math.isnan(p.loss_change_se)
    del d["math"]["comparison"]  # no paired math result: p = 1, not significant
    p = _point(0.05, 1.1, 7, d)
    assert (p.mcnemar_p, p.significant) == (1.0, False)


def test_num_is_nan_only_for_none() -> None:
    assert math.isnan(_num(None)) and _num(2) == 2.0 and _num(0) == 0.0 and isinstance(_num(3), float)


def test_largest_gain_ties_go_to_the_lower_kl() -> None:
    def P(correct: int, kl: float, k: float) -> SweepPoint:  # noqa: N802 - a point, briefly
        return SweepPoint(k, 1.1, 10, correct / 100, 2.0, kl, correct, 100, mcnemar_p=0.3, significant=False)

    assert select_candidate([P(70, 0.02, 0.01), P(70, 0.01, 0.02), P(60, 0.0, 0.03)], 50, 0.05) == 1
    assert select_candidate([P(70, 0.01, 0.01), P(70, 0.01, 0.02)], 50, 0.05) == 0  # a full tie: the earlier
    assert select_candidate([P(51, 0.05, 0.01)], 50, 0.05) == 0  # one problem gained, KL at the budget: in
    assert select_candidate([P(51, 0.05, 0.01)], 51, 0.05) is None  # no gain: out
