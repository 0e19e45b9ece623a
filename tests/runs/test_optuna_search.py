"""``sweep.search: optuna`` (runs/sweep/optuna_search.py): the search's rules (milliseconds), the rule's error rate
under the null over the larger space (a simulation, about a second), and the search on the shipped organism:
the same seed gives the same trials, a killed search resumes from its SQLite study to the trials of an
uninterrupted one, ``--more-trials`` extends a finished one, and the one candidate goes through the grid's
confirmation.

Math outcomes on the organism are a fixed function of (edit, problem), as in tests/runs/test_sweep_resume.py: what
is tested is the orchestration, on the organism's real calibration, masks and general texts.
"""

from __future__ import annotations

import hashlib
import json
import math
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from mathneuro_edit.errors import InputError
from mathneuro_edit.evaluation.significance import mcnemar_power
from mathneuro_edit.layout import OPTUNA_PNGS, OPTUNA_STUDY
from mathneuro_edit.recipe.io import quickstart_recipe
from mathneuro_edit.runs.sweep import evaluator as sweep_mod
from mathneuro_edit.runs.sweep.cache import ResultCache
from mathneuro_edit.runs.sweep.procedure import SweepPoint, confirm, halving_schedule, select_candidate
from mathneuro_edit.runs.sweep.search import run_sweep

optuna = pytest.importorskip("optuna")

from mathneuro_edit.runs.sweep.optuna_search import (  # noqa: E402  (optuna: the search extra)
    STUDY_NAME,
    SearchSpace,
    band_edges,
    promoted,
    study_target,
)

# ----------------------------------------------------------------------------------------- the rules, by hand


def test_bands_cover_every_layer_once() -> None:
    for n in range(1, 40):
        for b in range(1, 6):
            edges = band_edges(n, b)
            covered = [layer for lo, hi in edges for layer in range(lo, hi + 1)]
            assert covered == list(range(n)) and len(edges) == min(b, n)
    assert band_edges(30, 3) == [(0, 9), (10, 19), (20, 29)]


def test_a_trial_goes_on_only_among_the_best_third_of_the_finished() -> None:
    assert promoted(-1.0, [0.5, 0.4], 3)  # fewer than eta finished: too few to rank
    others = [0.1, 0.05, -0.1, -0.2, -0.3]  # with the trial, 6 values: the best 2 go on
    assert promoted(0.2, others, 3) and promoted(0.05, others, 3)  # first; tied second
    assert not promoted(0.0, others, 3)  # third of six
    assert promoted(0.0, [0.0, 0.0, 0.0], 3)  # ties go on


def test_the_budget_grows_by_more_trials_and_is_kept() -> None:
    assert study_target(None, 40, 0) == 40
    assert study_target(40, 40, 10) == 50
    assert study_target(50, 40, 0) == 50  # the same command without --more-trials continues a killed extension
    assert study_target(50, 60, 0) == 60  # a larger sweep.trials raises it


def test_a_trial_s_parameters_are_the_recipe_s_two_maps() -> None:
    space = SearchSpace((0.01, 0.05), 0.0, 1.2, ((0, 1), (2, 3)), ("attention", "mlp"))
    params = {"top_k attention": 0.01, "top_k mlp": 0.05}
    params.update({f"scale layers {b} {c}": 1.1 for b in ("0-1", "2-3") for c in ("attention", "mlp")})
    top_k, scale = space.maps(params)
    assert top_k == {"default": 0.01, "mlp": 0.05}
    assert scale["default"] == 1.0 and scale["layers 2-3 mlp"] == 1.1 and len(scale) == 5


# ------------------------------------------------------------------------------- the rule under the null, simulated

BASE, DISC, ALPHA = 0.35, 0.10, 0.05
TRIALS, N_SEL, N_CONF, REPS = 150, 1000, 2000, 400


