"""Each GGUF file's own numbers (issue 47 item 3): with ``evaluation.llama_cpp: true`` the run evaluates every GGUF
file in llama.cpp against the base written the same way, paired on the run's problems (``gguf_eval.json``), and
the GGUF repo's card shows those figures, never the checkpoint's.

The decisions (the paired row, the card's words) are tested in milliseconds against an independent count; the
llama.cpp tier runs the organism once: its F32 GGUF in llama.cpp answers as the float32 checkpoint does in
transformers (the same prompt ids, the same stopping and reading rules), so its row equals eval.json's.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import jinja2
import pytest
import yaml
from click.testing import CliRunner

from mathneuro_edit.cli.main import main
from mathneuro_edit.evaluation.llama_cpp import gguf_eval_line, pair_row
from mathneuro_edit.outputs.gguf import llama_cpp_facts
from mathneuro_edit.publish.card import TEMPLATE
from tests._llama_cpp import llama_cpp_or_skip


def _part(macro: str, files: dict, found: dict | None, names: dict) -> str:
    """The GGUF card's sentence (``gguf_effect``) or evaluation (``gguf_eval``) from card_template.md, rendered alone
    from the data the card gives it."""
    template = jinja2.Environment(undefined=jinja2.ChainableUndefined).from_string(TEMPLATE.read_text())
    return getattr(template.module, macro)(llama_cpp_facts(files, found, names))


def gguf_eval_section(files: dict, found: dict | None, names: dict) -> str:
    return _part("gguf_eval", files, found, names)


def gguf_effect(found: dict | None) -> str:
    return _part("gguf_effect", {}, found, {})


def _binomial_two_sided(b: int, c: int) -> float:
    """Exact two-sided binomial test of min(b, c) among b + c at 1/2, from the pmf (an independent McNemar)."""
    from math import comb

    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    return min(1.0, 2 * sum(comb(n, i) for i in range(k + 1)) / 2**n)


@pytest.mark.parametrize("seed", range(6))
def test_the_paired_row_equals_an_independent_count(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(5, 60)
    base = [rng.random() < 0.4 for _ in range(n)]
    edited = [rng.random() < (0.7 if seed % 2 else 0.1) for _ in range(n)]
    row = pair_row("Q4_K_M", base, edited)
    b = sum(x and not y for x, y in zip(base, edited))
    c = sum(y and not x for x, y in zip(base, edited))
    assert (row["n"], row["base"]["correct"], row["edited"]["correct"]) == (n, sum(base), sum(edited))
    assert row["discordant"] == {"base_only": b, "edited_only": c}
    assert row["difference_pp"] == pytest.approx(100 * (sum(edited) - sum(base)) / n)
    assert row["mcnemar_p"] == pytest.approx(_binomial_two_sided(b, c))
    assert "significant" not in row and "worse" not in row  # raw flags: the verdict is Holm's over the run's files


def test_a_significant_loss_is_never_called_a_gain() -> None:
    worse = pair_row("Q4_0", [True] * 20, [False] * 20)
    assert "McNemar p = 1.9e-06 before Holm over the files" in gguf_eval_line(worse)
    assert "significant loss" in gguf_eval_section({"m-Q4_0.gguf": "h"}, _found({"m-Q4_0.gguf": worse}), {})
    better = pair_row("Q8_0", [False] * 20, [True] * 20)
    assert "significant gain" in gguf_eval_section({"m-Q8_0.gguf": "h"}, _found({"m-Q8_0.gguf": better}), {})


def test_unequal_outcome_lists_are_refused() -> None:
    with pytest.raises(ValueError, match="equally long"):
        pair_row("Q8_0", [True], [True, False])
    with pytest.raises(ValueError, match="non-empty"):
        pair_row("Q8_0", [], [])


def _found(files: dict) -> dict:
    prompt = {"chat_template": True, "n_shot": 0, "prompt_style": "question-answer", "max_new_tokens": 8}
    return {"engine": "llama-cpp-python 0.0.0", "n": 20, "prompt": prompt, "files": files}


def test_a_card_without_the_files_evaluation_says_so_and_shows_no_figure() -> None:
    text = gguf_eval_section({"m-Q8_0.gguf": "h"}, None, {})
    assert text.startswith("These files were not evaluated in llama.cpp")
    assert "%" not in text and "evaluation.llama_cpp: true" in text
    assert gguf_effect(None) == (
        "These files were not evaluated in llama.cpp: the transformers checkpoint's figures are not theirs."
    )


def test_the_card_names_each_file_as_in_its_repo_with_its_own_row() -> None:
    q8 = pair_row("Q8_0", [False] * 18 + [True] * 2, [False] * 14 + [True] * 6)
    q4 = pair_row("Q4_K_M", [False] * 18 + [True] * 2, [False] * 17 + [True] * 3)
    found = _found({"model-Q8_0.gguf": q8, "model-Q4_K_M.gguf": q4})
    names = {"model-Q8_0.gguf": "X-Q8_0.gguf", "model-Q4_K_M.gguf": "X-Q4_K_M.gguf"}
    text = gguf_eval_section({"model-Q4_K_M.gguf": "a", "model-Q8_0.gguf": "b"}, found, names)
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert rows == [
        "| `X-Q4_K_M.gguf` | Q4_K_M | 10.0% (2/20, 2.8-30.1) | 15.0% (3/20, 5.2-36.0) | +5.0 pp, p = 1; Holm over the 2 files 1 (not significant) | 0 / 1 |",
        "| `X-Q8_0.gguf` | Q8_0 | 10.0% (2/20, 2.8-30.1) | 30.0% (6/20, 14.5-51.9) | +20.0 pp, p = 0.125; Holm over the 2 files 0.25 (not significant) | 0 / 4 |",
    ]
    assert "the chat template, 0-shot, greedy, up to 8 new tokens" in text
    assert gguf_effect(found).startswith(
        "In llama.cpp, on 20 math problems, against the base written the same way: Q8_0"
    )


def _recipe(tmp_path, gguf=("F32", "Q8_0"), **evaluation) -> str:
    recipe = yaml.safe_load(open("recipes/quickstart.yaml"))
    recipe["outputs"] = {"checkpoint": True, "gguf": list(gguf)}
    recipe["evaluation"].update({"samples": 24, **evaluation})
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return str(path)


def test_llama_cpp_evaluation_without_gguf_files_is_refused(tmp_path) -> None:
    recipe = yaml.safe_load(open("recipes/quickstart.yaml"))
    recipe["evaluation"]["llama_cpp"] = True
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(recipe))
    result = CliRunner().invoke(main, ["run", str(tmp_path / "r.yaml"), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and "outputs.gguf names none" in result.output, result.output
    assert not (tmp_path / "out").exists()


def test_llama_cpp_evaluation_without_llama_cpp_is_one_line_before_the_model_loads(tmp_path, monkeypatch) -> None:
    pytest.importorskip("gguf")
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # import llama_cpp raises ImportError
    result = CliRunner().invoke(
        main, ["run", _recipe(tmp_path, llama_cpp=True), "--out", str(tmp_path / "out"), "--quiet"]
    )
    assert result.exit_code == 2, result.output
    lines = [x for x in result.output.splitlines() if x.strip()]
    assert len(lines) == 1 and "evaluation.llama_cpp" in lines[0] and "pip install llama-cpp-python" in lines[0]
    assert not (tmp_path / "out").exists()


def test_each_gguf_file_is_evaluated_in_llama_cpp_and_its_card_shows_only_its_numbers(tmp_path, fake_hub) -> None:
    """The run evaluates F32 and a K-quant; the F32 row is the checkpoint's, answer for answer; the pushed GGUF repo
    holds the evaluated files (each downloaded from the Hub as a user does answers in llama.cpp as gguf_eval.json
    recorded) and its card, read back from the Hub, shows their rows and not the checkpoint's table."""
    pytest.importorskip("gguf")
    llama_cpp = llama_cpp_or_skip()
    from huggingface_hub import ModelCard, hf_hub_download

    from tests._fakehub import TOKEN

    out = tmp_path / "out"
    recipe = _recipe(tmp_path, llama_cpp=True, gguf=["F32", "Q4_K_M"])
    result = CliRunner().invoke(main, ["run", recipe, "--out", str(out), "--quiet"])
    assert result.exit_code == 0, result.output
    ckpt = out / "checkpoint"
    found = json.loads((ckpt / "gguf_eval.json").read_text())
    checkpoint_eval = json.loads((ckpt / "eval.json").read_text())
    assert set(found["files"]) == {"model-F32.gguf", "model-Q4_K_M.gguf"} and found["n"] == 24
    f32 = found["files"]["model-F32.gguf"]
    # the F32 file in llama.cpp is the float32 checkpoint in transformers: the same answers, the same row
    # (an independent reading: eval.json's own per-problem completions, by the evaluation's code)
    math = checkpoint_eval["math"]
    for arm in ("base", "edited"):
        preds = math[arm]["predictions"]
        assert f32[arm]["correct"] == sum(p["correct"] for p in preds) == math[arm]["math_correct"]
        assert f32["answers"][arm] == [p["completion"] for p in preds]
    lock = yaml.safe_load((out / "mathneuro_recipe.lock.yaml").read_text())
    assert "checkpoint/gguf_eval.json" in json.dumps(lock)  # pinned, so reproduce and verify check it

    env = {"HF_TOKEN": TOKEN}
    pushed = CliRunner().invoke(main, ["push", str(out), "--gguf", "--repo-id", "me/x-GGUF"], env=env)
    assert pushed.exit_code == 0, pushed.output
    card = ModelCard.load("me/x-GGUF").content
    assert "general loss" not in card and "| `math` |" not in card  # not the checkpoint's evaluation table
    assert card.count("In llama.cpp, on 24 math problems") == 1
    tok = __import__("transformers").AutoTokenizer.from_pretrained(ckpt)
    first = checkpoint_eval["math"]["edited"]["predictions"][0]
    ids = tok(f"Question: {first['question']}\nAnswer:")["input_ids"]  # the organism's plain prompt
    for local, qtype in (("model-F32.gguf", "F32"), ("model-Q4_K_M.gguf", "Q4_K_M")):
        name = f"Organism-1.1M-MathNeuro-Prune-{qtype}.gguf"
        assert f"| `{name}` | {qtype} |" in card
        path = hf_hub_download("me/x-GGUF", name)
        assert Path(path).read_bytes() == (ckpt / local).read_bytes()
        llm = llama_cpp.Llama(model_path=path, n_ctx=256, n_threads=1, verbose=False, seed=0)
        got = []
        for t in llm.generate(ids, temp=0.0, top_k=1, reset=True):
            if t == tok.eos_token_id or len(got) == 64:
                break
            got.append(t)
        llm.close()
        said = tok.decode(got, skip_special_tokens=True)
        assert said.startswith(found["files"][local]["answers"]["edited"][0]), (said, local)


