"""The Hub's number is the confirmed number (issue 46 items 3 and 4), and model-index decisions at unit speed
(issue 48): what a card's ``model-index`` lists, as ``huggingface_hub.ModelCard.load`` reads it back.

- A release from a sweep lists the confirmation's results (this model's and the base's, as two results, with n,
  the prompt format and the problems' source), never its own evaluation's math accuracy (problems the setting was
  chosen on); its card's table never calls that evaluation "significant".
- The card's headline names the prompt format and the operations the gain is in; its snippet loads in the dtype
  the figures were computed in and prompts as they were measured.
- lm-eval's ``*_stderr`` values are no results; a Hub dataset's default split is kept.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jinja2
from huggingface_hub import ModelCard, ModelCardData

from mathneuro_edit.evaluation.report import NOT_A_TEST
from mathneuro_edit.outputs.common import snippet_prompt
from mathneuro_edit.publish.card import TEMPLATE, CardSource, build_card, summarize_edit, write_card
from mathneuro_edit.publish.card_sections import figures_prompt, gain_operations
from mathneuro_edit.publish.card_weights import compute_dtype, load_dtype
from mathneuro_edit.publish.lock import build_lock
from mathneuro_edit.publish.model_index import confirmation_results, eval_results_metadata, prompt_format
from mathneuro_edit.recipe.io import quickstart_recipe
from mathneuro_edit.runs.steps.seal import without_problem_lists
from mathneuro_edit.runs.sweep.evidence import read_sweep

SMOLLM2_SWEEP = Path(__file__).resolve().parents[2] / "docs" / "data" / "search-smollm2" / "sweep.json"
ARITHMETIC = {"path": "arithmetic", "split": None}


def _arm(n: int, correct: int, plus: tuple[int, int] | None = None, minus: tuple[int, int] | None = None) -> dict:
    ops = {op: {"n": v[0], "correct": v[1]} for op, v in (("+", plus), ("-", minus)) if v is not None}
    return {"n": n, "correct": correct, "by_operation": ops}


def _sweep(**kw: Any) -> dict[str, Any]:
    """A lock's ``sweep`` section: 178 -> 203 of 1,200 under the recipe's 0-shot chat prompt (the gain in
    addition), 177 -> 186 of 800 under a 4-shot one (not confirmed)."""
    return {
        "confirmation": {"n": 1200, "base_correct": 178, "edited_correct": 203, "confirmed": True, "mcnemar_p": 1.7e-4},
        "formats": [
            {
                "name": "recipe's prompt",
                "primary": True,
                "prompt": {
                    "n_shot": 0,
                    "chat_template": "auto",
                    "prompt_style": "question-answer",
                    "max_new_tokens": 8,
                },
                "n": 1200,
                "verdict": "math-boost",
                "arms": {
                    "base": _arm(1200, 178, (598, 142), (602, 36)),
                    "candidate": _arm(1200, 203, (598, 168), (602, 35)),
                },
            },
            {
                "name": "chat, 4 worked turns",
                "primary": False,
                "prompt": {"n_shot": 4, "chat_template": "auto", "prompt_style": "question-answer"},
                "n": 800,
                "verdict": "no-gain",
                "arms": {"base": _arm(800, 177), "candidate": _arm(800, 186)},
            },
        ],
        "problems": {"source": ARITHMETIC, "seed": 0},
        **kw,
    }


def _read(results: list) -> list:
    """``results`` as the Hub and ``ModelCard.load`` read them back from a card's YAML."""
    data = ModelCardData(model_name="m", eval_results=results)
    return ModelCard(f"---\n{data.to_yaml()}\n---\n").data.eval_results or []


def test_prompt_format_in_words() -> None:
    assert prompt_format({"n_shot": 0, "chat_template": "auto"}, chat=True) == "0-shot, chat template"
    assert prompt_format({"n_shot": 0, "chat_template": "auto"}, chat=False) == "0-shot, Question/Answer text"
    assert prompt_format({"n_shot": 4, "chat_template": True}, chat=False) == "4-shot, chat template"
    assert prompt_format({"n_shot": 4, "chat_template": False, "prompt_style": "equations"}, chat=True) == (
        "4-shot, equation lines"
    )
    assert prompt_format({"n_shot": "4; rm", "chat_template": False}, chat=False) == "?-shot, Question/Answer text"
    assert prompt_format(None, chat=True) == "the recipe's prompt"