def flip(rng: np.random.Generator, base: np.ndarray, gain: float) -> np.ndarray:
    """Edited outcomes with about ``(DISC - gain) / 2`` right-to-wrong and ``(DISC + gain) / 2`` wrong-to-right."""
    b, c = (DISC - gain) / 2, (DISC + gain) / 2
    u = rng.random(base.shape)
    return np.where(base, u >= b / BASE, u < c / (1 - BASE))


def simulate_search(gain: float, seed: int) -> dict[str, float]:
    """REPS searches of TRIALS trials in the order a sampler draws them, every trial with the true ``gain``:
    each trial goes on at the cuts 40/120/360 only when :func:`promoted` says so among the finished trials, the
    candidate is :func:`select_candidate`'s among the trials that saw all N_SEL problems (some over the KL budget),
    and it is confirmed by :func:`confirm` on N_CONF fresh problems. Returns the confirmed and tested shares."""
    rng = np.random.default_rng(seed)
    cuts = [end for _, end in halving_schedule(1 << 30, N_SEL, 40, 3)]
    assert cuts == [40, 120, 360, 1000]
    confirmed = tested = 0
    for _ in range(REPS):
        base = rng.random(N_SEL) < BASE
        edited = flip(rng, np.broadcast_to(base, (TRIALS, N_SEL)), gain)
        gains = np.cumsum(edited, 1) - np.cumsum(base)  # (trials, problems): gain over the base so far
        kl = rng.random(TRIALS) * 0.08
        at_cut: dict[int, list[float]] = {c: [] for c in cuts[:-1]}
        finalists = []
        for t in range(TRIALS):
            values = []
            for c in cuts[:-1]:
                values.append(float(gains[t, c - 1]) / c)
                if not promoted(values[-1], at_cut[c], 3):
                    break
            else:
                finalists.append(t)
            for c, v in zip(cuts, values):  # the trial is finished: its values join the ranking
                at_cut[c].append(v)
        points = [SweepPoint(0.05, 1.1, 1, 0.0, 2.0, float(kl[t]), int(edited[t].sum()), N_SEL) for t in finalists]
        if select_candidate(points, int(base.sum()), 0.05) is None:
            continue
        tested += 1
        base_c = rng.random(N_CONF) < BASE
        confirmed += confirm(base_c.tolist(), flip(rng, base_c, gain).tolist(), ALPHA)[3]
    return {"confirmed": confirmed / REPS, "tested": tested / REPS}


def test_null_searches_over_the_larger_space_confirm_at_most_the_level() -> None:
    got = simulate_search(gain=0.0, seed=4)
    assert got["confirmed"] <= ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / REPS), got
    expected = got["tested"] * mcnemar_power(N_CONF, 0.0, DISC, ALPHA)  # the one test's false-gain rate
    assert abs(got["confirmed"] - expected) <= 3 * math.sqrt(max(expected, 1e-3) * (1 - expected) / REPS), got
    assert got["tested"] > 0.9  # among 150 null trials one nearly always gains by chance: the test is not vacuous


def test_a_true_gain_found_by_the_search_is_confirmed_at_the_power() -> None:
    power = mcnemar_power(N_CONF, 0.03, DISC, ALPHA)
    got = simulate_search(gain=0.03, seed=5)
    assert got["tested"] == 1.0
    assert abs(got["confirmed"] - power) <= 3 * math.sqrt(power * (1 - power) / REPS), (got, power)


# ------------------------------------------------------------------------------- the search on the organism

SETS = [
    "evaluation.math=arithmetic",
    "data.samples=6",
    "sweep.search=optuna",
    "sweep.trials=5",
    "sweep.selection_samples=90",
    "sweep.confirmation_samples=120",
    "sweep.general_samples=3",
    "sweep.first_round=10",
    "sweep.eta=2",
    "sweep.kl_budget=10",
    "sweep.top_k=[0.01,0.05]",
    "sweep.scale=[0.9,1.3]",
    "evaluation.max_new_tokens=4",
]


def _state(model) -> str:
    return hashlib.sha256(
        b"".join(p.detach().numpy().tobytes() for _, p in sorted(model.named_parameters()))
    ).hexdigest()


