"""The sweep's decisions at unit speed (issue 48 item 2): each behaviour the fifth mutation audit found unpinned,
tested on the function that decides it, without a model or the CLI (milliseconds each).

- a paired test never "passes" for an arm that is significantly *worse* (``paired_test``, ``format_verdict``);
- the random control is drawn with ``sweep.control_seed``, not ``mask.seed`` (``_control_masks``), and the
  confirmation records that seed for the random control alone;
- each control's general loss and KL are its own edit's (``_general_costs``);
- ``read_sweep`` refuses a file whose primary format's verdict is not a math boost, whatever the top-level verdict
  and the counts say (``_check_controls``);
- the second format's worked examples are never confirmation problems, its ``n_shot`` and ``prompt_style`` are its
  own and both are in its cache key (``format_shots``, ``_Evaluator.prompt_key``);
- ``ReversibleEdit(store_dtype)`` writes the values the release stores (rounded), both states.

docs/testing.md ("Decisions at unit speed") lists the break each test was seen failing on.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from mathneuro_edit.data.sources import load_math_problems, problem_sha256
from mathneuro_edit.engine.apply import ReversibleEdit
from mathneuro_edit.engine.mask import Mask
from mathneuro_edit.errors import InputError
from mathneuro_edit.evaluation.significance import wilson_interval
from mathneuro_edit.recipe.io import quickstart_recipe
from mathneuro_edit.runs.steps.record import RunRecord

# the sweep internals pinned here (a move of them is a fix of these lines only)
from mathneuro_edit.runs.sweep import confirmation as confirmation_module
from mathneuro_edit.runs.sweep.cache import key_sha256
from mathneuro_edit.runs.sweep.evaluator import _Context, _Evaluator
from mathneuro_edit.runs.sweep.evidence import _check_controls
from mathneuro_edit.runs.sweep.problems import format_shots, sweep_problems
from mathneuro_edit.runs.sweep.procedure import (
    ArmOutcome,
    Confirmation,
    SweepPoint,
    confirm,
    detectable_text,
    evidence_text,
    format_verdict,
    halving_schedule,
    paired_test,
    promote,
    recommend,
)

from ._sweep_json import control_evidence

ALPHA = 0.05


def _arm(name: str, correct: list[bool]) -> ArmOutcome:
    n = len(correct)
    return ArmOutcome(name, tuple(correct), ("answer",) * n, ("+",) * n)


# ------------------------------------------------------------------------- a significantly worse arm never passes


def test_a_paired_test_of_an_arm_significantly_worse_does_not_pass() -> None:
    base = _arm("base", [True] * 20 + [False] * 20)
    worse = _arm("candidate", [False] * 20 + [False] * 20)  # 20 right only before, none only after: p ~ 2e-6
    t = paired_test(base, worse, ALPHA)
    assert (t["before_only"], t["after_only"]) == (20, 0) and t["mcnemar_p"] < 1e-5
    assert t["passes"] is False
    assert paired_test(base, worse, ALPHA, answered_only=True)["passes"] is False
    assert format_verdict(base, worse, base, ALPHA)[0] == "no-gain"
    # the same counts the other way round pass: the direction decides, not the p-value alone
    assert paired_test(worse, base, ALPHA)["passes"] is True


def test_a_candidate_no_better_or_significantly_worse_than_the_control_is_not_specific() -> None:
    base = _arm("base", [False] * 40)
    cand = _arm("candidate", [True] * 20 + [False] * 20)
    assert format_verdict(base, cand, base, ALPHA)[0] == "math-boost"  # the control gains nothing
    verdict, tests = format_verdict(base, cand, _arm("general-specific", list(cand.correct)), ALPHA)
    assert verdict == "not-specific" and tests[2]["before"] == "general-specific"  # the control gains as much
    better = _arm("general-specific", [True] * 40)  # the candidate is significantly worse than the control
    verdict, tests = format_verdict(base, cand, better, ALPHA)
    assert verdict == "not-specific" and tests[2]["mcnemar_p"] < ALPHA and tests[2]["passes"] is False


def test_a_paired_test_counts_only_the_problems_both_answered_when_asked() -> None:
    base = ArmOutcome("base", (False,) * 6, ("restart",) * 3 + ("answer",) * 3, ("+",) * 6)
    cand = ArmOutcome("candidate", (True,) * 6, ("answer",) * 6, ("+",) * 6)
    t = paired_test(base, cand, ALPHA, answered_only=True)
    assert (t["n"], t["before_only"], t["after_only"], t["answered_only"]) == (3, 0, 3, True)
    with pytest.raises(ValueError, match="pair the same problems"):
        paired_test(base, _arm("candidate", [True] * 5), ALPHA)


# ----------------------------------------------------------------------------------- the controls' own draws


class _Counts:
    def __init__(self, counts: dict[str, int]) -> None:
        self._counts = counts

    def counts(self) -> dict[str, int]:
        return dict(self._counts)

    def __iter__(self):  # noqa: ANN204
        return iter(self._counts)


def test_the_random_control_is_drawn_with_sweep_control_seed_not_mask_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    recipe = quickstart_recipe(["mask.seed=11", "sweep.control_seed=29"])
    drawn: list[tuple[str, Any]] = []

    stats, weights = object(), {"w": object()}

    def recipe_masks(recipe_, stats_, top_ks, weights_, *, method=None, seed=None):  # noqa: ANN001, ANN202
        assert recipe_ is recipe and stats_ is stats and weights_ is weights and top_ks == [0.05]
        drawn.append((method, seed))
        return [_Counts({"w": 3})]

    kept: list[Any] = []
    monkeypatch.setattr(confirmation_module, "recipe_masks", recipe_masks)
    monkeypatch.setattr(confirmation_module, "_variant_mask", lambda mask, keep: kept.append(keep) or mask)
    arm = SimpleNamespace(mask=_Counts({"w": 3}))
    candidate = SimpleNamespace(arm=arm, point=SimpleNamespace(top_k=0.05))
    controls = confirmation_module._control_masks(recipe, weights, stats, candidate)
    assert [(name, method) for name, method, _ in controls] == [("general-specific", "general"), ("random", "random")]
    assert drawn == [("general", 29), ("random", 29)]
    assert kept == [{"w"}, {"w"}]  # each control kept to the candidate's matrices (a variant's targets)
    # a control whose counts per matrix differ from the candidate's is refused
    arm.mask = _Counts({"w": 4})
    with pytest.raises(RuntimeError, match="counts per matrix differ"):
        confirmation_module._control_masks(recipe, weights, stats, candidate)


class _Evaluations:
    """An evaluator whose general loss sums and KL depend on the mask it is given (its name)."""

    texts = ["one", "two"]

    def base_general(self) -> dict[str, Any]:
        return {"loss_sums": [10.0, 20.0], "tokens": [5, 5]}

    def general(self, mask: str, scale: float) -> dict[str, Any]:
        extra = {"candidate": 1.0, "gs": 3.0, "rnd": 7.0}[mask] * scale
        return {"loss_sums": [10.0 + extra, 20.0 + extra], "kl": extra / 100}


def test_each_control_s_general_loss_and_kl_are_its_own() -> None:
    lines: list[str] = []
    ctx = SimpleNamespace(echo=lines.append)
    arm = SimpleNamespace(mask="candidate", scale=2.0)
    general = confirmation_module._general_costs(
        ctx, _Evaluations(), arm, [("general-specific", "general", "gs"), ("random", "random", "rnd")]
    )
    assert set(general) == {"candidate", "general-specific", "random"}
    # per token: each text's sum grew by extra * scale over 5 tokens, both texts alike
    assert general["candidate"]["kl"] == pytest.approx(0.02)
    assert general["general-specific"]["kl"] == pytest.approx(0.06)
    assert general["random"]["kl"] == pytest.approx(0.14)
    assert general["candidate"]["loss_change"] == pytest.approx(2.0 / 5)
    assert general["general-specific"]["loss_change"] == pytest.approx(6.0 / 5)
    assert general["random"]["loss_change"] == pytest.approx(14.0 / 5)
    assert general["random"]["loss"] == pytest.approx((30.0 + 2 * 14.0) / 10)
    assert (general["random"]["texts"], general["random"]["tokens"]) == (2, 10)
    assert general["random"]["loss_change_se"] == pytest.approx(0.0)  # both texts changed alike
    assert set(general["random"]) == {"texts", "tokens", "loss", "loss_change", "loss_change_se", "kl"}
    assert lines == [
        "      general loss and KL of the general-specific control on 2 texts",
        "      general loss and KL of the random control on 2 texts",
    ]


# ------------------------------------------------------------------------- read_sweep reads the primary verdict


def test_a_file_whose_primary_format_is_not_a_math_boost_is_refused() -> None:
    c = {"confirmed": True, **control_evidence(8, 0, 7)}
    _check_controls(c, 8, ALPHA, "sweep.json: confirmation")  # as written: taken
    for verdict in ("not-specific", "format-effect", "no-gain", None):
        c["formats"][0]["verdict"] = verdict
        with pytest.raises(InputError, match="not math-boost"):
            _check_controls(c, 8, ALPHA, "sweep.json: confirmation")
    c["formats"][0]["verdict"] = "math-boost"
    c["verdict"] = "not-specific"
    with pytest.raises(InputError, match="not math-boost"):
        _check_controls(c, 8, ALPHA, "sweep.json: confirmation")


def test_the_control_tests_are_read_from_the_primary_format_only() -> None:
    c = control_evidence(8, 0, 7)
    second = {**c["formats"][0], "primary": False, "name": "chat"}
    c["formats"] = [{**c["formats"][0], "tests": c["formats"][0]["tests"][:2]}, second]  # the control test moved
    with pytest.raises(InputError, match="no test of the candidate against general-specific"):
        _check_controls(c, 8, ALPHA, "where")
    weak = control_evidence(8, 0, 7, control_only=4)  # the control does about as well: p = 0.55
    with pytest.raises(InputError, match=r"its test of the candidate against general-specific \(7 vs 4"):
        _check_controls(
            {**weak, "verdict": "math-boost", "formats": [{**weak["formats"][0], "verdict": "math-boost"}]},
            8,
            ALPHA,
            "where",
        )


# ------------------------------------------------------------------------------ the second format's problems


def _formats_recipe(*extra: str) -> Any:
    return quickstart_recipe(
        [
            "evaluation.n_shot=2",
            "sweep.selection_samples=20",
            "sweep.confirmation_samples=30",
            "sweep.confirmation_formats=[{name: eq, n_shot: 3, prompt_style: equations, chat_template: false}, "
            "{name: qa, n_shot: 1}]",
            *extra,
        ]
    )


def test_the_second_format_s_worked_examples_are_never_sweep_problems() -> None:
    for seed in range(3):
        recipe = _formats_recipe(f"evaluation.seed={seed}")
        shots, selection, confirmation = sweep_problems(recipe)
        other = format_shots(recipe)
        assert len(other) == 3  # the most any format asks
        used = {problem_sha256(p) for p in shots + selection + confirmation}
        assert not used & {problem_sha256(p) for p in other}, seed
        assert other != shots[: len(other)]


def test_a_recipe_without_other_formats_draws_no_other_worked_examples() -> None:
    assert format_shots(quickstart_recipe([])) == []
    assert format_shots(_formats_recipe("sweep.confirmation_formats=[{name: zero, n_shot: 0}]")) == []


class _Tok:
    chat_template = None


def _evaluator(recipe: Any, shots: list[dict[str, Any]], fmt: Any = None, weights: str | None = None) -> _Evaluator:
    ctx = _Context(RunRecord(recipe, tokenizer=_Tok(), progress=False), "f" * 64, SimpleNamespace())
    return _Evaluator(ctx, shots, ["a general text"], fmt, weights)


def test_a_format_s_n_shot_and_prompt_style_are_its_own_and_in_its_cache_key() -> None:
    recipe = _formats_recipe()
    shots = format_shots(recipe)
    eq, qa = recipe.sweep.confirmation_formats
    own = _evaluator(recipe, shots[:2])
    first, second = _evaluator(recipe, shots, eq), _evaluator(recipe, shots, qa)
    assert (own.n_shot, first.n_shot, second.n_shot) == (2, 3, 1)
    assert (own.style, first.style, second.style) == ("question-answer", "equations", "question-answer")
    assert first.prompt_key["prompt_style"] == "equations"
    assert "prompt_style" not in second.prompt_key  # question-answer: the key of the sweeps before the setting
    assert first.prompt_key["shots"] == [problem_sha256(s) for s in shots[:3]]
    assert second.prompt_key["shots"] == [problem_sha256(shots[0])]
    # a format that differs from another only in its prompt style has another cache entry
    eq_as_qa = eq.model_copy(update={"prompt_style": "question-answer"})
    same_but_style = _evaluator(recipe, shots, eq_as_qa).prompt_key
    assert {k: v for k, v in same_but_style.items()} == {
        k: v for k, v in first.prompt_key.items() if k != "prompt_style"
    }
    assert key_sha256(same_but_style) != key_sha256(first.prompt_key)


def test_the_weights_the_arms_were_rounded_to_are_in_the_cache_key() -> None:
    recipe = _formats_recipe()
    plain = _evaluator(recipe, []).prompt_key
    rounded = _evaluator(recipe, [], weights="bfloat16").prompt_key
    assert "weights" not in plain and rounded["weights"] == "bfloat16"
    assert {k: v for k, v in rounded.items() if k != "weights"} == plain


# ------------------------------------------------------------------------------------ the shipped-dtype rounding


def _model_and_mask() -> tuple[torch.nn.Module, Mask]:
    model = torch.nn.Linear(4, 2, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[1.001, 2.003, -3.0007, 0.1], [5.0009, 1.0, -0.3333, 7.77]]))
    mask = torch.zeros(2, 4, dtype=torch.bool)
    mask[0, :3] = True
    mask[1, 2] = True
    return model, Mask({"weight": mask})


def test_a_reversible_edit_with_a_store_dtype_writes_the_stored_values_in_both_states() -> None:
    model, mask = _model_and_mask()
    original = model.weight.detach().clone()
    sel = mask["weight"]
    stored = ReversibleEdit(model, mask, 1.1, store_dtype=torch.bfloat16)
    with stored:
        on = model.weight.detach().clone()
    off = model.weight.detach().clone()
    want = (original[sel] * 1.1).to(torch.bfloat16).to(torch.float32)
    assert torch.equal(on[sel], want)
    assert not torch.equal(on[sel], original[sel] * 1.1)  # the rounding changed them: the test can tell
    assert torch.equal(off[sel], original[sel].to(torch.bfloat16).to(torch.float32))
    assert torch.equal(on[~sel], original[~sel]) and torch.equal(off[~sel], original[~sel])  # the rest: untouched
    # without store_dtype, or with the model's own dtype, nothing is rounded
    for store in (None, torch.float32):
        model, mask = _model_and_mask()
        with ReversibleEdit(model, mask, 1.1, store_dtype=store):
            assert torch.equal(model.weight.detach()[sel], original[sel] * 1.1)
        assert torch.equal(model.weight.detach(), original)


def test_the_confirmation_s_rounded_edits_store_the_release_dtype(tmp_path: Path) -> None:
    recipe = quickstart_recipe(["outputs.dtype=bfloat16"])
    model, mask = _model_and_mask()
    original = model.weight.detach().clone()
    ctx = SimpleNamespace(run=SimpleNamespace(recipe=recipe, model=model))
    arm = SimpleNamespace(mask=mask, scale=1.1)
    edits, weights = confirmation_module._rounded_edits(ctx, arm, [("random", "random", mask)])
    assert weights == "bfloat16" and set(edits) == {"candidate", "random"}
    assert all(edit.store_dtype == torch.bfloat16 for _, edit in edits.values())
    assert torch.equal(model.weight.detach(), original.to(torch.bfloat16).to(torch.float32))  # the model rounded
    model, mask = _model_and_mask()
    same = SimpleNamespace(run=SimpleNamespace(recipe=quickstart_recipe(["outputs.dtype=float32"]), model=model))
    _, weights = confirmation_module._rounded_edits(same, SimpleNamespace(mask=mask, scale=1.1), [])
    assert weights is None  # nothing rounded: the arms are measured on the model's own weights


# ---------------------------------------------------------------------------------- the evidence in one clause


def _outcome(name: str, right: int, forms: tuple[str, ...] | None = None, n: int = 40) -> ArmOutcome:
    return ArmOutcome(name, (True,) * right + (False,) * (n - right), forms or ("answer",) * n, ("+", "-") * (n // 2))


def test_the_evidence_clause_of_each_verdict_names_the_controls_and_what_the_failed_test_could_detect() -> None:
    """The sweep's recommendation quotes this clause: each format's verdict, accuracy, answer rate and accuracy
    among answers; each control's test; and, for a format not confirmed, what the test it failed could detect."""
    probs = [{"question": f"q{i}", "answer": f"#### {i}"} for i in range(40)]
    none, gain, rnd = _outcome("general-specific", 0), _outcome("candidate", 20), _outcome("random", 2)
    restarts = _outcome("base", 0, ("restart",) * 20 + ("answer",) * 20)
    arms = [
        ("recipe's prompt", {"base": _outcome("base", 0), "candidate": gain, "general-specific": none}),
        ("chat", {"base": restarts, "candidate": gain, "general-specific": none}),
        ("eq", {"base": _outcome("base", 0), "candidate": gain, "general-specific": _outcome("general-specific", 18)}),
        ("none", {"base": _outcome("base", 0), "candidate": _outcome("candidate", 2), "general-specific": none}),
    ]
    formats = tuple(
        confirmation_module._format_record(None, label, probs, {**a, "random": rnd}, "general-specific", ALPHA)
        for label, a in arms
    )
    assert [f["verdict"] for f in formats] == ["math-boost", "format-effect", "not-specific", "no-gain"]
    c = Confirmation(40, (), 0.1, 1.1, 0, 20, 0, 20, 1e-6, True, ALPHA, 0, formats=formats)
    assert evidence_text(c) == (
        " [recipe's prompt (40 problems): math-boost, base 0.0% -> 50.0%, answer rate 100.0% -> 100.0%, accuracy among answers 0.0% -> 50.0%; "
        "vs the general-specific control (0.0%): 20 vs 0, p < 0.001; "
        "vs the random control (5.0%): 18 vs 0, p < 0.001"
        " | chat (40 problems): format-effect, base 0.0% -> 50.0%, answer rate 50.0% -> 100.0%, accuracy among answers 0.0% -> 50.0%; "
        "vs the general-specific control (0.0%): 20 vs 0, p < 0.001; "
        "vs the random control (5.0%): 18 vs 0, p < 0.001; "
        "no gain is detectable on 20 problems of which none changed"
        " | eq (40 problems): not-specific, base 0.0% -> 50.0%, answer rate 100.0% -> 100.0%, accuracy among answers 0.0% -> 50.0%; "
        "vs the general-specific control (45.0%): 2 vs 0, p = 0.5; "
        "vs the random control (5.0%): 18 vs 0, p < 0.001; "
        "no gain is detectable at 80% power on 40 problems of which 5.0% changed"
        " | none (40 problems): no-gain, base 0.0% -> 5.0%, answer rate 100.0% -> 100.0%, accuracy among answers 0.0% -> 5.0%; "
        "vs the general-specific control (0.0%): 2 vs 0, p = 0.5; "
        "vs the random control (5.0%): 0 vs 0, p = 1; "
        "no gain is detectable at 80% power on 40 problems of which 5.0% changed]"
    )
    assert evidence_text(Confirmation(10, (), 0.1, 1.1, 1, 5, 0, 4, 0.12, False, ALPHA, 0)) == ""


