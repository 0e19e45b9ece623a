"""Tests of mathneuro_edit.evaluate: answer extraction, batched greedy math accuracy, general loss / KL, results."""

from __future__ import annotations

import copy
import json
import math
import string
import sys

import pytest
import torch
from tokenizers import Tokenizer, decoders, models
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from mathneuro_edit.engine.apply import ReversibleEdit, apply_mask
from mathneuro_edit.engine.mask import Mask
from mathneuro_edit.errors import InputError
from mathneuro_edit.evaluation.lm_eval_task import LmEvalTask
from mathneuro_edit.evaluation.results import (
    EvalResults,
    MathResult,
    extract_answer,
    math_prompt,
    truncate_completion,
)
from mathneuro_edit.evaluation.runner import evaluate, general_loss, math_accuracy
from mathneuro_edit.evaluation.runtime import AnswerStop
from mathneuro_edit.evaluation.tasks import GeneralTask, MathTask

CHARS = sorted(set(string.printable) - set("\r\x0b\x0c"))


def make_tokenizer(pad: bool = False) -> PreTrainedTokenizerFast:
    """Character-level tokenizer (BPE without merges = one token per character), eos, optionally a pad token."""
    vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2, **{c: i + 3 for i, c in enumerate(CHARS)}}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    backend.decoder = decoders.Fuse()  # join characters back without spaces
    extra = {"pad_token": "<pad>"} if pad else {}
    return PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<eos>", unk_token="<unk>", **extra)


@pytest.fixture(scope="module")
def tok() -> PreTrainedTokenizerFast:
    return make_tokenizer()


@pytest.fixture(scope="module")
def model() -> LlamaForCausalLM:
    torch.manual_seed(0)
    # initializer_range 0.3 (not 0.02): spread-out logits make greedy argmax robust to float rounding, so batched
    # and unbatched generation are expected to agree token for token
    cfg = LlamaConfig(
        vocab_size=100,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        initializer_range=0.3,
        eos_token_id=1,
        bos_token_id=None,
        pad_token_id=None,
    )
    return LlamaForCausalLM(cfg).eval()


def snapshot(m: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in m.state_dict().items()}


def assert_identical(m: nn.Module, snap: dict[str, torch.Tensor]) -> None:
    for k, v in m.state_dict().items():
        assert torch.equal(v, snap[k]), k


def random_mask(m: nn.Module, density: float = 0.2, seed: int = 0) -> Mask:
    g = torch.Generator().manual_seed(seed)
    return Mask(
        {
            n: torch.rand(p.shape, generator=g) < density
            for n, p in m.named_parameters()
            if p.ndim == 2 and "layers" in n
        }
    )


PROBLEMS = [
    {"question": f"Tom has {a} apples and gets {b} more. How many now?", "answer": f"{a} + {b} = {a + b}\n#### {a + b}"}
    for a, b in [(2, 3), (10, 7), (4, 4), (12, 1), (5, 9), (3, 30), (1, 1)]
]
TEXTS = [
    "The cat sat on the mat.",
    "A quiet morning in the old park, with birds.",
    "Hi!",
    "x",
    "Lily walks to the market and buys bread for her family before noon.",
]


# ------------------------------------------------------------------------------------------- answer extraction


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Natalia sold 48/2 = 24 clips in May.\nNatalia sold 48+24 = 72 clips.\n#### 72", 72),
        ("#### 1,234", 1234),
        ("#### 1,000,000 dollars", 1000000),
        ("#### -5", -5),
        ("####-17\n", -17),
        ("####   42", 42),
        ("#### 42.", 42),
        ("#### 42.00", 42),
        ("#### 42.5", None),
        ("#### 7, then more", 7),
        ("the answer is 72", None),
        ("", None),
        ("#### ", None),
        ("#### abc", None),
        ("#### 3\n#### 4", 3),
        ("#### x\n#### 9", 9),  # the first '#### <number>' counts
        ("### 5", None),
        ("#### 0", 0),
        ("5 + 5 = 10 #### 10\n\nQuestion: next", 10),
    ],
)
def test_extract_answer(text: str, expected: int | None) -> None:
    assert extract_answer(text) == expected


