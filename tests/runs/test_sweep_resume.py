"""The sweep continues where it stopped: a kill at any block, then the same command, gives the same sweep.json as an
uninterrupted run; its cache is trusted only when every entry matches its key; the adaptive rounds are recorded.

Math outcomes are a fixed function of (edit, problem) here (the model's generation is tested in
tests/evaluation/test_greedy.py): what is tested is the orchestration, on the shipped organism's real
calibration, masks and general texts.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from mathneuro_edit.errors import InputError
from mathneuro_edit.recipe.io import quickstart_recipe
from mathneuro_edit.runs.sweep import evaluator as sweep_mod  # where the sweep generates
from mathneuro_edit.runs.sweep.cache import ResultCache
from mathneuro_edit.runs.sweep.search import run_sweep

SETS = [
    "evaluation.math=arithmetic",
    "data.samples=6",
    "sweep.selection_samples=150",
    "sweep.confirmation_samples=200",
    "sweep.general_samples=3",
    "sweep.first_round=20",
    "sweep.eta=3",
    "sweep.kl_budget=10",
    "sweep.top_k=[0.01,0.05]",
    "sweep.scale=[0,1.1,1.3]",
    "sweep.variants=[{name: mlp, set: ['targets.include=[mlp]']}]",
    "evaluation.max_new_tokens=4",
]


def _state(model) -> str:
    return hashlib.sha256(
        b"".join(p.detach().numpy().tobytes() for _, p in sorted(model.named_parameters()))
    ).hexdigest()


def _patch_outcomes(mp: pytest.MonkeyPatch) -> None:
    """Right or wrong by a hash of the model's current weights and the problem: an edit changes some answers,
    deterministically; edits are right a little more often than the base (60% vs 66%), so a candidate is tested."""
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


@pytest.fixture()
def fake(monkeypatch):
    _patch_outcomes(monkeypatch)


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """One complete sweep of SETS, run once for the module; tests that tamper with it work on a copy."""
    out = tmp_path_factory.mktemp("finished") / "s"
    with pytest.MonkeyPatch.context() as mp:
        _patch_outcomes(mp)
        run_sweep(quickstart_recipe(SETS), out, progress=False)
    return out


def copy_of(finished: Path, tmp_path: Path) -> Path:
    shutil.copytree(finished, tmp_path / "s")
    return tmp_path / "s"


class Killed(BaseException):
    """Stands for Ctrl-C / SIGTERM: raised after a number of cache writes."""


def killing_put(monkeypatch, after: int):
    real = ResultCache.put
    count = {"n": 0}

    def put(self, key, result):
        real(self, key, result)
        count["n"] += 1
        if count["n"] >= after:
            raise Killed()

    monkeypatch.setattr(ResultCache, "put", put)
    return real


def test_a_sweep_killed_twice_and_resumed_writes_the_uninterrupted_sweep_json(fake, finished, monkeypatch, tmp_path):
    recipe = quickstart_recipe(SETS)
    straight = json.loads((finished / "sweep.json").read_text())  # the uninterrupted run
    assert straight["rounds"] and len(straight["rounds"]) == 3  # 12 points on 20, 4 on 60, 2 on 150
    assert [r["problems"] for r in straight["rounds"]] == [[0, 20], [20, 60], [60, 150]]
    assert [len(r["points"]) for r in straight["rounds"]] == [12, 4, 2]
    for after in (5, 9):  # two kills at different places
        real = killing_put(monkeypatch, after)
        with pytest.raises(Killed):
            run_sweep(recipe, tmp_path / "resumed", progress=False)
        monkeypatch.setattr(ResultCache, "put", real)
        assert not (tmp_path / "resumed" / "sweep.json").exists()  # written only when complete
    resumed = run_sweep(recipe, tmp_path / "resumed", progress=False)
    a = (finished / "sweep.json").read_bytes()
    b = (tmp_path / "resumed" / "sweep.json").read_bytes()
    assert a == b
    assert resumed.confirmation is not None  # the confirmation path ran (a candidate gained on the selection)
    # every round's points are the best of the previous round's by count (ties: the smaller edit, then grid order)
    data = json.loads(a)
    pts = data["selection"]["points"]
    assert all(p["round"] >= 1 for p in pts) and max(p["round"] for p in pts) == 3
    assert data["variants"] == [{"name": "", "set": []}, {"name": "mlp", "set": ["targets.include=[mlp]"]}]
    # a KL is computed only where the promotion or the candidate needed it: every point of a later round has one,
    # and a point ranked out of round 1 by its count alone has none (and is on no Pareto front)
    later = {i for r in data["rounds"][1:] for i in r["points"]}
    assert all(pts[i]["general_kl"] is not None for i in later)
    without = [i for i, p in enumerate(pts) if p["general_kl"] is None]
    assert without and not set(without) & later and not set(without) & set(data["pareto_front"])


def test_a_resumed_sweep_reuses_every_block(fake, finished, tmp_path):
    recipe = quickstart_recipe(SETS)
    folder = copy_of(finished, tmp_path)
    lines: list[str] = []
    run_sweep(recipe, folder, progress=False, echo=lines.append)
    text = "\n".join(lines)
    assert "0 computed" in text and "reused (6 texts)" in text


def test_a_tampered_cache_entry_is_refused(fake, finished, tmp_path):
    recipe = quickstart_recipe(SETS)
    copy_of(finished, tmp_path)
    entry = next(
        p
        for p in sorted((tmp_path / "s" / "cache").glob("*.json"))
        if json.loads(p.read_text())["key"]["what"] == "math"
    )
    body = json.loads(entry.read_text())
    body["result"]["correct"][0] = not body["result"]["correct"][0]  # flip one outcome
    entry.write_text(json.dumps(body))
    with pytest.raises(InputError, match="does not match its key"):
        run_sweep(recipe, tmp_path / "s", progress=False)
    # also when the result hash is forged to match: the entry then sits under another key's name
    body["result_sha256"] = hashlib.sha256(
        json.dumps(body["result"], sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()
    body["key"]["problems"] = body["key"]["problems"][::-1]
    entry.write_text(json.dumps(body))
    with pytest.raises(InputError, match="does not match its key"):
        run_sweep(recipe, tmp_path / "s", progress=False)


def test_tampered_statistics_are_refused(fake, finished, tmp_path):
    recipe = quickstart_recipe(SETS)
    copy_of(finished, tmp_path)
    stats = sorted((tmp_path / "s" / "stats").glob("*.stats.safetensors"))[0]
    raw = bytearray(stats.read_bytes())
    raw[-1] ^= 1
    stats.write_bytes(bytes(raw))
    with pytest.raises(InputError, match="does not match"):
        run_sweep(recipe, tmp_path / "s", progress=False)


def test_the_cli_refuses_a_tampered_cache_in_one_line(fake, finished, tmp_path):
    from click.testing import CliRunner

    from mathneuro_edit.cli.main import main

    copy_of(finished, tmp_path)
    entry = sorted((tmp_path / "s" / "cache").glob("*.json"))[0]
    entry.write_text(entry.read_text()[:-20])  # truncated
    args = ["sweep", "--out", str(tmp_path / "s"), "-q"] + [x for s in SETS for x in ("--set", s)]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and "does not match its key" in lines[0]


def test_a_folder_that_is_not_a_sweep_is_not_written_into(fake, tmp_path):
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "notes.txt").write_text("mine")
    with pytest.raises(InputError, match="not a sweep folder"):
        run_sweep(quickstart_recipe(SETS), tmp_path / "s", progress=False)
    assert (tmp_path / "s" / "notes.txt").read_text() == "mine"