# ------------------------------------------------------------------------------------------- exact boundaries


def test_a_p_value_equal_to_alpha_is_not_significant() -> None:
    """5 vs 0 discordant: the exact McNemar p is 2 / 2^5 = 0.0625; at alpha 0.0625 it is not below it."""
    base, cand = _arm("base", [False] * 5), _arm("candidate", [True] * 5)
    assert paired_test(base, cand, 0.0625)["mcnemar_p"] == 0.0625
    assert paired_test(base, cand, 0.0625)["passes"] is False
    assert paired_test(base, cand, math.nextafter(0.0625, 1.0))["passes"] is True
    assert confirm([False] * 5, [True] * 5, 0.0625) == (0, 5, 0.0625, False)
    assert confirm([False] * 5, [True] * 5, 0.07) == (0, 5, 0.0625, True)


def test_the_rounds_of_successive_halving_at_their_edges() -> None:
    assert halving_schedule(8, 300, None, 3) == [(8, 300)]
    assert halving_schedule(8, 300, 300, 3) == [(8, 300)]
    assert halving_schedule(2, 100, 10, 3) == [(2, 10), (1, 100)]  # two points still halve
    assert halving_schedule(1, 100, 10, 3) == [(1, 100)]
    assert halving_schedule(27, 90, 10, 3) == [(27, 10), (9, 30), (3, 90)]  # a round ending on all problems: last