def test_the_confirmation_is_two_results_per_format_the_base_under_its_own_config() -> None:
    back = _read(confirmation_results(_sweep(), chat=True))
    rows = [(r.metric_name, r.metric_value, r.dataset_config, r.dataset_args["n"], r.metric_args) for r in back]
    assert rows == [
        ("math accuracy, this model", round(203 / 1200, 6), "0-shot, chat template", 1200,
         {"correct": 203, "n": 1200, "verdict": "math-boost"}),
        ("math accuracy, base model (unedited) for comparison", round(178 / 1200, 6),
         "0-shot, chat template; base model", 1200, {"correct": 178, "n": 1200}),
        ("math accuracy, this model", round(186 / 800, 6), "4-shot, chat template", 800,
         {"correct": 186, "n": 800, "verdict": "no-gain"}),
        ("math accuracy, base model (unedited) for comparison", round(177 / 800, 6),
         "4-shot, chat template; base model", 800, {"correct": 177, "n": 800}),
    ]  # fmt: skip
    for r in back:
        assert r.task_type == "text-generation" and r.metric_type == "accuracy"
        assert r.dataset_type == "mathneuro-edit-arithmetic" and "sweep confirmation problems" in r.dataset_name
        assert r.dataset_args["seed"] == 0 and r.source_url.endswith("docs/evaluation.md#select-then-confirm-sweep")
    assert [r.source_name for r in back[:2]] == [
        "mathneuro-edit sweep confirmation",
        "mathneuro-edit sweep confirmation: base model",
    ]


def test_the_recipe_s_own_format_comes_first_and_a_section_without_formats_gives_its_counts() -> None:
    sw = _sweep()
    sw["formats"].reverse()
    assert [r.metric_args["n"] for r in confirmation_results(sw)][:2] == [1200, 1200]
    old = {"confirmation": {"n": 8, "base_correct": 1, "edited_correct": 7, "confirmed": True}}
    got = [(r.metric_value, r.dataset_config) for r in confirmation_results(old)]
    assert got == [(0.875, "the recipe's prompt"), (0.125, "the recipe's prompt; base model")]
    old["formats"] = [{"primary": True, "prompt": {"n_shot": 0, "chat_template": False}, "arms": {}}]
    assert confirmation_results(old)[0].dataset_config == "0-shot, Question/Answer text"
    bad = {"confirmation": {"n": 8, "base_correct": 9, "edited_correct": 7}}  # a count above n: no result
    assert confirmation_results(bad) == [] and confirmation_results({}) == []


def test_a_release_from_a_sweep_lists_the_confirmation_not_its_own_math_accuracy() -> None:
    recipe = quickstart_recipe()
    own = {
        "math": {"base": {"math_accuracy": 0.357}, "edited": {"math_accuracy": 0.387}},
        "general": {"edited": {"general_loss": 2.5, "general_kl": 0.01}},
    }
    plain = [(r.metric_name, r.metric_value) for r in eval_results_metadata(own, recipe)]
    assert ("math accuracy", 0.387) in plain
    released = [(r.metric_name, r.metric_value) for r in eval_results_metadata(own, recipe, _sweep(), chat=True)]
    assert ("math accuracy", 0.387) not in released and 0.387 not in [v for _, v in released]
    assert released[:2] == [
        ("math accuracy, this model", round(203 / 1200, 6)),
        ("math accuracy, base model (unedited) for comparison", round(178 / 1200, 6)),
    ]
    assert ("general next-token loss", 2.5) in released  # the run's own general cost stays: not a selection figure
    assert eval_results_metadata(None, recipe, _sweep())[0].metric_value == round(203 / 1200, 6)


