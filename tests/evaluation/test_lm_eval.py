"""The lm-evaluation-harness bridge with the REAL harness (the `eval` extra, installed by CI), offline.

The central check: on the shipped organism, base and edited, lm-eval's exact match on the shipped local task
``arithmetic_local`` agrees item by item with the built-in evaluation (mathneuro_edit.evaluation.runner) on the same
problems. Why they agree by construction, and where they could still differ:

- prompts: the YAML's ``doc_to_text`` ("Question: {q}\\nAnswer:"), ``target_delimiter`` " " and
  ``fewshot_delimiter`` "\\n\\n" rebuild :func:`math_prompt` exactly (asserted below, also few-shot and for GSM8K);
  both tokenizers add the organism's ``<s>`` (HFLM leaves ``add_special_tokens`` at the tokenizer's default);
- generation: both greedy, left-padded batches, the same token budget (64), both stop at EOS; the built-in one
  stops early once the answer is complete and lm-eval runs on to "\\nQuestion:", but a greedy continuation never
  changes the tokens already generated, so the text up to the first "#### N" is the same;
- extraction: the built-in reads the first "#### N" (commas dropped, "42." and "42.00" -> 42, other decimals ->
  no answer); the YAML's strict-match regex takes the same first number and exact_match's regexes_to_ignore drop
  the commas and a trailing "." / ".00". Cases that would still differ (none occur in these 30 items, the
  per-item assertion would show them): a leading zero ("#### 07": built-in 7, lm-eval "07") and "-0".
"""

from __future__ import annotations

import hashlib
import json
import shutil
import warnings
from pathlib import Path

import pytest
import torch
import yaml

lm_eval = pytest.importorskip("lm_eval", reason="the eval extra (pip install -e .[test]) installs lm-eval")

from mathneuro_edit import calibrate, find_math_params  # noqa: E402
from mathneuro_edit.engine.apply import ReversibleEdit  # noqa: E402
from mathneuro_edit.errors import InputError  # noqa: E402
from mathneuro_edit.evaluation.lm_eval_bridge import run_lm_eval  # noqa: E402
from mathneuro_edit.evaluation.lm_eval_index import task_specs  # noqa: E402
from mathneuro_edit.evaluation.lm_eval_task import LmEvalTask, include_path_hashes  # noqa: E402
from mathneuro_edit.evaluation.results import extract_answer, math_prompt  # noqa: E402
from mathneuro_edit.evaluation.runner import evaluate  # noqa: E402
from mathneuro_edit.evaluation.tasks import MathTask  # noqa: E402
from mathneuro_edit.organism import load_organism  # noqa: E402
from mathneuro_edit.organism.data import general_texts, math_texts  # noqa: E402
from mathneuro_edit.recipe.io import quickstart_recipe, recipe_from_dict  # noqa: E402

TASKS = Path(__file__).resolve().parents[2] / "recipes" / "lm_eval_tasks"
N = 30  # items compared: base + edited, built-in + harness, ~1 min of CPU on 2 cores