def test_a_point_exactly_at_the_budget_continues() -> None:
    assert promote([30, 34], [0.01, 0.05], 0.05, 1) == [1]
    assert promote([30, 34], [0.01, math.nextafter(0.05, 1.0)], 0.05, 1) == [0]


def test_a_recipe_without_an_evaluation_draws_no_other_worked_examples() -> None:
    recipe = quickstart_recipe(["evaluation=null", "sweep.confirmation_formats=[{name: eq, n_shot: 2}]"])
    assert format_shots(recipe) == []


def test_the_evidence_clause_reads_each_arm_s_own_rates_and_a_record_s_missing_keys() -> None:
    probs = [{"question": f"q{i}", "answer": f"#### {i}"} for i in range(40)]
    base = _outcome("base", 4, ("answer",) * 30 + ("restart",) * 10)
    cand = ArmOutcome("candidate", (True,) * 24 + (False,) * 16, ("answer",) * 36 + ("none",) * 4, ("+", "-") * 20)
    arms = {"base": base, "candidate": cand, "general-specific": _outcome("general-specific", 6)}
    f = confirmation_module._format_record(None, "p", probs, arms, "general-specific", ALPHA)
    c = Confirmation(40, (), 0.1, 1.1, 4, 24, 0, 20, 1e-6, True, ALPHA, 0, formats=(f,))
    assert evidence_text(c) == (
        " [p (40 problems): math-boost, base 10.0% -> 60.0%, answer rate 75.0% -> 90.0%, accuracy among answers "
        "13.3% -> 66.7%; vs the general-specific control (15.0%): 18 vs 0, p < 0.001]"
    )
    bare = Confirmation(40, (), 0.1, 1.1, 4, 24, 0, 20, 1e-6, True, ALPHA, 0, formats=({"verdict": "no-gain"},))
    assert evidence_text(bare) == (
        " [? (0 problems): no-gain, base 0.0% -> 0.0%, answer rate 0.0% -> 0.0%, accuracy among answers 0.0% -> 0.0%]"
    )
    empty = Confirmation(40, (), 0.1, 1.1, 4, 24, 0, 20, 1e-6, True, ALPHA, 0, formats=({},))
    assert evidence_text(empty).startswith(" [? (0 problems): ?, base 0.0% -> 0.0%")


