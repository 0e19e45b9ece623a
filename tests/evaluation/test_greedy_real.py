"""The sweep's engine on the two real models (the real tier): the shared-prefix generation gives the predictions
of ``generate`` (SmolLM2-135M-Instruct with its chat template, Gemma 3 270M with 4-shot equation prompts), and
Gemma's 262,144-token vocabulary goes through the bounded-support KL."""

from __future__ import annotations

import pytest
import torch

from mathneuro_edit.data.arithmetic import POOL_SIZE, arithmetic_problems
from mathneuro_edit.engine.apply import ReversibleEdit
from mathneuro_edit.engine.calibration import calibrate
from mathneuro_edit.engine.mask import find_math_params
from mathneuro_edit.evaluation.general_kl import base_support, edited_general
from mathneuro_edit.evaluation.greedy import math_outcomes
from mathneuro_edit.evaluation.runner import _run_math
from mathneuro_edit.evaluation.runtime import eval_mode
from mathneuro_edit.evaluation.tasks import MathTask
from mathneuro_edit.weights.loading import load_model, model_weights

pytestmark = [pytest.mark.real, pytest.mark.slow]

POOL = arithmetic_problems(POOL_SIZE, seed=0)
SHOTS, PROBLEMS = POOL[9_996:10_000], POOL[10_000:10_040]  # apart from every sweep's problems


def same_predictions(model, tok, shots, chat, style, problems=PROBLEMS):
    task = MathTask(
        "m", problems, n_shot=len(shots), shots=shots, max_new_tokens=8, chat_template=chat, prompt_style=style
    )
    with eval_mode(model):
        ref = _run_math(model, tok, task, 16, False, "ref")
    correct, completions = math_outcomes(
        model, tok, problems, shots=shots, chat_template=chat, prompt_style=style, max_new_tokens=8, batch_size=64
    )
    assert completions == [p.completion for p in ref.predictions]
    assert correct == [p.correct for p in ref.predictions]
    return ref


def test_smollm2_shared_prefix_generation_equals_generate(smollm2):
    model, tok = load_model(str(smollm2), dtype="float32")
    ref = same_predictions(model, tok, [], "auto", "question-answer")
    assert 0 < ref.correct < len(PROBLEMS)  # a real model: some right, some wrong


def test_gemma3_base_shared_prefix_generation_equals_generate_and_kl_is_bounded(gemma3):
    model, tok = load_model(str(gemma3), dtype="float32")
    assert model.config.vocab_size == 262_144 and not getattr(tok, "chat_template", None)
    same_predictions(model, tok, SHOTS, False, "equations", PROBLEMS[:16])  # 262k vocabulary: fewer (CI time)
    texts = [
        "The river runs through the old town, past the mill and the church.",
        "In 1900 the railway reached the valley, and the village grew quickly.",
    ]
    stats = calibrate(model, tok, [p["answer"] for p in POOL[-4:]], max_length=32, progress=False)
    general = calibrate(model, tok, texts, max_length=32, progress=False)
    mask = find_math_params(model_weights(model), stats, general, top_k=0.01)
    support = base_support(model, tok, texts, max_length=32, k=64)
    # bounded: k tokens per position, whatever the vocabulary (the full distributions would be 262,144 each)
    assert all(t.shape[1] == 64 for t in support.top_ids)
    with torch.no_grad(), ReversibleEdit(model, mask, 2.0):
        g = edited_general(model, support)
    assert g.kl > 0 and 0 <= g.tail_mass < 1
