"""The confirmation of a sweep survives a skeptic: the candidate is tested against the base AND two control edits of
the same size (the general-specific weights, magnitude-matched; random weights, seeded), under the recipe's prompt
and a second format, with every completion classified (answer / restart / no number) so that a gain that is only
more answers is a format effect, never a math boost.

Math outcomes are a fixed function of which edit is switched on (read from the real
:class:`~mathneuro_edit.engine.apply.ReversibleEdit` the sweep applies) and of the problem; everything else (the
organism's calibration, the masks of the candidate and the controls, the rounding to the release's dtype, the
files) is real.
"""

from __future__ import annotations

import hashlib
import json

import pytest

from mathneuro_edit.engine import apply as apply_mod
from mathneuro_edit.errors import InputError
from mathneuro_edit.recipe.io import quickstart_recipe
from mathneuro_edit.runs.sweep import evaluator as evaluator_mod
from mathneuro_edit.runs.sweep.evidence import read_sweep
from mathneuro_edit.runs.sweep.procedure import ArmOutcome, format_verdict
from mathneuro_edit.runs.sweep.search import run_sweep

SETS = [
    "evaluation.math=arithmetic",
    "data.samples=6",
    "sweep.selection_samples=60",
    "sweep.confirmation_samples=200",
    "sweep.general_samples=2",
    "sweep.kl_budget=10",
    "sweep.top_k=[0.05]",
    "sweep.scale=[1.1]",
    "evaluation.max_new_tokens=4",
    "sweep.confirmation_formats=[{name: equations 2-shot, n_shot: 2, prompt_style: equations, chat_template: false}]",
    "sweep.format_samples=150",
    "outputs.dtype=bfloat16",
]

# accuracy (percent) and restart rate (percent) per switched-on edit, by its mask method (None: the base)
REAL = {None: (30, 0), "mathneuro": (45, 0), "general": (30, 0), "random": (30, 0)}  # a specific math gain
SAME = {None: (30, 0), "mathneuro": (45, 0), "general": (45, 0), "random": (45, 0)}  # any edit of that size gains
FORMAT = {None: (20, 40), "mathneuro": (33, 0), "general": (20, 40), "random": (20, 40)}  # only more answers