def _patch_outcomes(mp: pytest.MonkeyPatch) -> None:
    """Right or wrong by a hash of the model's current weights and the problem; edits right a little more often."""
    from mathneuro_edit.weights.loading import load_model

    base_state = _state(load_model("organism", dtype="float32")[0])

    def fake_outcomes(model, tok, problems, **kw):
        state = _state(model)
        level = 60 if state == base_state else 66
        out = [
            int(hashlib.sha256((state + p["question"]).encode()).hexdigest()[:8], 16) % 100 < level for p in problems
        ]
        return out, ["x"] * len(problems)

    mp.setattr(sweep_mod, "math_outcomes", fake_outcomes)


def _trials(folder: Path) -> list[tuple[str, dict, tuple]]:
    """Each finished trial's state, parameters and intermediate values, in trial order (failed ones left out)."""
    study = optuna.load_study(study_name=STUDY_NAME, storage=f"sqlite:///{folder / OPTUNA_STUDY}")
    done = [t for t in study.trials if t.state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)]
    return [(t.state.name, t.params, tuple(sorted(t.intermediate_values.items()))) for t in done]


@pytest.fixture(scope="module")
def searched(tmp_path_factory) -> Path:
    """One uninterrupted search of SETS (5 trials), run once for the module."""
    out = tmp_path_factory.mktemp("optuna") / "s"
    with pytest.MonkeyPatch.context() as mp:
        _patch_outcomes(mp)
        run_sweep(quickstart_recipe(SETS), out, progress=False)
    return out


@pytest.fixture()
def fake(monkeypatch):
    _patch_outcomes(monkeypatch)


def test_the_same_seed_gives_the_same_trials_and_another_seed_others(fake, searched, tmp_path) -> None:
    run_sweep(quickstart_recipe(SETS), tmp_path / "again", progress=False)
    assert _trials(tmp_path / "again") == _trials(searched)
    assert (tmp_path / "again" / "sweep.json").read_bytes() == (searched / "sweep.json").read_bytes()
    run_sweep(quickstart_recipe([*SETS, "sweep.search_seed=1"]), tmp_path / "other", progress=False)
    assert [p for _, p, _ in _trials(tmp_path / "other")] != [p for _, p, _ in _trials(searched)]


class Killed(BaseException):
    """Stands for a kill: raised after a number of cache writes, not caught by Optuna (the trial stays running)."""


def test_a_killed_search_resumes_from_its_study_to_the_uninterrupted_trials(
    fake, searched, monkeypatch, tmp_path
) -> None:
    real, count = ResultCache.put, {"n": 0}

    def put(self, key, result):
        real(self, key, result)
        count["n"] += 1
        if count["n"] >= 12:  # a few trials in
            raise Killed()

    monkeypatch.setattr(ResultCache, "put", put)
    with pytest.raises(Killed):
        run_sweep(quickstart_recipe(SETS), tmp_path / "s", progress=False)
    monkeypatch.setattr(ResultCache, "put", real)
    study = optuna.load_study(study_name=STUDY_NAME, storage=f"sqlite:///{tmp_path / 's' / OPTUNA_STUDY}")
    states = [t.state.name for t in study.trials]
    assert "RUNNING" in states and len(_trials(tmp_path / "s")) < 5  # killed inside a trial, before the end
    assert not (tmp_path / "s" / "sweep.json").exists()
    run_sweep(quickstart_recipe(SETS), tmp_path / "s", progress=False)
    assert _trials(tmp_path / "s") == _trials(searched)  # the cut trial is dropped and drawn again, the same
    resumed, straight = (json.loads((f / "sweep.json").read_text()) for f in (tmp_path / "s", searched))
    cut = states.index("RUNNING")  # the trial the kill cut: failed on resume, the next number drew it again
    assert resumed["search"].pop("trial_numbers") == [n for n in range(6) if n != cut]
    assert straight["search"].pop("trial_numbers") == [0, 1, 2, 3, 4]
    assert resumed == straight  # everything else, to the last digit
    with sqlite3.connect(tmp_path / "s" / OPTUNA_STUDY) as db:  # the study is the SQLite file: the cut trial failed
        rows = db.execute("select state from trials order by number").fetchall()
    assert [r[0] for r in rows].count("FAIL") == 1 and len(rows) == 6