def test_the_test_a_format_failed_is_found_whatever_the_order_of_its_record() -> None:
    from mathneuro_edit.runs.sweep.procedure import _failed_test

    def t(before: str, answered: bool, after: str = "candidate") -> dict[str, Any]:
        return {"before": before, "after": after, "answered_only": answered, "n": 9}

    tests = [t("base", True), t("general-specific", True), t("base", False, "general-specific"), t("base", False)]
    tests.append(t("general-specific", False))
    assert _failed_test({"verdict": "no-gain", "tests": tests}) is tests[3]
    assert _failed_test({"verdict": "format-effect", "tests": tests}) is tests[0]
    assert _failed_test({"verdict": "not-specific", "tests": tests}) is tests[4]
    assert _failed_test({"verdict": "math-boost", "tests": tests}) is None
    assert _failed_test({"verdict": "no-gain"}) is None
    assert _failed_test({"verdict": "no-gain", "tests": ["not a test", t("base", False)]})["before"] == "base"


def test_what_a_test_that_did_not_show_a_gain_could_detect() -> None:
    assert detectable_text(100, 3, 3, ALPHA) == (
        "no gain is detectable at 80% power on 100 problems of which 6.0% changed"
    )
    assert detectable_text(100, 0, 0, ALPHA) == "no gain is detectable on 100 problems of which none changed"
    assert detectable_text(800, 5, 14, 0.05) == (
        "the smallest gain 800 problems detect at 80% power: +1.6 points (2.4% of them changed)"
    )
    assert detectable_text(800, 5, 14, 0.01) == (
        "the smallest gain 800 problems detect at 80% power: +1.8 points (2.4% of them changed)"
    )