def test_lm_eval_standard_errors_are_no_results_and_a_hub_dataset_keeps_its_default_split() -> None:
    """Issue 48: model-index must not list lm-eval's ``*_stderr`` values, nor drop the default split."""
    recipe = quickstart_recipe(["evaluation.math={path: 'hf://datasets/openai/gsm8k', config: main}"])
    results = {
        "lm_eval": {"edited": {"arc_easy/acc,none": 0.5, "arc_easy/acc_stderr,none": 0.02, "arc_easy/n": 100}},
        "math": {"edited": {"math_accuracy": 0.25}},
    }
    found = eval_results_metadata(results, recipe)
    names = [r.metric_type for r in found]
    assert "arc_easy/acc,none" in names and not [n for n in names if "stderr" in n]
    (math,) = [r for r in found if r.metric_type == "accuracy"]
    assert (math.dataset_type, math.dataset_config, math.dataset_split) == ("openai/gsm8k", "main", "train")
    assert _read([math])[0].dataset_split == "train"


def test_gain_operations_names_where_the_gain_is() -> None:
    formats = _sweep()["formats"]
    assert gain_operations(formats) == ["addition"]
    formats[0]["arms"]["candidate"]["by_operation"]["-"]["correct"] = 40  # both rise: both named
    assert gain_operations(formats) == ["addition", "subtraction"]
    assert gain_operations([{"primary": True, "arms": {}}]) == [] and gain_operations([]) == []


def test_the_dtype_a_snippet_loads_in_is_the_one_the_figures_were_computed_in() -> None:
    sweep_lock = {"sweep": {"confirmation": {"compute_dtype": "float32"}}, "recipe": {"base": {"dtype": "auto"}}}
    assert compute_dtype(sweep_lock) == "float32"
    assert compute_dtype({"recipe": {"base": {"dtype": "bfloat16"}}}) == "bfloat16"
    assert compute_dtype({"recipe": {"base": {"dtype": "auto"}}, "base": {"gguf": {"file": "x.gguf"}}}) == "float32"
    assert compute_dtype({"recipe": {"base": {"dtype": "auto"}}, "base": {}}) is None
    assert load_dtype(sweep_lock, "bfloat16") == "float32"  # stored bf16, computed float32: say so
    assert load_dtype(sweep_lock, "float32") is None and load_dtype(sweep_lock, None) is None
    view = {"repo": "me/x", "dtype": "float32", "prompt": None}
    assert 'from_pretrained("me/x", dtype=torch.float32)  # the dtype' in _snippet("checkpoint_usage", view)
    assert "torch" not in _snippet("checkpoint_usage", {**view, "dtype": None})


def _snippet(macro: str, data: Any) -> str:
    """One of card_template.md's snippet macros rendered on its own (the macros come before the card's text)."""
    text = TEMPLATE.read_text()
    return jinja2.Template(text[: text.index("\n---\n")] + f"{{{{ {macro}(data) }}}}").render(data=data)


def usage_prompt(prompt: Any, chat: bool) -> str:
    """The snippet's lines after the model and tokenizer are loaded, as the card renders them."""
    return _snippet("prompt_lines", snippet_prompt(prompt, chat))


def test_the_snippet_prompts_as_the_figures_were_measured() -> None:
    prompt = figures_prompt({"sweep": _sweep()})
    assert prompt == {**_sweep()["formats"][0]["prompt"], "prefill": True}
    chat = usage_prompt(prompt, chat=True)
    assert 'add_generation_prompt=True) + "27 + 15 = "' in chat and "add_special_tokens=False" in chat
    assert "max_new_tokens=8" in chat and "0-shot" in chat
    plain = usage_prompt({**prompt, "chat_template": False, "n_shot": 1}, chat=True)
    assert (
        'text = "Question: What is 12 + 34?\\nAnswer: 12 + 34 = 46\\n\\nQuestion: What is 27 + 15?\\nAnswer: 27 + 15 = "'
        in (plain)
    )
    recipe_lock = {"recipe": {"evaluation": {"n_shot": 0, "chat_template": "auto", "math": {"path": "x.jsonl"}}}}
    assert figures_prompt(recipe_lock)["prefill"] is False and figures_prompt({"recipe": {}}) is None
    assert "apply_chat_template(messages, add_generation_prompt=True" in usage_prompt(figures_prompt(recipe_lock), True)
    assert usage_prompt(None, chat=False) == ""