class _ScriptedLlama:
    """A stand-in for ``llama_cpp.Llama`` whose greedy stream is scripted: tokens 1, 2, 3, ... (decoded as text by
    the test's decoder), never an end-of-sequence unless scripted."""

    def __init__(self, **kwargs) -> None:
        self.kwargs = kwargs

    def generate(self, ids, **kwargs):
        assert kwargs["temp"] == 0.0 and kwargs["top_k"] == 1 and kwargs["reset"] is True
        yield from range(1, 1000)

    def close(self) -> None:
        pass


@pytest.mark.parametrize(
    ("prefill", "eos", "budget", "expected"),
    [
        (None, [], 50, "1 2 3 4 5"),  # stops once the answer is complete
        (None, [3], 50, "1 2"),  # an end-of-sequence id ends it, unshown
        (None, [], 2, "1 2"),  # the budget ends it
    ],
)
def test_llama_cpp_completions_stop_where_the_evaluation_stops(monkeypatch, prefill, eos, budget, expected) -> None:
    import types

    from mathneuro_edit.evaluation import llama_cpp as module

    monkeypatch.setitem(sys.modules, "llama_cpp", types.SimpleNamespace(Llama=_ScriptedLlama))
    # "done" after the fifth token: the scripted rule stands for completion_done (its own tests pin it)
    monkeypatch.setattr(module, "completion_done", lambda text, pre: len(text.split()) >= 5)

    def decode(ids):
        return " ".join(map(str, ids))

    got = module.llama_cpp_completions("m.gguf", [[7, 8]], decode, [prefill], eos, budget)
    assert got == [expected]