@pytest.mark.parametrize(
    "text, cut, done",
    [
        ("2 + 2 = 4\n#### 4\n\nQuestion: 1 + 1?\nAnswer: #### 2", "2 + 2 = 4\n#### 4", True),
        ("#### 4\nQuestion: again #### 5", "#### 4", True),
        ("#### 4", "#### 4", False),  # the number may continue
        ("#### 4,", "#### 4,", False),
        ("#### 4.", "#### 4.", False),
        ("#### 4\n", "#### 4\n", True),
        ("#### 4. More text\n\nmore", "#### 4. More text", True),
        ("still thinking\n\nstep two", "still thinking\n\nstep two", False),  # a blank line before the answer is kept
        ("no answer\nQuestion: other #### 3", "no answer", True),
        ("", "", False),
    ],
)
def test_truncate_completion(text: str, cut: str, done: bool) -> None:
    assert truncate_completion(text) == (cut, done)
    assert extract_answer(truncate_completion("no answer\nQuestion: x #### 3")[0]) is None


def test_math_prompt_format() -> None:
    shots = [{"question": "A?", "answer": "1 + 1 = 2\n#### 2"}, {"question": "B?", "answer": "#### 3"}]
    assert math_prompt("C?") == "Question: C?\nAnswer:"
    assert (
        math_prompt("C?", shots)
        == "Question: A?\nAnswer: 1 + 1 = 2\n#### 2\n\nQuestion: B?\nAnswer: #### 3\n\nQuestion: C?\nAnswer:"
    )


def test_prompt_matches_organism_training_format() -> None:
    from mathneuro_edit.organism.data import format_math, parse_answer

    assert math_prompt("Tom has 2 apples.") == format_math("Tom has 2 apples.")
    shot = {"question": "A?", "answer": "1 + 1 = 2\n#### 2"}
    assert math_prompt("B?", [shot]) == format_math("A?", shot["answer"]) + "\n\n" + format_math("B?")
    for text in ("2 + 3 = 5\n#### 5", "#### -12", "nothing"):
        assert extract_answer(text) == parse_answer(text)


def test_answer_stop_criteria(tok: PreTrainedTokenizerFast) -> None:
    prompt = tok("Question: q\nAnswer:")["input_ids"]
    rows = [" 1 + 1 = 2\n#### 2\n", " #### 2", " #### 1"]
    width = max(len(tok(r)["input_ids"]) for r in rows)
    ids = torch.tensor([prompt + tok(r)["input_ids"] + [1] * (width - len(tok(r)["input_ids"])) for r in rows])
    stop = AnswerStop(tok, len(prompt), [None] * 3)
    # eos padding is skipped in decoding: rows 2 and 3 end in an unfinished number
    assert stop(ids, None).tolist() == [True, False, False]
    ids[1, -1] = tok.convert_tokens_to_ids("\n")  # row 2 now reads " #### 2\n" (eos skipped): complete
    assert stop(ids, None).tolist() == [True, True, False] and stop.done == [True, True, False]


# ----------------------------------------------------------------------------------------------- math accuracy


def test_batched_generation_equals_unbatched(model: LlamaForCausalLM, tok: PreTrainedTokenizerFast) -> None:
    shots = [{"question": "Mia has 2 cards.", "answer": "#### 2"}]
    batched = math_accuracy(
        model, tok, PROBLEMS, n_shot=1, shots=shots, max_new_tokens=24, batch_size=4, progress=False
    )
    for p, pred in zip(PROBLEMS, batched.predictions):
        # independent: one prompt, no padding, plain generate, then the same cut
        ids = torch.tensor([tok(math_prompt(p["question"], shots))["input_ids"]])
        out = model.generate(ids, do_sample=False, max_new_tokens=24, pad_token_id=1, eos_token_id=1)
        new = out[0, ids.shape[1] :].tolist()
        new = new[: new.index(1)] if 1 in new else new
        text = truncate_completion(tok.decode(new))[0]
        assert pred.completion == text and pred.gold == extract_answer(p["answer"])
    assert len({pr.completion for pr in batched.predictions}) > 1  # the fake produces varied completions
    assert batched.correct == sum(pr.extracted == pr.gold for pr in batched.predictions)
    assert batched.total == len(PROBLEMS) and batched.accuracy == batched.correct / len(PROBLEMS)