def _jsonl(name: str) -> list[dict[str, str]]:
    return [json.loads(line) for line in (TASKS / name).read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def organism_and_edit():
    torch.manual_seed(0)
    model, tok = load_organism()
    math = calibrate(model, tok, math_texts(32, seed=1), max_length=128, batch_size=16, progress=False)
    general = calibrate(model, tok, general_texts(32, seed=1), max_length=128, batch_size=16, progress=False)
    # Why 0.005 and pruning: it removes part of the math skill, not all of it, so the edited model gets some items
    # right and some wrong (agreement on a mix, not on all-correct or all-wrong)
    mask = find_math_params(model, math, general, top_k=0.005, progress=False)
    return model, tok, ReversibleEdit(model, mask, 0.0)


def test_include_path_hashes_every_file_by_relative_name(tmp_path: Path) -> None:
    folder = tmp_path / "tasks"
    shutil.copytree(TASKS, folder)
    (folder / "sub").mkdir()
    (folder / "sub" / "extra.yaml").write_text("task: extra\n")
    (folder / "__pycache__").mkdir()
    (folder / "__pycache__" / "utils.cpython-311.pyc").write_bytes(b"\0cache")
    expected = {
        p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in folder.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    got = include_path_hashes(folder)
    assert got == expected and list(got) == sorted(expected) and "sub/extra.yaml" in got
    assert "arithmetic_test_100.jsonl" in got and "LICENSE.gsm8k" in got
    before = LmEvalTask("h", ["arithmetic_local"], include_path=str(folder)).sha256
    (folder / "arithmetic_test_100.jsonl").write_text('{"question": "1 + 1?", "answer": "#### 2"}\n')
    assert include_path_hashes(folder)["arithmetic_test_100.jsonl"] != got["arithmetic_test_100.jsonl"]
    assert LmEvalTask("h", ["arithmetic_local"], include_path=str(folder)).sha256 != before  # no stale base reuse
    with pytest.raises(InputError, match="not a folder"):
        include_path_hashes(tmp_path / "missing")


@pytest.mark.parametrize(
    "task_name, test_file, train_file",
    [
        ("arithmetic_local", "arithmetic_test_100.jsonl", "arithmetic_train_8.jsonl"),
        ("gsm8k_local", "gsm8k_test_50.jsonl", "gsm8k_train_8.jsonl"),
    ],
)
@pytest.mark.parametrize("shots", [0, 3])
def test_harness_prompts_are_the_builtin_prompts(task_name, test_file, train_file, shots, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # data_files are relative to the YAML, not to the working directory
    from lm_eval.tasks import TaskManager

    spec = LmEvalTask("h", [task_name], include_path=str(TASKS))
    manager = TaskManager(include_path=str(TASKS), include_defaults=False)
    task = manager.load(task_specs(spec, manager))["tasks"][task_name]
    task.set_config(key="num_fewshot", value=shots)
    task.build_all_requests(limit=5, rank=0, world_size=1)
    docs, pool = _jsonl(test_file)[:5], _jsonl(train_file)[:shots]  # sampler first_n: the pool's first `shots`
    contexts = {inst.doc_id: inst.args[0] for inst in task.instances}
    assert [contexts[i] for i in range(5)] == [math_prompt(d["question"], pool) for d in docs]
    assert all(inst.args[1]["do_sample"] is False for inst in task.instances)


def test_harness_exact_match_agrees_with_builtin_on_the_organism(organism_and_edit, tmp_path, monkeypatch) -> None:
    model, tok, edit = organism_and_edit
    monkeypatch.chdir(tmp_path)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    items = _jsonl("arithmetic_test_100.jsonl")[:N]  # lm-eval's limit=N: the test split's first N documents
    harness = LmEvalTask("harness", ["arithmetic_local"], limit=N, include_path=str(TASKS))
    res = evaluate(
        model, tok, [MathTask("builtin", items, max_new_tokens=64), harness], edit=edit, batch_size=16, progress=False
    )
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k  # base weights restored after both edited runs
    counts = {}
    for side in ("base", "edited"):
        builtin, lm = getattr(res, side)["builtin"], getattr(res, side)["harness"]
        strict = [s for s in lm.samples["arithmetic_local"] if s["filter"] == "strict-match"]
        assert sorted(s["doc_id"] for s in strict) == list(range(N))
        for s in sorted(strict, key=lambda s: s["doc_id"]):
            pred = builtin.predictions[s["doc_id"]]
            assert s["doc"]["question"] == pred.question and s["arguments"][0][0] == math_prompt(pred.question)
            got = s["filtered_resps"][0]
            assert extract_answer(f"#### {got}") == pred.extracted or (got == "[invalid]" and pred.extracted is None), (
                side,
                s["doc_id"],
                got,
                pred.completion,
            )
            assert bool(s["exact_match"]) == pred.correct, (side, s["doc_id"], got, pred.gold)
        m = lm.metrics()
        assert m["arithmetic_local/n"] == N == builtin.total
        assert round(m["arithmetic_local/exact_match,strict-match"] * N) == builtin.correct
        counts[side] = builtin.correct
    assert counts["base"] == N and 0 < counts["edited"] < N, counts  # a mix: agreement on both outcomes
    # a cached base is reused as is (a sweep: base once, many edits); without an edit nothing runs at all
    again = evaluate(model, tok, [harness], base_results=res, progress=False)
    assert again.base["harness"] is res.base["harness"] and not again.edited


def test_bad_task_folders_and_settings_fail_clearly(organism_and_edit, tmp_path: Path) -> None:
    model, tok, _ = organism_and_edit
    folder = tmp_path / "tasks"
    shutil.copytree(TASKS, folder)
    (folder / "arithmetic_test_100.jsonl").unlink()
    with pytest.raises(
        InputError, match=r"arithmetic_local.yaml: data file .*arithmetic_test_100.jsonl does not exist"
    ):
        run_lm_eval(model, tok, LmEvalTask("h", ["arithmetic_local"], include_path=str(folder)))
    with pytest.raises(InputError, match="no chat template"):
        run_lm_eval(
            model, tok, LmEvalTask("h", ["arithmetic_local"], include_path=str(TASKS), apply_chat_template=True)
        )
    with pytest.raises(InputError, match="fewshot_as_multiturn needs apply_chat_template"):
        LmEvalTask("h", ["arithmetic_local"], fewshot_as_multiturn=True)
    with pytest.raises(InputError, match="not a folder"):
        LmEvalTask("h", ["arithmetic_local"], include_path=str(tmp_path / "nope"))


def test_every_lm_eval_key_of_a_recipe_reaches_the_harness_task() -> None:
    """Each ``evaluation.lm_eval`` key, set to a value other than its default, reaches the task ``run`` and ``eval``
    evaluate with, as given (the recipe's keys are the task's arguments).

    Mutation: one key left out on the way (runs/steps/evaluate.py: ``model_dump(exclude={"num_fewshot"})``)."""
    from mathneuro_edit.runs.steps.evaluate import eval_tasks

    d = quickstart_recipe().resolved_dict()
    keys = {
        "tasks": ["arithmetic_local", "gsm8k_cot"],
        "include_path": str(TASKS),
        "limit": 0.5,
        "num_fewshot": 3,
        "apply_chat_template": True,
        "fewshot_as_multiturn": True,
        "batch_size": 7,
    }
    default = LmEvalTask("lm_eval")
    assert all(getattr(default, k) != (tuple(v) if k == "tasks" else v) for k, v in keys.items())  # none a default
    harness = eval_tasks(recipe_from_dict({**d, "evaluation": {**d["evaluation"], "lm_eval": keys}}))[0]
    assert harness == LmEvalTask("lm_eval", **{**keys, "tasks": tuple(keys["tasks"])})


def test_recipe_lm_eval_keys_and_the_deprecated_flat_keys(tmp_path: Path) -> None:
    d = quickstart_recipe().resolved_dict()
    ev = {
        **d["evaluation"],
        "lm_eval": {
            "tasks": ["arithmetic_local"],
            "include_path": str(TASKS),
            "limit": 10,
            "num_fewshot": 2,
            "apply_chat_template": True,
        },
    }
    r = recipe_from_dict({**d, "evaluation": ev})
    lm = r.evaluation.lm_eval
    assert (lm.tasks, lm.limit, lm.num_fewshot, lm.apply_chat_template, lm.fewshot_as_multiturn, lm.batch_size) == (
        ["arithmetic_local"],
        10,
        2,
        True,
        None,
        None,
    )
    assert r.public_dict()["evaluation"]["lm_eval"]["include_path"] == "<local>/lm_eval_tasks"
    # the deprecated flat keys with values: still work, moved to evaluation.lm_eval, with a warning naming the new keys
    old = {k: v for k, v in d["evaluation"].items() if k != "lm_eval"}
    with pytest.warns(FutureWarning, match=r"evaluation\.lm_eval\.tasks"):
        moved = recipe_from_dict({**d, "evaluation": {**old, "lm_eval_tasks": ["gsm8k_cot"], "lm_eval_limit": 5}})
    assert (moved.evaluation.lm_eval.tasks, moved.evaluation.lm_eval.limit) == (["gsm8k_cot"], 5)
    # deprecated flat keys at their defaults (every lock written before evaluation.lm_eval holds them): dropped silently
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        legacy = recipe_from_dict({**d, "evaluation": {**old, "lm_eval_tasks": [], "lm_eval_limit": None}})
    assert legacy == quickstart_recipe()
    with pytest.raises(InputError, match="set only evaluation.lm_eval"):
        recipe_from_dict({**d, "evaluation": {**ev, "lm_eval_tasks": ["gsm8k_cot"]}})
    with pytest.raises(InputError, match="fraction in"):
        recipe_from_dict({**d, "evaluation": {**ev, "lm_eval": {"tasks": ["a"], "limit": 1.5}}})


def test_run_writes_harness_results_to_eval_json_card_and_lock(tmp_path: Path, monkeypatch) -> None:
    from mathneuro_edit.publish.lock import read_lock
    from mathneuro_edit.runs.pipeline import run_recipe

    monkeypatch.chdir(tmp_path)
    shutil.copytree(TASKS, tmp_path / "lm_eval_tasks")  # a relative include_path, as a user writes it
    d = quickstart_recipe().resolved_dict()
    d["data"]["samples"], d["outputs"]["adapter"] = 16, False
    d["evaluation"] = {
        **d["evaluation"],
        "samples": 4,
        "max_new_tokens": 32,
        "lm_eval": {"tasks": ["arithmetic_local"], "include_path": "lm_eval_tasks", "limit": 6},
    }
    run_recipe(recipe_from_dict(d), tmp_path / "out", progress=False)
    folder = tmp_path / "out" / "checkpoint"
    harness = json.loads((folder / "eval.json").read_text())["lm_eval"]
    for side in ("base", "edited"):
        assert harness[side]["arithmetic_local/n"] == 6
        assert 0 <= harness[side]["arithmetic_local/exact_match,strict-match"] <= 1
    card = (folder / "README.md").read_text()
    assert "| `lm_eval: arithmetic_local` | `exact_match,strict-match` (n=6) |" in card
    lock = read_lock(tmp_path / "out")
    assert lock["lm_eval"]["include_path_sha256"] == include_path_hashes(tmp_path / "lm_eval_tasks")
    assert lock["recipe"]["evaluation"]["lm_eval"]["include_path"] == "<local>/lm_eval_tasks"
    for text in (card, yaml.safe_dump(lock)):
        assert str(tmp_path) not in text


def test_run_fails_on_a_bad_task_folder_before_calibrating(tmp_path: Path, monkeypatch) -> None:
    import mathneuro_edit.runs.pipeline as pipeline

    def no_calibration(*args, **kwargs):  # noqa: ANN002, ANN003
        raise AssertionError("calibrated before the evaluation settings were checked")

    monkeypatch.setattr(pipeline, "calibrate_step", no_calibration)
    d = quickstart_recipe().resolved_dict()
    d["evaluation"] = {
        **d["evaluation"],
        "lm_eval": {"tasks": ["arithmetic_local"], "include_path": str(tmp_path / "missing")},
    }
    with pytest.raises(InputError, match="evaluation.lm_eval.include_path: .* is not a folder"):
        pipeline.run_recipe(recipe_from_dict(d), tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()


def test_a_missing_task_is_named_before_the_model_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cause (not in include_path, with the tasks that are there) and the listing command of lm-eval 0.4.13+,
    from `run` and `eval`, before any model is loaded."""
    from click.testing import CliRunner

    import mathneuro_edit.runs.steps.mask as step_mask
    from mathneuro_edit.cli.main import main
    from mathneuro_edit.evaluation.lm_eval_index import missing_task_message

    loaded = []
    monkeypatch.setattr(step_mask, "load_recipe_model", lambda *a, **k: loaded.append(1))
    lm = f"evaluation.lm_eval={{tasks: [no_such_task], include_path: '{TASKS}', limit: 2}}"
    for cmd in (["run", "--out", str(tmp_path / "o")], ["eval"]):
        result = CliRunner().invoke(main, [*cmd, "-q", "--set", lm])
        assert result.exit_code == 2, result.output
        line = result.output.strip()
        assert "\n" not in line and "no lm-eval task or group named 'no_such_task'" in line
        assert f"not in include_path {TASKS} (tasks there: arithmetic_local" in line
        assert f"`lm-eval ls tasks --include_path {TASKS}`" in line and "--tasks list" not in line
    assert loaded == [] and not (tmp_path / "o").exists()
    no_path = missing_task_message(LmEvalTask("h", ["x"]), "x", [])
    assert "include_path is not set" in no_path and no_path.endswith("list the tasks with `lm-eval ls tasks`")


def test_the_lm_eval_path_is_quiet(tmp_path: Path) -> None:
    """A run with an lm-eval task prints only its stage lines: no lm-eval log lines or bars, no datasets bars, no
    generate warning (the HFLM asks for max_new_tokens, not max_length), and, from a folder that is not a git
    checkout, no "fatal: not a git repository" (git's own, twice: lm-eval's git_hash)."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHONWARNINGS", "HF_HUB_DISABLE_PROGRESS"))}
    env.update(GIT_CEILING_DIRECTORIES=str(tmp_path), PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    lm = f"evaluation.lm_eval={{tasks: [arithmetic_local], include_path: '{TASKS}', limit: 2}}"
    sets = ["data.samples=4", "evaluation.samples=2", "evaluation.max_new_tokens=4", "outputs.adapter=false", lm]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mathneuro_edit.cli",
            "run",
            "--out",
            str(tmp_path / "o"),
            *[a for s in sets for a in ("--set", s)],
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    noise = [line for line in proc.stderr.splitlines() if not line.startswith(("[", "    "))]
    assert noise == [], noise
    assert "max_new_tokens" not in proc.stderr and "generate_until" not in proc.stderr


def test_run_writes_lm_eval_s_own_results_files_and_the_card_shows_stderr(tmp_path: Path, monkeypatch) -> None:
    """Beside every eval.json: lm-eval's own results document for the base and for the edited model (the format
    `lm_eval --output_path` writes: results with each metric's stderr, configs, versions, n-shot, n-samples),
    without the machine's or the time's keys and without a local path; verify and push accept the folder; the
    card's lm-eval rows show value ± stderr."""
    from click.testing import CliRunner

    from mathneuro_edit.cli.main import main
    from mathneuro_edit.layout import LM_EVAL_RESULTS
    from mathneuro_edit.runs.pipeline import run_recipe

    monkeypatch.chdir(tmp_path)
    shutil.copytree(TASKS, tmp_path / "lm_eval_tasks")
    d = quickstart_recipe().resolved_dict()
    d["data"]["samples"] = 16
    d["evaluation"] = {
        **d["evaluation"],
        "samples": 4,
        "max_new_tokens": 32,
        "lm_eval": {"tasks": ["arithmetic_local"], "include_path": "lm_eval_tasks", "limit": 6},
    }
    run_recipe(recipe_from_dict(d), tmp_path / "out", progress=False)
    out = tmp_path / "out"
    flat = json.loads((out / "eval.json").read_text())["lm_eval"]
    for name, side in zip(LM_EVAL_RESULTS, ("base", "edited")):
        text = (out / name).read_text()
        assert str(tmp_path) not in text
        doc = json.loads(text)
        assert {"results", "configs", "versions", "n-shot", "n-samples", "higher_is_better", "config"} <= set(doc)
        assert not {"date", "pretty_env_info", "git_hash", "start_time"} & set(doc)
        res = doc["results"]["arithmetic_local"]
        assert res["exact_match,strict-match"] == flat[side]["arithmetic_local/exact_match,strict-match"]
        assert isinstance(res["exact_match_stderr,strict-match"], float)
        assert doc["n-samples"]["arithmetic_local"]["effective"] == 6 and doc["n-shot"]["arithmetic_local"] == 0
        files = doc["configs"]["arithmetic_local"]["dataset_kwargs"]["data_files"]
        assert files["test"] == "<local>/lm_eval_tasks/arithmetic_test_100.jsonl"
        for sub in ("checkpoint", "adapter"):  # beside each output's eval.json too, the same bytes
            assert (out / sub / name).read_text() == text
    card = (out / "checkpoint" / "README.md").read_text()
    (row,) = [
        ln for ln in card.splitlines() if ln.startswith("| `lm_eval: arithmetic_local` | `exact_match,strict-match`")
    ]
    base_se = flat["base"]["arithmetic_local/exact_match_stderr,strict-match"]
    assert f"{flat['base']['arithmetic_local/exact_match,strict-match']:.4g} ± {base_se:.4g}" in row, row
    result = CliRunner().invoke(main, ["verify", str(out), "-q"])  # files written after the lock: not outputs
    assert result.exit_code == 0, result.output