def test_the_card_calls_a_file_significant_only_after_holm_over_the_run_s_files() -> None:
    """Five files each tested at 0.05 find a "significant" one by chance about 23% of the time: the card's verdict
    is Holm-adjusted over the files (SmolLM2's release: Q6_K p = 0.0225 alone, 0.09 adjusted)."""
    from mathneuro_edit.outputs.gguf import file_verdicts

    q8 = pair_row("Q8_0", [False] * 291 + [True] * 9, [True] * 9 + [False] * 282 + [True] * 9)
    q6 = pair_row("Q6_K", [False] * 300, [False] * 294 + [True] * 6)
    flat = {t: pair_row(t, [True] * 10 + [False] * 290, [True] * 10 + [False] * 290) for t in ("Q5_K_M", "Q4_K_M")}
    loss = pair_row("Q4_0", [True] * 12 + [False] * 288, [False] * 300)
    files = {"q8": q8, "q6": q6, **flat, "q4": loss}
    v = file_verdicts(files)
    raw = {f: r["mcnemar_p"] for f, r in files.items()}
    # Holm's step-down, written out: the i-th smallest p times (m - i), a running maximum, capped at 1
    order, holm, top = sorted(raw, key=raw.get), {}, 0.0
    for i, f in enumerate(order):
        top = max(top, min(1.0, (len(raw) - i) * raw[f]))
        holm[f] = top
    assert raw["q6"] < 0.05 <= holm["q6"]  # significant alone, not after Holm
    assert v["q6"]["verdict"] == "not significant"
    assert v["q8"]["verdict"] == "significant gain" and v["q4"]["verdict"] == "significant loss"
    assert v["Q5_K_M"]["verdict"] == "not significant"
    assert v["q6"]["p"] == f"p = {raw['q6']:.3g}; Holm over the 5 files {holm['q6']:.3g}"
    single = file_verdicts({"q6": q6})
    assert single["q6"] == {"p": f"p = {raw['q6']:.3g}", "verdict": "significant gain"}