class ScriptedLM(nn.Module):
    """A deterministic fake: answers each question with a scripted completion; records prompts and calls."""

    def __init__(self, tok: PreTrainedTokenizerFast, script: dict[str, str]) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(1))
        self.tok, self.script, self.prompts, self.calls = tok, script, [], 0

    def generate(self, input_ids, attention_mask, **kw):  # type: ignore[no-untyped-def]
        assert kw["do_sample"] is False and not self.training
        self.calls += 1
        rows = []
        for ids, m in zip(input_ids, attention_mask):
            assert m.tolist() == sorted(m.tolist()), "left padding expected"
            prompt = self.tok.decode(ids[m.bool()])
            self.prompts.append(prompt)
            q = prompt.rsplit("Question: ", 1)[1].removesuffix("\nAnswer:")
            rows.append(self.tok(self.script[q] + (self.w.item() > 0) * "9")["input_ids"] + [1])
        width = max(map(len, rows))
        new = torch.tensor([r + [kw["pad_token_id"]] * (width - len(r)) for r in rows])
        return torch.cat([input_ids, new], 1)


SCRIPT = {
    "q1": " 2 + 3 = 5\n#### 5\n\nQuestion: q9\nAnswer: #### 7",  # right, then rambles on
    "q2": " #### 1,200.",  # right, commas and period
    "q3": " 4 - 9 = -5\n#### -5",  # right, negative
    "q4": " #### 6\n#### 8",  # wrong: the first counts
    "q5": " I do not know\nQuestion: q2\nAnswer: #### 8",  # no answer before the next question
}
GOLD = {"q1": 5, "q2": 1200, "q3": -5, "q4": 8, "q5": 8}


def test_math_accuracy_scripted(tok: PreTrainedTokenizerFast) -> None:
    fake = ScriptedLM(tok, SCRIPT).train()
    problems = [{"question": q, "answer": f"#### {g}"} for q, g in GOLD.items()]
    res = math_accuracy(fake, tok, problems, batch_size=2, progress=False)
    assert [p.extracted for p in res.predictions] == [5, 1200, -5, 6, None]
    assert (res.correct, res.total, res.accuracy) == (3, 5, 0.6)
    assert res.predictions[0].completion == " 2 + 3 = 5\n#### 5"
    assert sorted(fake.prompts) == sorted(f"Question: {q}\nAnswer:" for q in GOLD)
    assert fake.training  # mode restored


def test_evaluate_math_edit_and_base_reuse(tok: PreTrainedTokenizerFast) -> None:
    fake = ScriptedLM(tok, SCRIPT)
    task = MathTask("gsm", [{"question": q, "answer": f"#### {g}"} for q, g in GOLD.items()])

    class Boost:  # a duck-typed edit that sets w to 1, so the fake appends "9" to every completion
        applied = False

        def apply(self) -> None:
            fake.w.data.fill_(1.0)
            self.applied = True

        def restore(self) -> None:
            fake.w.data.fill_(0.0)
            self.applied = False

    res = evaluate(fake, tok, [task], edit=Boost(), progress=False)  # type: ignore[arg-type]
    assert res.base["gsm"].correct == 3 and fake.calls == 2 and fake.w.item() == 0.0
    assert [p.extracted for p in res.edited["gsm"].predictions] == [
        5,
        1200.9,
        -59,
        6,
        None,
    ]  # "#### 1,200.9": a decimal, wrong
    fake.calls = 0
    res2 = evaluate(fake, tok, [task], edit=Boost(), base_results=res.base, progress=False)  # type: ignore[arg-type]
    assert fake.calls == 1  # base reused, only the edited run generated
    assert res2.base["gsm"] is res.base["gsm"] and res2.edited["gsm"] == res.edited["gsm"]
    other = MathTask("gsm", [{"question": "q1", "answer": "#### 5"}])
    with pytest.raises(InputError, match="different task"):
        evaluate(fake, tok, [other], base_results=res, progress=False)