def _smollm2_lock(tmp_path: Path, overlap: int) -> dict[str, Any]:
    """The lock of a release made from the committed SmolLM2 search (its sweep.json, with the base identity a
    release adds holding the very GGUF it ran on), whose own evaluation reuses ``overlap`` selection problems."""
    data = json.loads(SMOLLM2_SWEEP.read_text())
    data.setdefault("base_identity", {"gguf_sha256": "0" * 64})
    (tmp_path / "sweep.json").write_text(json.dumps(data))
    entry = read_sweep(tmp_path).lock_entry()
    entry |= {
        "evaluation_overlap": {"n": 300, "selection": overlap, "confirmation": 0},
        "mask_matches_confirmation": True,
    }
    recipe = quickstart_recipe()
    return build_lock(
        recipe,
        base_revision=None,
        data_records={},
        stats_sha256="s",
        mask_sha256=entry["confirmation"]["mask_sha256"],  # the mask the confirmation tested (another is refused)
        output_files={},
        sweep=without_problem_lists(entry),
    )


def test_model_card_load_of_a_release_from_the_smollm2_search_gives_the_confirmed_figures(tmp_path: Path) -> None:
    lock = _smollm2_lock(tmp_path, overlap=150)
    own = {  # the release's own small evaluation: 0.357 -> 0.387 on 300 problems, half of them selection problems
        "math": {
            "base": {"math_accuracy": 0.357, "math_correct": 107, "math_total": 300},
            "edited": {"math_accuracy": 0.387, "math_correct": 116, "math_total": 300},
            "comparison": {"mcnemar_p": 0.02, "significant": True, "base_only": 2, "edited_only": 11},
        }
    }
    source = CardSource(
        quickstart_recipe(),
        lock,
        summarize_edit({"m.q_proj.weight": (1, 8)}, model_params=8),
        own,
        chat=True,
        weights_dtype="bfloat16",
    )
    card = build_card(source, "checkpoint", base_model_id="HuggingFaceTB/SmolLM2-135M-Instruct")
    write_card(tmp_path, card)
    loaded = ModelCard.load(tmp_path / "README.md")
    results = [(r.metric_name, r.metric_value, r.dataset_config, r.dataset_args["n"]) for r in loaded.data.eval_results]
    assert results == [
        ("math accuracy, this model", 0.169167, "0-shot, chat template", 1200),
        ("math accuracy, base model (unedited) for comparison", 0.148333, "0-shot, chat template; base model", 1200),
        ("math accuracy, this model", 0.2325, "4-shot, chat template", 800),
        ("math accuracy, base model (unedited) for comparison", 0.22125, "4-shot, chat template; base model", 800),
    ]
    text = loaded.text
    assert (
        "**The math gain of this setting was confirmed on 1200 problems not used to choose it, under the prompt it "
        "was confirmed with (0-shot, chat template), in addition**: 14.8% -> 16.9%"
    ) in text
    assert "weights this repository stores, computed in float32" in text
    # the own evaluation: labelled, its change never called significant
    assert "(significant)" not in text and f"({NOT_A_TEST})" in text
    assert "**measured partly on the problems the setting was chosen on** (150 of its 300 math problems)" in text
    # the snippet: float32 over the stored bfloat16 weights, the confirmation's 0-shot chat prompt with its prefill
    assert 'AutoModelForCausalLM.from_pretrained(".", dtype=torch.float32)' in text
    assert '+ "27 + 15 = "' in text and "max_new_tokens=8" in text


def test_a_held_out_own_evaluation_keeps_its_test(tmp_path: Path) -> None:
    lock = _smollm2_lock(tmp_path, overlap=0)
    own = {
        "math": {
            "base": {"math_accuracy": 0.3, "math_total": 10},
            "edited": {"math_accuracy": 0.5, "math_total": 10},
            "comparison": {"mcnemar_p": 0.5, "significant": False},
        }
    }
    source = CardSource(quickstart_recipe(), lock, summarize_edit({"m.q_proj.weight": (1, 8)}, model_params=8), own)
    text = build_card(source, "checkpoint", base_model_id=None).text
    assert "(not significant)" in text and NOT_A_TEST not in text
    assert "This run's own evaluation, base vs edited on the same problems and texts." in text