def _fake(monkeypatch, table, seen=None):
    """Outcomes by the method of the edit switched on; with a restart rate, restarted problems are wrong and the
    accuracy among answers is the same for every edit (``table`` is chosen that way)."""
    state = {"method": None, "weights": set()}
    init, apply, restore = (
        apply_mod.ReversibleEdit.__init__,
        apply_mod.ReversibleEdit.apply,
        apply_mod.ReversibleEdit.restore,
    )

    def _init(self, model, mask, scale, store_dtype=None):
        init(self, model, mask, scale, store_dtype)
        self._method = mask.meta.get("method")

    def _apply(self):
        apply(self)
        state["method"] = self._method

    def _restore(self):
        restore(self)
        state["method"] = None

    monkeypatch.setattr(apply_mod.ReversibleEdit, "__init__", _init)
    monkeypatch.setattr(apply_mod.ReversibleEdit, "apply", _apply)
    monkeypatch.setattr(apply_mod.ReversibleEdit, "restore", _restore)

    def outcomes(model, tok, problems, **kw):
        acc, restart = table[state["method"]]
        if seen is not None:
            seen.append(
                (state["method"], str(next(model.parameters()).dtype), float(model.model.norm.weight[0].detach()))
            )
        correct, completions = [], []
        for p in problems:
            u = int(hashlib.sha256(p["question"].encode()).hexdigest()[:8], 16) % 100
            v = int(hashlib.sha256((p["question"] + "v").encode()).hexdigest()[:8], 16) % 100
            if v < restart:
                correct.append(False)
                completions.append(p["prefill"].split(" ")[0] + " +")  # "42 +": the problem again
            else:
                correct.append(u < acc * 100 // (100 - restart))
                completions.append("68")
        return correct, completions

    monkeypatch.setattr(evaluator_mod, "math_outcomes", outcomes)


def _sweep(folder, table, seen=None):
    with pytest.MonkeyPatch.context() as mp:
        _fake(mp, table, seen)
        run_sweep(quickstart_recipe(SETS), folder / "s", progress=False)
    return folder / "s", json.loads((folder / "s" / "sweep.json").read_text())


SEEN: list = []


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    return _sweep(tmp_path_factory.mktemp("real"), REAL, SEEN)


@pytest.fixture(scope="module")
def same(tmp_path_factory):
    return _sweep(tmp_path_factory.mktemp("same"), SAME)


@pytest.fixture(scope="module")
def fmt(tmp_path_factory):
    return _sweep(tmp_path_factory.mktemp("format"), FORMAT)


def test_a_specific_gain_is_confirmed_against_the_base_and_both_controls(real):
    folder, d = real
    seen = SEEN
    c = d["confirmation"]
    assert c["verdict"] == "math-boost" and c["confirmed"] is True and d["best"] == c["point"]
    assert [x["name"] for x in c["controls"]] == ["general-specific", "random"]
    # every control edits exactly as many weights as the candidate
    selected = d["selection"]["points"][c["point"]]["selected"]
    assert all(x["selected"] == selected for x in c["controls"])
    assert len({c["mask_sha256"], *[x["mask_sha256"] for x in c["controls"]]}) == 3
    primary, other = c["formats"]
    assert (
        primary["primary"]
        and primary["n"] == 200
        and set(primary["arms"]) == {"base", "candidate", "general-specific", "random"}
    )
    # every format measures both controls (the second format once had the general-specific control only)
    assert (
        other["name"] == "equations 2-shot"
        and other["n"] == 150
        and set(other["arms"]) == {"base", "candidate", "general-specific", "random"}
    )
    for f in (primary, other):
        pairs = {(t["before"], t["after"]) for t in f["tests"]}
        assert {("general-specific", "candidate"), ("random", "candidate")} <= pairs, f["name"]
    vs = {(t["before"], t["after"], t["answered_only"]): t for t in primary["tests"]}
    assert vs[("general-specific", "candidate", False)]["passes"] and vs[("random", "candidate", False)]["passes"]
    assert primary["arms"]["base"]["by_operation"].keys() == {"+", "-", "*"}
    assert sum(v["n"] for v in primary["arms"]["base"]["by_operation"].values()) == 200
    # measured on the weights the release stores: every confirmation arm ran on bf16-rounded weights
    assert c["weights_dtype"] == "bfloat16"
    confirm_runs = seen[-(4 * 2 + 4 * 2) :]  # 4 arms in each format; 200 problems = 2 blocks per arm; 150 = 2
    import torch

    for _, _, w in confirm_runs:
        assert torch.tensor(w).to(torch.bfloat16).item() == w
    assert "general-specific control" in d["recommendation"]
    assert read_sweep(folder).top_k == 0.05


def test_a_gain_that_any_edit_of_that_size_gives_is_not_confirmed(same):
    folder, d = same
    c = d["confirmation"]
    assert c["formats"][0]["tests"][0]["passes"]  # it does beat the base ...
    assert c["verdict"] == "not-specific" and c["confirmed"] is False and d["best"] is None  # ... and the control too
    assert d["recommendation"].startswith("nothing confirmed:") and "magnitude-matched control" in d["recommendation"]
    with pytest.raises(InputError, match="nothing was confirmed"):
        read_sweep(folder)


def test_a_gain_that_is_only_more_answers_is_a_format_effect(fmt):
    folder, d = fmt
    c = d["confirmation"]
    base, cand = c["formats"][0]["arms"]["base"], c["formats"][0]["arms"]["candidate"]
    assert base["restarts"] > 50 and cand["restarts"] == 0 and cand["correct"] > base["correct"]
    assert c["verdict"] == "format-effect" and c["confirmed"] is False
    assert "format effect" in d["recommendation"]
    with pytest.raises(InputError, match="nothing was confirmed"):
        read_sweep(folder)


def test_a_forged_verdict_is_refused(same, tmp_path):
    import shutil

    folder = tmp_path / "s"
    shutil.copytree(same[0], folder)
    d = json.loads((folder / "sweep.json").read_text())
    d["confirmation"]["confirmed"] = True
    (folder / "sweep.json").write_text(json.dumps(d))
    with pytest.raises(InputError, match="control|verdict"):
        read_sweep(folder)


def test_the_format_verdict_by_hand():
    ops = ("+",) * 40
    base = ArmOutcome("base", (True,) * 10 + (False,) * 30, ("answer",) * 40, ops)
    cand = ArmOutcome("candidate", (True,) * 22 + (False,) * 18, ("answer",) * 40, ops)
    assert format_verdict(base, cand, base, 0.05)[0] == "math-boost"
    assert format_verdict(base, cand, cand, 0.05)[0] == "not-specific"
    assert format_verdict(base, base, base, 0.05)[0] == "no-gain"


def test_the_card_states_the_controls_the_formats_and_the_operations(real):
    from mathneuro_edit.publish.card import CardSource, build_card, summarize_edit
    from mathneuro_edit.publish.lock import build_lock

    folder, d = real
    entry = read_sweep(folder).lock_entry()
    lock = build_lock(
        quickstart_recipe(), base_revision=None, data_records={}, stats_sha256="s", mask_sha256="m", output_files={}
    ) | {"sweep": entry}
    c = d["confirmation"]
    text = build_card(
        CardSource(quickstart_recipe(), lock, summarize_edit({}, model_params=1)), "checkpoint", base_model_id=None
    ).text
    effect = next(line for line in text.splitlines() if line.startswith("This model is a MathNeuro edit"))
    evidence = text[text.index("## Evidence for the boost") : text.index("## Evaluation")]
    assert "magnitude-matched control" in effect and "bfloat16 weights this repository stores" in effect
    base, cand = c["formats"][0]["arms"]["base"], c["formats"][0]["arms"]["candidate"]
    for op in ("+", "-", "*"):
        b, e = base["by_operation"][op], cand["by_operation"][op]
        assert (
            f"`{op}` {100 * b['correct'] / b['n']:.1f}% -> {100 * e['correct'] / e['n']:.1f}% ({b['n']} problems)"
            in effect
        )
    other = c["formats"][1]
    said = "confirmed there too" if other["verdict"] == "math-boost" else f"not confirmed ({other['verdict']})"
    assert f"Under a second prompt format (equations 2-shot, 150 problems) it was {said}." in effect
    for name in ("general-specific", "random"):
        t = next(t for t in c["formats"][0]["tests"] if t["before"] == name and t["after"] == "candidate")
        assert f"| {name} |" in evidence and f"{t['after_only']} vs {t['before_only']}" in evidence
    # the lock keeps the counts, not the sweep's per-problem lists
    assert "problems_sha256" not in json.dumps(lock["sweep"]["formats"])