def test_math_edited_equals_edited_copy(model: LlamaForCausalLM, tok: PreTrainedTokenizerFast) -> None:
    mask = random_mask(model, 0.3)
    task = MathTask("m", PROBLEMS[:4], max_new_tokens=12)
    res = evaluate(model, tok, [task], edit=ReversibleEdit(model, mask, 0.0), batch_size=3, progress=False)
    copy_ = copy.deepcopy(model)
    apply_mask(copy_, mask, 0.0)
    ref = math_accuracy(copy_, tok, PROBLEMS[:4], max_new_tokens=12, batch_size=1, progress=False)
    assert [p.completion for p in res.edited["m"].predictions] == [p.completion for p in ref.predictions]
    assert [p.completion for p in res.edited["m"].predictions] != [p.completion for p in res.base["m"].predictions]


# ------------------------------------------------------------------------------------------ general loss and KL


def reference_loss_kl(base: nn.Module, edited: nn.Module, tok: PreTrainedTokenizerFast) -> tuple[float, float, float]:
    """Batch size 1, no padding: HF's own loss weighted by predicted tokens; KL by the textbook formula."""
    loss_b = loss_e = kl = 0.0
    n_pred = n_tok = 0
    with torch.no_grad():
        for t in TEXTS:
            ids = torch.tensor([tok(t)["input_ids"]])
            n = ids.shape[1]
            if n > 1:
                loss_b += base(ids, labels=ids).loss.item() * (n - 1)
                loss_e += edited(ids, labels=ids).loss.item() * (n - 1)
            p = base(ids).logits[0].double().log_softmax(-1)  # (n, vocab)
            q = edited(ids).logits[0].double().log_softmax(-1)
            kl += (p.exp() * (p - q)).sum().item()
            n_pred, n_tok = n_pred + n - 1, n_tok + n
    return loss_b / n_pred, loss_e / n_pred, kl / n_tok


def test_general_loss_and_kl_match_reference(model: LlamaForCausalLM, tok: PreTrainedTokenizerFast) -> None:
    mask = random_mask(model, 0.2)
    before = snapshot(model)
    res = evaluate(
        model, tok, [GeneralTask("g", TEXTS)], edit=ReversibleEdit(model, mask, 0.0), batch_size=3, progress=False
    )
    assert_identical(model, before)
    copy_ = copy.deepcopy(model)
    apply_mask(copy_, mask, 0.0)
    ref_b, ref_e, ref_kl = reference_loss_kl(model, copy_, tok)
    base, edited = res.base["g"], res.edited["g"]
    assert base.loss == pytest.approx(ref_b, rel=1e-5) and edited.loss == pytest.approx(ref_e, rel=1e-5)
    assert base.perplexity == pytest.approx(math.exp(ref_b), rel=1e-5)
    assert edited.kl > 1e-3 and abs(edited.kl - ref_kl) < 1e-5 and base.kl == 0.0
    # the plain function: the model as is, and edited with the same KL
    assert general_loss(model, tok, TEXTS, batch_size=2, progress=False).loss == pytest.approx(ref_b, rel=1e-5)
    alone = general_loss(model, tok, TEXTS, edit=ReversibleEdit(model, mask, 0.0), progress=False)
    assert alone.loss == pytest.approx(ref_e, rel=1e-5) and abs(alone.kl - ref_kl) < 1e-5
    assert_identical(model, before)


def test_kl_reuses_the_base_logprobs_with_the_same_numbers(
    model: LlamaForCausalLM, tok: PreTrainedTokenizerFast
) -> None:
    # a sweep keeps the base's log-probabilities once; each edit's KL then skips the base forward pass
    task = GeneralTask("g", TEXTS)
    edit = ReversibleEdit(model, random_mask(model, 0.2), 0.0)
    base = evaluate(model, tok, [task], batch_size=3, progress=False, keep_base_logprobs=True)
    kept = base.base["g"].logprobs
    assert kept is not None and len(kept) == len(TEXTS) and kept[0].dtype == torch.float32
    assert evaluate(model, tok, [task], batch_size=3, progress=False).base["g"].logprobs is None  # not by default
    fresh = evaluate(model, tok, [task], edit=edit, batch_size=3, progress=False)
    forwards = []
    handle = model.register_forward_hook(lambda *a: forwards.append(edit.applied))
    try:
        reused = evaluate(model, tok, [task], edit=edit, base_results=base, batch_size=3, progress=False)
    finally:
        handle.remove()
    assert forwards and all(forwards)  # only edited forward passes ran: the base ones came from the cache
    # bit for bit the numbers of the run that recomputed the base
    assert reused.edited["g"] == fresh.edited["g"] and reused.base["g"] == fresh.base["g"]
    assert reused.edited["g"].kl > 1e-3