def test_more_trials_extends_a_finished_search_to_the_trials_of_a_longer_one(fake, searched, tmp_path) -> None:
    short = [s.replace("sweep.trials=5", "sweep.trials=3") for s in SETS]
    run_sweep(quickstart_recipe(short), tmp_path / "s", progress=False)
    assert _trials(tmp_path / "s") == _trials(searched)[:3]
    run_sweep(quickstart_recipe(short), tmp_path / "s", progress=False, more_trials=2)
    assert _trials(tmp_path / "s") == _trials(searched)
    data = json.loads((tmp_path / "s" / "sweep.json").read_text())
    assert data["search"]["trials"] == 5 and len(data["selection"]["points"]) == 5
    run_sweep(quickstart_recipe(short), tmp_path / "s", progress=False)  # the recorded budget is kept
    assert len(_trials(tmp_path / "s")) == 5


def test_the_candidate_goes_through_the_grid_s_confirmation(searched) -> None:
    data = json.loads((searched / "sweep.json").read_text())
    points, c = data["selection"]["points"], data["confirmation"]
    assert data["search"]["method"] == "optuna" and data["search"]["seed"] == 0
    assert c is not None and c["n"] == 120
    chosen = points[data["candidate"]]
    assert chosen["round"] == 5 and isinstance(chosen["scale"], dict) and isinstance(chosen["top_k"], dict)
    assert c["scale"] == chosen["scale"] and c["top_k"] == chosen["top_k"]
    assert [k["name"] for k in c["controls"]] == ["general-specific", "random"]
    assert all(k["selected"] == chosen["selected"] for k in c["controls"])  # the controls have the same shape
    assert set(c["problems_sha256"]).isdisjoint(data["selection"]["problems_sha256"])
    assert [r["problems"] for r in data["rounds"]] == [[0, 10], [10, 20], [20, 40], [40, 80], [80, 90]]
    # poor trials stopped early (the pruner): no KL, never a candidate; the finished ones saw every problem
    pruned = [p for p in points if p["round"] < 5]
    assert len(pruned) == data["search"]["pruned"] >= 1
    assert all(p["general_kl"] is None and p["math_total"] < 90 for p in pruned)
    for name in OPTUNA_PNGS:
        assert (searched / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name


def test_what_the_search_does_not_take_is_one_line(tmp_path) -> None:
    with pytest.raises(InputError, match="--more-trials extends an Optuna search"):
        run_sweep(quickstart_recipe([s for s in SETS if s != "sweep.search=optuna"]), tmp_path / "a", more_trials=2)
    variants = [*SETS, "sweep.variants=[{name: mlp, set: ['targets.include=[mlp]']}]"]
    with pytest.raises(InputError, match="drop sweep.variants"):
        run_sweep(quickstart_recipe(variants), tmp_path / "b", progress=False)


# ----------------------------------------------------------------------------- releasing the search's choice

TOP_K = {"default": 0.05, "mlp": 0.01}
SCALE = {"default": 1.0, "layers 0-1 attention": 1.1, "layers 0-1 mlp": 1.05, "layers 2-3 attention": 1.2}


def _map_sweep(folder: Path, top_k=TOP_K, scale=SCALE) -> Path:
    """A confirmed sweep.json (tests/runs/_sweep_json.py) whose point and confirmation are an Optuna trial's maps."""
    from tests.runs._sweep_json import valid_sweep

    data = valid_sweep()
    for where in (data["selection"]["points"][0], data["confirmation"]):
        where.update(top_k=top_k, scale=scale)
    folder.mkdir()
    (folder / "sweep.json").write_text(json.dumps(data))
    return folder


def test_run_from_sweep_releases_the_confirmed_maps(tmp_path) -> None:
    from mathneuro_edit.runs.sweep.evidence import read_sweep, recipe_from_sweep, run_from_sweep
    from tests.runs._sweep_json import release_mask_sha256

    folder = _map_sweep(tmp_path / "sweep")
    recipe = recipe_from_sweep(quickstart_recipe(), read_sweep(folder))
    assert (recipe.mask.top_k, recipe.edit.scale, recipe.edit.prune) == (TOP_K, SCALE, False)
    data = json.loads((folder / "sweep.json").read_text())  # the confirmation tested the mask of those maps
    data["confirmation"]["mask_sha256"] = release_mask_sha256(recipe, top_k=recipe.mask.top_k)
    (folder / "sweep.json").write_text(json.dumps(data))
    run_from_sweep(quickstart_recipe(["evaluation.samples=4"]), folder, tmp_path / "release", progress=False)
    card = (tmp_path / "release" / "checkpoint" / "README.md").read_text()
    assert "| scale | default 1, layers 0-1 attention 1.1, layers 0-1 mlp 1.05, layers 2-3 attention 1.2 |" in card
    assert (
        "This setting (top_k default 0.05, mlp 0.01, scale default 1, layers 0-1 attention 1.1, layers 0-1 mlp "
        "1.05, layers 2-3 attention 1.2) was **chosen**"
    ) in " ".join(card.split())


def test_a_lock_s_sweep_setting_reads_as_the_card_shows_it() -> None:
    from mathneuro_edit.publish.card_sections import _setting

    assert _setting(0.05) == 0.05 and _setting(2.0) == 2.0  # a number: as every card before showed it
    assert _setting(TOP_K) == "default 0.05, mlp 0.01"
    assert _setting({"default": 1, "<b>": 2}) == "?"  # not a map's keys (an edited lock): nothing of it shown


@pytest.mark.parametrize(
    "top_k,scale,words",
    [
        ({"mlp": 0.01}, SCALE, "needs a default"),
        ({"default": 5}, SCALE, "must be a number in (0, 1]"),
        (TOP_K, {"default": 1.0, "layers 3-1": 1.1}, "ends before it starts"),
        (TOP_K, {"default": float("inf")}, "must be a finite number >= 0"),
    ],
)
def test_a_bad_map_in_a_shared_sweep_file_is_one_line(tmp_path, top_k, scale, words) -> None:
    from mathneuro_edit.runs.sweep.evidence import read_sweep

    folder = _map_sweep(tmp_path / "sweep", top_k, scale)
    with pytest.raises(InputError, match="the file was edited") as e:
        read_sweep(folder)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_trials_that_all_scored_the_same_still_get_their_plots(tmp_path) -> None:
    """fANOVA has nothing to attribute when every trial scored the same (it raises): that one plot is left out,
    the history is drawn (a SmolLM2 smoke search of 3 trials on 12 problems hit this)."""
    from mathneuro_edit.runs.sweep.optuna_search import _plots
    from mathneuro_edit.runs.sweep.result import SweepResult

    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=0))
    study.optimize(lambda t: 0.0 * t.suggest_float("scale", 1.0, 1.3), n_trials=4)
    written = _plots(tmp_path, SweepResult(0.5, 2.0, [], [], "", None), study)
    assert [p.name for p in written] == [OPTUNA_PNGS[0]]


def test_a_study_is_resumed_only_by_the_search_that_made_it(fake, searched, tmp_path) -> None:
    """A study keeps each trial's values as numbers, not by content: another seed, or other problems (here fewer
    selection problems), would mix two searches' trials; both are one line naming the study file."""
    import shutil

    folder = tmp_path / "s"
    shutil.copytree(searched, folder)
    with pytest.raises(InputError, match="its trials were drawn with seed 0, this recipe's is 1"):
        run_sweep(quickstart_recipe([*SETS, "sweep.search_seed=1"]), folder, progress=False)
    with pytest.raises(InputError, match="its trials were measured by another search"):
        run_sweep(quickstart_recipe([*SETS, "sweep.selection_samples=60"]), folder, progress=False)
    assert _trials(folder) == _trials(searched)  # nothing was added to it
