"""The sweep's generation engine (shared prompt prefix encoded once) gives the predictions of ``generate``."""

from __future__ import annotations

import pytest
import torch

from mathneuro_edit.data.arithmetic import arithmetic_problems
from mathneuro_edit.evaluation.greedy import greedy_completions, math_outcomes, shared_prefix_length
from mathneuro_edit.evaluation.prompts import encode_prompts
from mathneuro_edit.evaluation.runner import _run_math
from mathneuro_edit.evaluation.runtime import eval_mode, special_ids
from mathneuro_edit.evaluation.tasks import MathTask
from tests._tiny import build


def reference(model, tok, problems, shots, chat, max_new):
    """What the evaluation of a release computes: transformers' generate, left-padded batches."""
    task = MathTask("m", problems, n_shot=len(shots), shots=shots, max_new_tokens=max_new, chat_template=chat)
    with eval_mode(model):
        res = _run_math(model, tok, task, 16, False, "ref")
    return [p.correct for p in res.predictions], [p.completion for p in res.predictions]


def test_shared_prefix_leaves_every_row_a_token_of_its_own():
    assert shared_prefix_length([[1, 2, 3], [1, 2, 3, 4]]) == 2
    assert shared_prefix_length([[5, 6], [7, 8]]) == 0
    assert shared_prefix_length([[1, 2, 3]]) == 2
    assert shared_prefix_length([]) == 0


@pytest.mark.parametrize("family", ["llama", "qwen2", "gemma2"])
def test_shared_prefix_generation_equals_generate_on_tiny_models(family):
    model, tok = build(family, seed=3)
    problems = arithmetic_problems(24, seed=1)
    shots = arithmetic_problems(3, seed=2)  # a long shared prefix: the worked examples
    want = reference(model, tok, problems, shots, False, 6)
    got = math_outcomes(model, tok, problems, shots=shots, chat_template=False, max_new_tokens=6, batch_size=7)
    assert got == want
    assert any(len(c) > 0 for c in got[1])  # the random model writes something: the comparison is not vacuous


def test_batch_size_and_order_do_not_change_a_completion():
    model, tok = build("llama", seed=5)
    problems = arithmetic_problems(10, seed=4)
    rows = encode_prompts(tok, problems, [], False)
    pad, eos = special_ids(model, tok)
    with eval_mode(model):
        one = greedy_completions(model, tok, rows, [None] * 10, max_new_tokens=5, pad_id=pad, eos_ids=eos, batch_size=1)
        many = greedy_completions(
            model, tok, rows, [None] * 10, max_new_tokens=5, pad_id=pad, eos_ids=eos, batch_size=10
        )
    assert one == many


def test_a_model_with_no_shared_prefix_still_generates():
    model, tok = build("llama", seed=6)
    rows = [[1, 5, 6], [2, 7]]  # nothing in common: no prefix cache
    pad, eos = special_ids(model, tok)
    with eval_mode(model):
        out = greedy_completions(model, tok, rows, [None, None], max_new_tokens=3, pad_id=pad, eos_ids=eos)
        ref = []
        for r in rows:
            ids = torch.tensor([r])
            gen = model.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                do_sample=False,
                max_new_tokens=3,
                pad_token_id=pad,
                eos_token_id=eos,
            )
            new = [t for t in gen[0, len(r) :].tolist()]
            cut = next((k for k, t in enumerate(new) if t in eos), len(new))
            ref.append(tok.decode(new[:cut], skip_special_tokens=True))
    assert out == ref