def test_kl_zero_for_empty_edit_and_scale_one(model: LlamaForCausalLM, tok: PreTrainedTokenizerFast) -> None:
    task = GeneralTask("g", TEXTS)
    empty = Mask({n: torch.zeros(p.shape, dtype=torch.bool) for n, p in model.named_parameters()})
    for edit in (ReversibleEdit(model, empty, 0.0), ReversibleEdit(model, random_mask(model), 1.0)):
        res = evaluate(model, tok, [task], edit=edit, progress=False)
        assert res.edited["g"].kl == 0.0 and res.edited["g"].loss == res.base["g"].loss


def test_model_restored_after_exception(model: LlamaForCausalLM, tok: PreTrainedTokenizerFast) -> None:
    before = snapshot(model)
    model.train()
    model.model.layers[0].eval()  # a mixed mode must come back as it was
    edit = ReversibleEdit(model, random_mask(model), 0.0)
    calls = []

    def boom(module, args, output):  # type: ignore[no-untyped-def]
        calls.append(edit.applied)
        if len(calls) == 4:  # the second batch's edited forward pass: the edit is applied right now
            raise RuntimeError("injected")

    handle = model.model.norm.register_forward_hook(boom)
    try:
        with pytest.raises(RuntimeError, match="injected"):
            evaluate(model, tok, [GeneralTask("g", TEXTS)], edit=edit, batch_size=2, progress=False)
    finally:
        handle.remove()
    assert calls == [False, True, False, True]
    assert_identical(model, before)
    assert not edit.applied and model.training and not model.model.layers[0].training
    assert model.model.layers[1].training
    model.eval()


def test_edit_applied_on_entry_stays_applied(model: LlamaForCausalLM, tok: PreTrainedTokenizerFast) -> None:
    before = snapshot(model)
    edit = ReversibleEdit(model, random_mask(model), 0.0)
    edit.apply()
    edited_state = snapshot(model)
    res = evaluate(model, tok, [GeneralTask("g", TEXTS)], edit=edit, progress=False)
    assert edit.applied and res.edited["g"].kl > 0
    assert_identical(model, edited_state)
    edit.restore()
    assert_identical(model, before)


def test_tokenizer_not_mutated(model: LlamaForCausalLM) -> None:
    for t in (make_tokenizer(pad=False), make_tokenizer(pad=True)):
        state = (t.padding_side, t.pad_token, t.pad_token_id, t.truncation_side, len(t))
        evaluate(
            model,
            t,
            [MathTask("m", PROBLEMS[:3], max_new_tokens=4), GeneralTask("g", TEXTS[:3])],
            edit=ReversibleEdit(model, random_mask(model), 0.0),
            batch_size=2,
            progress=False,
        )
        assert (t.padding_side, t.pad_token, t.pad_token_id, t.truncation_side, len(t)) == state


# ----------------------------------------------------------------------------------------- results and errors