def test_the_card_s_commands_name_the_file_most_likely_to_keep_the_edit() -> None:
    from mathneuro_edit.outputs.gguf import shown_file

    assert shown_file(["a-Q4_0.gguf", "a-Q4_K_M.gguf", "a-Q5_K_M.gguf", "a-Q6_K.gguf", "a-Q8_0.gguf"]) == "a-Q8_0.gguf"
    assert shown_file(["a-Q4_K_M.gguf", "a-Q6_K.gguf"]) == "a-Q6_K.gguf"
    assert shown_file(["a-Q4_K_M.gguf", "a-F16.gguf"]) == "a-F16.gguf"
    assert shown_file(["a-Q4_0.gguf", "a-Q4_K_M.gguf"]) == "a-Q4_K_M.gguf"
    assert shown_file(["a-IQ4_XS.gguf"]) == "a-IQ4_XS.gguf"


def test_export_of_a_recipe_asking_llama_cpp_writes_the_files_without_an_evaluation(tmp_path) -> None:
    """``export`` runs no evaluation (``eval`` and ``run`` do): a recipe with evaluation.llama_cpp still exports its
    GGUF files, and no gguf_eval.json (was an internal StopIteration: the export's record has no tasks)."""
    pytest.importorskip("gguf")
    run = tmp_path / "run"
    first = CliRunner().invoke(main, ["run", _recipe(tmp_path, gguf=["F32"]), "--out", str(run), "--quiet"])
    assert first.exit_code == 0, first.output
    recipe = _recipe(tmp_path, gguf=["F32"], llama_cpp=True)
    args = ["export", recipe, "--mask", str(run / "mask.safetensors"), "--out", str(tmp_path / "exp"), "--quiet"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert (tmp_path / "exp" / "model-F32.gguf").is_file() and not (tmp_path / "exp" / "gguf_eval.json").exists()


HOSTILE = "x`\n## Injected <img src=x onerror=alert(1)> [a](javascript:alert(1)) |"


def test_a_hostile_gguf_eval_json_puts_no_markup_in_the_card() -> None:
    """gguf_eval.json and gguf_survival.json are read from the folder push publishes (the lock pins them, but a card
    is rendered from what is there): every text of theirs the card shows is a label (issue 48: one rule whatever the
    field); the run's own values show as they were."""
    from mathneuro_edit.outputs.gguf import survival_table

    row = pair_row(HOSTILE, [False] * 10, [True] * 10)
    row["discordant"] = {"base_only": 0, "edited_only": 10}
    prompt = {"chat_template": False, "n_shot": HOSTILE, "prompt_style": HOSTILE, "max_new_tokens": HOSTILE}
    found = {"engine": HOSTILE, "n": HOSTILE, "prompt": prompt, "files": {"m-Q8_0.gguf": row}}
    text = gguf_eval_section({"m-Q8_0.gguf": "h"}, found, {}) + gguf_effect(found)
    survival = survival_table({"m-Q8_0.gguf": "h"}, {"source": HOSTILE, "quantizer": HOSTILE}, {})
    shown = text + json.dumps(survival)
    for markup in ("##", "<img", "](", "`x", "\n## "):
        assert markup not in shown, markup
    ok = gguf_eval_section({"m-Q8_0.gguf": "h"}, _found({"m-Q8_0.gguf": pair_row("Q8_0", [0] * 4, [1] * 4)}), {})
    assert "in llama.cpp (llama-cpp-python 0.0.0)" in ok and "(the chat template, 0-shot, greedy, up to 8" in ok


def test_a_damaged_gguf_eval_json_is_shown_as_not_evaluated() -> None:
    """A gguf_eval.json whose p-value is not a number (edited by hand) made the card an internal error; the card now
    says the files were not evaluated (verify reports the file against the lock)."""
    row = pair_row("Q8_0", [False] * 4, [True] * 4)
    row["mcnemar_p"] = "tiny"
    assert llama_cpp_facts({"m-Q8_0.gguf": "h"}, _found({"m-Q8_0.gguf": row}), {}) is None
    assert "were not evaluated in llama.cpp" in gguf_eval_section({"m-Q8_0.gguf": "h"}, None, {})


def test_the_survival_table_says_what_each_type_keeps() -> None:
    """The "keeps" column is the template's table of llama.cpp's types; a type it does not list shows "-"."""
    from mathneuro_edit.outputs.gguf import survival_table

    text = TEMPLATE.read_text()
    files = {"m-Q8_0.gguf": "h", "m-Q4_K_M.gguf": "h", "m-XX.gguf": "h"}
    data = survival_table(files, {"files": {}}, {})
    shown = jinja2.Template(text[: text.index("\n---\n")] + "{{ survival_table(d) }}").render(d=data)
    assert "| `m-Q8_0.gguf` | Q8_0 | - | 8 bits per weight, one scale per 32 | not measured | - |" in shown
    assert "| Q4_K_M | - | 4 bits (K-quant); attn_v and ffn_down of half the layers 6 bits |" in shown
    assert "| `m-XX.gguf` | XX | - | - | not measured | - |" in shown
