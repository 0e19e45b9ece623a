"""model-index's decisions, one by one, on hand-made inputs (issue 48 item 2; milliseconds, no run, no card):
how each source is named (a Hub dataset keeps its default split and revision, a built-in source its seed), which
values are results (lm-eval's ``*_stderr`` and non-numbers are not), which formats of a lock's sweep section count,
and every field of a confirmation's two results. ``scripts/mutation.sh model-index`` mutates
``publish/model_index.py`` against this file and ``test_model_index.py``."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest

from mathneuro_edit.publish.model_index import (
    SOURCE_URL,
    _arms,
    _count,
    _dataset,
    _verdict,
    confirmation_results,
    eval_results_metadata,
    prompt_format,
)
from mathneuro_edit.recipe.io import quickstart_recipe


def _fields(r: Any) -> dict[str, Any]:
    return {f.name: getattr(r, f.name) for f in dataclasses.fields(r) if getattr(r, f.name) is not None}


# --------------------------------------------------------------------------------------------- sources named


def test_a_hub_dataset_is_named_by_its_id_with_its_default_split_and_revision() -> None:
    src = {"path": "hf://datasets/openai/gsm8k", "config": "main", "split": "test", "revision": "abc"}
    assert _dataset(src, "math", 3) == {
        "dataset_type": "openai/gsm8k",
        "dataset_name": "openai/gsm8k",
        "dataset_config": "main",
        "dataset_split": "test",
        "dataset_revision": "abc",
    }
    assert _dataset({"path": "hf://datasets/openai/gsm8k"}, "math", None) == {
        "dataset_type": "openai/gsm8k",
        "dataset_name": "openai/gsm8k",
        "dataset_config": None,
        "dataset_split": "train",  # the Hub's default split, never dropped
        "dataset_revision": None,
    }


def test_a_built_in_source_is_named_by_its_generator_with_its_split_and_seed() -> None:
    assert _dataset({"path": "arithmetic", "split": "test"}, "math", 3) == {
        "dataset_type": "mathneuro-edit-arithmetic",
        "dataset_name": "mathneuro-edit built-in arithmetic (two-digit + and -, one-digit *)",
        "dataset_split": "test",
        "dataset_args": {"seed": 3},
        "source_name": "mathneuro-edit",
        "source_url": SOURCE_URL + "mathneuro_edit/data/arithmetic.py",
    }
    assert _dataset({"path": "organism:general"}, "general", None)["dataset_args"] is None
    assert _dataset({"path": "organism:general"}, "general", 0)["dataset_args"] == {"seed": 0}


def test_a_local_file_is_named_by_its_name_and_lm_eval_by_its_task() -> None:
    assert _dataset({"path": "<local>/data/my probs.jsonl"}, "math", 1) == {
        "dataset_type": "local-file",
        "dataset_name": "my probs.jsonl (a local file; its sha256 is in the lock)",
    }
    assert _dataset({"path": "<local>/sub.jsonl", "hub_dataset": "openai/gsm8k"}, "math", 1) == {
        "dataset_type": "openai/gsm8k",
        "dataset_name": "openai/gsm8k (sub.jsonl: a local subset; its sha256 is in the lock)",
    }
    assert _dataset({"path": "probs.jsonl"}, "math", 1)["dataset_name"] == (
        "probs.jsonl (a local file; its sha256 is in the lock)"
    )
    assert _dataset(None, "arc_easy", 1) == {"dataset_type": "arc_easy", "dataset_name": "arc_easy"}


# ---------------------------------------------------------------------------------------------- prompt formats


@pytest.mark.parametrize(
    ("prompt", "chat", "words"),
    [
        ({"n_shot": 2}, True, "2-shot, chat template"),  # chat_template absent: auto
        ({"n_shot": 2}, False, "2-shot, Question/Answer text"),
        ({"n_shot": 2, "chat_template": True}, False, "2-shot, chat template"),
        ({"n_shot": 2, "chat_template": False}, True, "2-shot, Question/Answer text"),
        ({"n_shot": 0, "chat_template": "auto", "prompt_style": "equations"}, False, "0-shot, equation lines"),
        ({"n_shot": True}, False, "?-shot, Question/Answer text"),
        ({"n_shot": -1}, False, "?-shot, Question/Answer text"),
        ({"n_shot": "2"}, False, "?-shot, Question/Answer text"),
        ("2-shot", True, "the recipe's prompt"),
    ],
)
def test_a_prompt_format_in_words(prompt: Any, chat: bool, words: str) -> None:
    assert prompt_format(prompt, chat) == words


def test_counts_and_verdicts_from_someone_else_s_lock() -> None:
    assert [_count(x) for x in (0, 3, -1, True, 2.0, "3", None)] == [0, 3, None, None, None, None, None]
    for v in ("math-boost", "format-effect", "not-specific", "no-gain"):
        assert _verdict(v) == v
    assert _verdict("MATH-BOOST") == "?" and _verdict("<b>") == "?" and _verdict("None") == "?"


# ------------------------------------------------------------------------------------ the formats that count


def _format(n: int, base: int, cand: int, verdict: str = "math-boost", primary: bool = True, **extra: Any) -> dict:
    arms = {"base": {"n": n, "correct": base}, "candidate": {"n": n, "correct": cand}}
    return {"arms": arms, "verdict": verdict, "primary": primary, **extra}


def test_every_well_formed_format_counts_the_recipe_s_own_first() -> None:
    second = _format(50, 5, 9, "not-specific", primary=False, prompt={"n_shot": 4})
    formats = [
        "not a mapping",
        {"arms": ["base", "candidate"]},
        {"arms": {"base": {"n": 50, "correct": 5}}},  # no candidate
        {"arms": {"candidate": {"n": 50, "correct": 5}}},  # no base
        second,
        _format(50, 50, 50, prompt="text, not a mapping"),  # all right: b == n and k == n are counts
        _format(50, 51, 5),  # more right than problems
        _format(50, 5, 51),
        {"arms": {"base": {"n": 50, "correct": 5}, "candidate": {"n": 49, "correct": 5}}},  # another n
        _format(0, 0, 0),
    ]
    assert _arms({"formats": formats}) == [(None, 50, 50, 50, "math-boost"), ({"n_shot": 4}, 50, 5, 9, "not-specific")]


def test_a_section_without_arms_gives_the_confirmation_s_counts_under_the_primary_format() -> None:
    c = {"n": 40, "base_correct": 40, "edited_correct": 40, "confirmed": True}
    formats = [{"primary": False, "prompt": {"n_shot": 9}}, {"primary": True, "prompt": {"n_shot": 1}}]
    assert _arms({"confirmation": c, "formats": formats}) == [({"n_shot": 1}, 40, 40, 40, "math-boost")]
    assert _arms({"confirmation": {**c, "confirmed": "true"}}) == [(None, 40, 40, 40, "no-gain")]
    assert _arms({"confirmation": {**c, "confirmed": False}}) == [(None, 40, 40, 40, "no-gain")]
    assert _arms({"confirmation": {**c, "base_correct": 41}}) == []
    assert _arms({"confirmation": {**c, "edited_correct": 41}}) == []
    assert _arms({"confirmation": {**c, "n": 0}}) == []
    assert _arms({"confirmation": "x"}) == [] and _arms({}) == []
    no_prompt = [{"primary": True, "prompt": "text"}]
    assert _arms({"confirmation": c, "formats": no_prompt}) == [(None, 40, 40, 40, "math-boost")]


# ------------------------------------------------------------------------------------ a confirmation's results


def test_a_confirmation_is_two_results_every_field_stated() -> None:
    sweep = {
        "problems": {"source": {"path": "hf://datasets/openai/gsm8k", "config": "main"}, "seed": 7},
        "formats": [_format(200, 50, 70, prompt={"n_shot": 0, "chat_template": "auto"})],
    }
    mine, base = (_fields(r) for r in confirmation_results(sweep))
    common = {
        "task_type": "text-generation",
        "task_name": "math (sweep confirmation: problems held out from choosing the setting)",
        "dataset_type": "openai/gsm8k",
        "dataset_name": "openai/gsm8k: sweep confirmation problems",
        "dataset_split": "train",
        "dataset_args": {"n": 200, "prompt": "0-shot, Question/Answer text"},  # chat defaults to False
        "source_url": SOURCE_URL + "docs/evaluation.md#select-then-confirm-sweep",
        "metric_type": "accuracy",
    }
    assert mine == {
        **common,
        "dataset_config": "main; 0-shot, Question/Answer text",
        "source_name": "mathneuro-edit sweep confirmation",
        "metric_value": 0.35,
        "metric_name": "math accuracy, this model",
        "metric_args": {"correct": 70, "n": 200, "verdict": "math-boost"},
    }
    assert base == {
        **common,
        "dataset_config": "main; 0-shot, Question/Answer text; base model",
        "source_name": "mathneuro-edit sweep confirmation: base model",
        "metric_value": 0.25,
        "metric_name": "math accuracy, base model (unedited) for comparison",
        "metric_args": {"correct": 50, "n": 200},
    }
    chat = _fields(confirmation_results(sweep, chat=True)[0])
    assert chat["dataset_args"]["prompt"] == "0-shot, chat template"


def test_a_confirmation_without_a_source_is_the_arithmetic_task_with_its_seed_when_it_is_one() -> None:
    sweep = {"problems": {"seed": 4}, "formats": [_format(3, 1, 2, "odd")]}
    mine = _fields(confirmation_results(sweep)[0])
    assert mine["dataset_type"] == "mathneuro-edit-arithmetic"
    assert mine["dataset_args"] == {"seed": 4, "n": 3, "prompt": "the recipe's prompt"}
    assert mine["dataset_config"] == "the recipe's prompt"
    assert mine["metric_args"] == {"correct": 2, "n": 3, "verdict": "?"}
    assert mine["metric_value"] == round(2 / 3, 6)
    for bad in (-1, True, "4"):
        sweep["problems"] = {"seed": bad, "source": "not a mapping"}
        assert _fields(confirmation_results(sweep)[0])["dataset_args"] == {"n": 3, "prompt": "the recipe's prompt"}


# ---------------------------------------------------------------------------------------- a run's own results


def test_a_run_s_own_results_every_value_a_result_once_and_nothing_else() -> None:
    recipe = quickstart_recipe(["evaluation.seed=5"])
    results = {  # entries that are no results first: the ones after them still count
        "skipped": "not a mapping",
        "no_values": {"edited": [0.5]},
        "math": {"edited": {"math_accuracy": 0.12345678, "n": 100}},
        "general": {"edited": {"general_loss": True, "general_kl": math.nan, "general_perplexity": 12.0}},
        "lm_eval": {
            "edited": {
                "arc/acc_stderr,none": 0.01,
                "arc/acc,none": "0.5",
                "arc/acc_norm,none": 0.25,
                "arc/flag": False,
                "arc/inf": math.inf,
            }
        },
    }
    found = [_fields(r) for r in eval_results_metadata(results, recipe)]
    assert found == [
        {
            "task_type": "text-generation",
            "dataset_type": "mathneuro-edit-organism-math",
            "dataset_name": "mathneuro-edit organism: synthetic GSM8K-style problems",
            "dataset_split": "test",
            "dataset_args": {"seed": 5},
            "source_name": "mathneuro-edit",
            "source_url": SOURCE_URL + "mathneuro_edit/organism/data.py",
            "metric_type": "accuracy",
            "metric_value": 0.123457,
            "metric_name": "math accuracy",
        },
        {
            "task_type": "text-generation",
            "dataset_type": "mathneuro-edit-organism-general",
            "dataset_name": "mathneuro-edit organism: synthetic general text",
            "dataset_split": "test",
            "dataset_args": {"seed": 5},
            "source_name": "mathneuro-edit",
            "source_url": SOURCE_URL + "mathneuro_edit/organism/data.py",
            "metric_type": "perplexity",
            "metric_value": 12.0,
            "metric_name": "general perplexity",
        },
        {
            "task_type": "text-generation",
            "dataset_type": "lm_eval",
            "dataset_name": "lm_eval",
            "metric_type": "arc/acc_norm,none",
            "metric_value": 0.25,
            "metric_name": "lm_eval arc/acc_norm,none",
        },
    ]


def test_a_release_from_a_sweep_lists_its_confirmation_then_the_run_s_other_results() -> None:
    recipe = quickstart_recipe([])
    sweep = {"formats": [_format(10, 2, 4)]}
    results = {"math": {"edited": {"math_accuracy": 0.9, "general_loss": 2.5}}}
    found = eval_results_metadata(results, recipe, sweep)
    assert [(r.metric_name, r.metric_value) for r in found] == [
        ("math accuracy, this model", 0.4),
        ("math accuracy, base model (unedited) for comparison", 0.2),
        ("general next-token loss", 2.5),  # after the skipped math accuracy, the task's next value still counts
    ]
    assert eval_results_metadata(None, recipe, sweep) == confirmation_results(sweep)
    assert eval_results_metadata(results, quickstart_recipe(["evaluation=null"]), sweep) == confirmation_results(sweep)
    chat = {"formats": [_format(10, 2, 4, prompt={"n_shot": 1})]}
    assert eval_results_metadata(None, recipe, chat, chat=True)[0].dataset_args["prompt"] == "1-shot, chat template"
    assert eval_results_metadata(None, recipe, chat)[0].dataset_args["prompt"] == "1-shot, Question/Answer text"