def test_results_dict_json_markdown(model: LlamaForCausalLM, tok: PreTrainedTokenizerFast, tmp_path) -> None:  # type: ignore[no-untyped-def]
    tasks = [MathTask("m", PROBLEMS[:2], max_new_tokens=4), GeneralTask("g", TEXTS)]
    res = evaluate(model, tok, tasks, edit=ReversibleEdit(model, random_mask(model), 0.0), progress=False)
    d = res.to_dict()
    assert set(d) == {"m", "g"} and set(d["m"]) == {"base", "edited", "comparison"}
    assert set(d["m"]["base"]) == {"math_accuracy", "math_correct", "math_total", "math_ci95_low", "math_ci95_high"}
    assert d["m"]["base"]["math_total"] == 2
    assert set(d["m"]["comparison"]) == {
        "test",
        "accuracy_change",
        "base_only",
        "edited_only",
        "mcnemar_p",
        "significant",
    }
    assert set(d["g"]["edited"]) == {
        "general_loss",
        "general_loss_se",
        "general_perplexity",
        "general_kl",
        "general_texts",
    }
    assert d["g"]["base"]["general_kl"] == 0.0 and d["g"]["edited"]["general_kl"] > 0
    assert d["g"]["base"]["general_texts"] == 4  # "x" is one token: nothing to predict, not a text of the SE
    assert d["g"]["comparison"]["loss_change"] == pytest.approx(
        d["g"]["edited"]["general_loss"] - d["g"]["base"]["general_loss"]
    )
    path = res.save_json(tmp_path)
    saved = json.loads(path.read_text())
    assert path == tmp_path / "eval.json" and saved == res.to_dict(predictions=True)
    assert [p.name for p in tmp_path.iterdir()] == ["eval.json"]  # no temp file left
    rows = saved["m"]["edited"]["predictions"]
    assert len(rows) == 2 and list(rows[0]) == ["question", "gold", "prefill", "completion", "extracted", "correct"]
    assert rows[0]["question"] == PROBLEMS[0]["question"] and rows[0]["gold"] == 5
    assert json.loads(res.save_json(tmp_path / "small.json", predictions=False).read_text()) == d
    md = res.to_markdown().splitlines()
    assert md[0] == "| task | metric | base | edited | change |"
    assert [r.split(" | ")[1] for r in md[2:]] == [
        "math accuracy",
        "general loss (± SE)",
        "general perplexity",
        "general KL to base",
    ]
    acc = md[2].split(" | ")
    assert acc[2].endswith(
        f"/2, {100 * d['m']['base']['math_ci95_low']:.1f}-{100 * d['m']['base']['math_ci95_high']:.1f})"
    )
    assert " pp, p = " in acc[4] and "significant" in acc[4]
    assert " ± " in md[3].split(" | ")[2] and " ± " in md[3].split(" | ")[4]
    only = evaluate(model, tok, tasks[1:], progress=False)
    assert only.edited == {} and set(only.to_dict()["g"]) == {"base"}
    assert only.to_markdown().splitlines()[0] == "| task | metric | value |"
    assert EvalResults({"x": MathResult(0, 1)}).to_dict()["x"]["base"]["math_accuracy"] == 0.0


def test_bad_inputs(model: LlamaForCausalLM, tok: PreTrainedTokenizerFast) -> None:
    with pytest.raises(InputError, match="#### <integer>"):
        MathTask("m", [{"question": "q", "answer": "five"}])
    with pytest.raises(InputError, match="n_shot"):
        MathTask("m", PROBLEMS, n_shot=2)
    with pytest.raises(InputError, match="texts"):
        GeneralTask("g", "one string")
    with pytest.raises(InputError, match="used twice"):
        evaluate(model, tok, [GeneralTask("g", TEXTS), GeneralTask("g", TEXTS)], progress=False)
    with pytest.raises(InputError, match="batch_size"):
        evaluate(model, tok, [GeneralTask("g", TEXTS)], batch_size=0)
    with pytest.raises(InputError, match="shorter than 2 tokens"):
        general_loss(model, tok, ["x"], progress=False)


# -------------------------------------------------------------------------------------------------------- lm-eval


def test_lm_eval_missing_is_clear(model: LlamaForCausalLM, tok: PreTrainedTokenizerFast, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setitem(sys.modules, "lm_eval", None)  # import fails even where lm-eval is installed
    calls = []
    handle = model.model.norm.register_forward_hook(lambda *a: calls.append(1))
    try:
        with pytest.raises(InputError) as err:
            evaluate(model, tok, [GeneralTask("g", TEXTS), LmEvalTask("harness", ["gsm8k_cot"])], progress=False)
    finally:
        handle.remove()
    msg = str(err.value)
    assert "pip install 'lm-eval>=0.4.13,<0.5'" in msg and "harness" in msg and "\n" not in msg
    assert calls == []  # failed before any other task ran


# The bridge with the real harness: tests/evaluation/test_lm_eval.py (base, edited, cached base, agreement with the built-in).