def test_the_three_sets_have_their_sizes_and_no_repeated_question(tmp_path: Path) -> None:
    import json

    shots, selection, confirmation = sweep_problems(_formats_recipe())
    assert (len(shots), len(selection), len(confirmation)) == (2, 20, 30)
    path = tmp_path / "probs.jsonl"
    rows = [{"question": f"q{i % 9}", "answer": f"#### {i % 9}"} for i in range(60)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    recipe = quickstart_recipe(
        [f"evaluation.math={path}", "evaluation.n_shot=1", "sweep.selection_samples=2", "sweep.confirmation_samples=40"]
    )
    shots, selection, confirmation = sweep_problems(recipe)
    questions = [p["question"] for p in confirmation]
    assert len(questions) == len(set(questions)) == 6  # 9 distinct questions, 3 used before


# ------------------------------------------------------ what sweep.json records of each arm, format and confirmation


def test_an_arm_s_counts_and_rates_are_its_own_overall_and_per_operation() -> None:
    """sweep.json's arm summary, key by key in its order, against counts made by hand (issue 48's mutation audit)."""
    w = wilson_interval
    arm = ArmOutcome(
        "candidate",
        (True, False, True, False, True, False, True, False, False),
        ("answer", "answer", "restart", "none", "answer", "restart", "answer", "restart", "answer"),
        ("+", "-", "+", "*", "", "+", "-", "*", "+"),
    )

    def rates(n: int, k: int, answered: int, restarts: int, none: int, right: int) -> dict[str, Any]:
        return {
            "n": n,
            "correct": k,
            "accuracy": k / n,
            "ci95": list(w(k, n)),
            "answered": answered,
            "restarts": restarts,
            "no_number": none,
            "answer_rate": answered / n,
            "answer_rate_ci95": list(w(answered, n)),
            "correct_among_answers": right,
            "accuracy_among_answers": right / answered if answered else 0.0,
            "accuracy_among_answers_ci95": list(w(right, answered)) if answered else [0.0, 1.0],
        }

    s = arm.summary()
    # problems 0-8: right 0 2 4 6; answered 0 1 4 6 8 (right among them: 0 4 6); restarts 2 5 7; no number 3
    assert s == {
        "name": "candidate",
        **rates(9, 4, 5, 3, 1, 3),
        # "+": problems 0 2 5 8; "-": 1 6; "*": 3 7 (none answered); problem 4 is not arithmetic
        "by_operation": {"*": rates(2, 0, 0, 1, 1, 0), "+": rates(4, 2, 2, 2, 0, 1), "-": rates(2, 1, 2, 0, 0, 1)},
    }
    assert list(s) == ["name", *rates(1, 0, 0, 0, 0, 0), "by_operation"]  # the JSON's key order
    assert list(s["by_operation"]) == ["*", "+", "-"]
    assert s["by_operation"]["*"]["accuracy_among_answers_ci95"] == [0.0, 1.0]  # none answered: nothing is known
    assert all(type(v) is list for v in (s["ci95"], s["answer_rate_ci95"], s["accuracy_among_answers_ci95"]))
    nothing = [0.0, 1.0]  # no problems: rates of 0, intervals of nothing known
    assert ArmOutcome("base", (), (), ()).summary() == {
        "name": "base",
        **dict.fromkeys(["n", "correct"], 0),
        **{"accuracy": 0.0, "ci95": nothing, "answered": 0, "restarts": 0, "no_number": 0, "answer_rate": 0.0},
        **{"answer_rate_ci95": nothing, "correct_among_answers": 0, "accuracy_among_answers": 0.0},
        **{"accuracy_among_answers_ci95": nothing, "by_operation": {}},
    }


def test_a_format_s_record_holds_its_prompt_problems_verdict_arms_and_every_paired_test() -> None:
    probs = [{"question": f"q{i}", "answer": f"#### {i}"} for i in range(40)]
    outcomes = {
        "base": _outcome("base", 0),
        "candidate": _outcome("candidate", 20),
        "general-specific": _outcome("general-specific", 1),
        "random": _outcome("random", 2),
    }
    (fmt,) = quickstart_recipe(["sweep.confirmation_formats=[{name: chat, n_shot: 2}]"]).sweep.confirmation_formats
    primary = confirmation_module._format_record(None, "recipe's prompt", probs, outcomes, "general-specific", ALPHA)
    other = confirmation_module._format_record(fmt, "chat", probs, outcomes, "general-specific", ALPHA)
    for record in (primary, other):
        assert list(record) == [
            "name", "primary", "prompt", "n", "problems_sha256", "verdict", "confirmed", "arms", "tests", "_outcomes"
        ]  # fmt: skip
        assert record["n"] == 40 and record["problems_sha256"] == [problem_sha256(q) for q in probs]
        assert (record["verdict"], record["confirmed"]) == ("math-boost", True)
        assert record["arms"] == {name: o.summary() for name, o in outcomes.items()}
        assert record["_outcomes"] is outcomes  # for the caller's one test, dropped before the JSON
        # the candidate against the base (all, then both answered), then each control: it against the control,
        # the control against the base
        assert [(t["before"], t["after"], t["answered_only"]) for t in record["tests"]] == [
            ("base", "candidate", False),
            ("base", "candidate", True),
            ("general-specific", "candidate", False),
            ("base", "general-specific", False),
            ("random", "candidate", False),
            ("base", "random", False),
        ]
    assert (primary["name"], primary["primary"], primary["prompt"]) == ("recipe's prompt", True, None)
    assert (other["name"], other["primary"]) == ("chat", False)
    assert other["prompt"] == {"name": "chat", "n_shot": 2, "chat_template": "auto", "prompt_style": "question-answer"}
    only_one = {**outcomes, "general-specific": _outcome("general-specific", 20)}  # the control gains as much
    record = confirmation_module._format_record(None, "p", probs, only_one, "general-specific", ALPHA)
    assert (record["verdict"], record["confirmed"]) == ("not-specific", False)


def test_the_confirmation_s_json_is_its_fields_in_order_with_lists_and_both_intervals() -> None:
    c = Confirmation(
        10, ("a", "b"), 0.05, 1.1, 3, 8, 1, 6, 0.125, False, 0.05, 2, "m" * 64, "v", ("mask.seed=3",),
        verdict="no-gain", formats=({"name": "p"},), controls=({"name": "random"},), weights_dtype="bfloat16",
        general={"kl": 0.01}, compute_dtype="float32",
    )  # fmt: skip
    d = c.to_dict()
    assert d == {
        "n": 10,
        "problems_sha256": ["a", "b"],
        "top_k": 0.05,
        "scale": 1.1,
        "base_correct": 3,
        "edited_correct": 8,
        "mcnemar_p": 0.125,
        "confirmed": False,
        "alpha": 0.05,
        "point": 2,
        "base_only": 1,
        "edited_only": 6,
        "base_ci95": list(wilson_interval(3, 10)),
        "edited_ci95": list(wilson_interval(8, 10)),
        "mask_sha256": "m" * 64,
        "variant": "v",
        "variant_set": ["mask.seed=3"],
        "verdict": "no-gain",
        "weights_dtype": "bfloat16",
        "compute_dtype": "float32",
        "controls": [{"name": "random"}],
        "formats": [{"name": "p"}],
        "general": {"kl": 0.01},
    }
    assert list(d) == [  # the JSON's key order
        "n", "problems_sha256", "top_k", "scale", "base_correct", "edited_correct", "mcnemar_p", "confirmed", "alpha",
        "point", "base_only", "edited_only", "base_ci95", "edited_ci95", "mask_sha256", "variant", "variant_set",
        "verdict", "weights_dtype", "compute_dtype", "controls", "formats", "general",
    ]  # fmt: skip
    assert all(type(d[k]) is list for k in ("problems_sha256", "base_ci95", "variant_set", "controls", "formats"))


def test_the_sweep_s_problems_keep_their_prompt_keys_only() -> None:
    """A problem's prefill starts the model's answer: kept, with the question and the answer; the loader's other keys
    (the gold number) are not part of a prompt and are dropped."""
    recipe = quickstart_recipe(
        [
            "evaluation.math=arithmetic",
            "evaluation.n_shot=1",
            "sweep.selection_samples=3",
            "sweep.confirmation_samples=4",
        ]
    )
    shots, selection, confirmation = sweep_problems(recipe)
    drawn = load_math_problems(recipe.evaluation.math, 8, recipe.evaluation.seed)
    assert all(p.keys() >= {"question", "answer", "gold", "prefill"} for p in drawn)
    assert shots + selection + confirmation == [
        {"question": p["question"], "answer": p["answer"], "prefill": p["prefill"]} for p in drawn
    ]
    plain = quickstart_recipe(["evaluation.n_shot=1", "sweep.selection_samples=3", "sweep.confirmation_samples=4"])
    assert all(list(p) == ["question", "answer"] for p in sum(sweep_problems(plain), []))  # no prefill: none added


# ------------------------------------------------------------------------------ the recommendation's sentences


def _point(correct: int) -> SweepPoint:
    return SweepPoint(0.05, 1.1, 9, correct / 20, 2.0, 0.01, correct, 20, mcnemar_p=0.5, holm_p=0.75)


def test_the_recommendation_counts_one_problem_in_the_singular_and_no_selection_as_zero_percent() -> None:
    def chosen(correct: int, base: int) -> str:
        return recommend([_point(correct)], base, 20, 0, None, 0.05)[1]

    assert chosen(6, 5) == (
        "nothing confirmed: the candidate top_k=0.05 scale=1.1, chosen among 1 settings on 20 selection problems "
        "(25.0% -> 30.0%, +1 problem, raw p = 0.5, Holm p = 0.75, general KL 0.01, budget 0.05) was not tested on "
        "confirmation problems"
    )
    assert "-> 35.0%, +2 problems, raw" in chosen(7, 5) and "-> 20.0%, -1 problem, raw" in chosen(4, 5)
    assert "(0.0% -> 5.0%, +1 problem, raw" in chosen(1, 0) and "+3 problems" in chosen(4, 1)
    assert recommend([], 0, 0, None, None, 0.05)[1] == (
        "nothing confirmed: no setting within the general-KL budget 0.05 raises math accuracy over the base (0.0% on "
        "0 selection problems), so none was tested on the confirmation problems; do not publish a boost from this sweep"
    )


def test_a_format_effect_or_an_unspecific_gain_is_named_and_a_no_gain_says_what_it_could_detect() -> None:
    c = Confirmation(40, (), 0.05, 1.1, 4, 24, 0, 20, 1.9e-6, False, ALPHA, 0)
    chosen = (
        "the candidate top_k=0.05 scale=1.1, chosen among 1 settings on 20 selection problems (25.0% -> 30.0%, +1 "
        "problem, raw p = 0.5, Holm p = 0.75, general KL 0.01, budget 0.05)"
    )
    measured = (
        "on 40 other problems: base 10.0% (4/40, 4.0-23.1) -> 60.0% (24/40, 44.6-73.7), +50.0 points, 0 right only "
        "before and 20 only after, exact McNemar p < 0.001"
    )
    for verdict, meaning in (
        ("format-effect", "a format effect, not a math boost: the gain is not there among the problems both answer"),
        ("not-specific", "not specific to the math-specific weights: it does not beat the magnitude-matched control"),
    ):
        best, text = recommend([_point(6)], 5, 20, 0, replace(c, verdict=verdict), 0.05)
        assert best is None and text == (
            f"nothing confirmed: {chosen} gained {measured}, but it is {meaning}; do not publish a boost from this sweep"
        )
    best, text = recommend([_point(6)], 5, 20, 0, replace(c, verdict="no-gain"), 0.05)
    assert best is None and text == (
        f"nothing confirmed: {chosen} did not confirm {measured} (a confirmed gain needs p < 0.05; "
        f"{detectable_text(40, 0, 20, ALPHA)}); do not publish a boost from this sweep"
    )


def test_a_control_arm_without_an_accuracy_reads_zero() -> None:
    test = {"before": "random", "after": "candidate", "answered_only": False, "after_only": 3, "before_only": 1}
    f = {"name": "p", "n": 4, "verdict": "math-boost", "arms": {"random": {}}, "tests": [test | {"mcnemar_p": 0.625}]}
    text = evidence_text(Confirmation(4, (), 0.1, 1.1, 0, 3, 0, 3, 0.25, True, ALPHA, 0, formats=(f,)))
    assert text.endswith("; vs the random control (0.0%): 3 vs 1, p = 0.625]")
