"""`plan` covers the evaluation, each per-command memory figure is its documented formula, and the evaluation batches
itself to fit the device (issue 40, item 5).

- Every figure of ``plan.ram`` (and the two evaluation figures on one device) is recomputed here from the formulas
  written in runs/plan_memory.py, runs/plan.py and evaluation/memory.py, from the config's numbers (Llama-3.1-8B's
  shapes), and must be equal to the byte.
- The evaluation lowers its batch to what fits the device's free memory (the budget is set by hand here: the CPU
  has none) and its results do not depend on that: the same answers, the same losses to float rounding.
- An 8B evaluation with the issue's batch of 64 on a device where calibration fits gets a batch that fits.
"""

from __future__ import annotations

import math

import pytest
import torch

import mathneuro_edit.evaluation.memory as memory
import mathneuro_edit.evaluation.runner as runner
from mathneuro_edit.engine.mask import k_of
from mathneuro_edit.evaluation.memory import fit_batch, general_batch_bytes, shapes_of
from mathneuro_edit.evaluation.runner import evaluate
from mathneuro_edit.evaluation.tasks import GeneralTask, MathTask
from mathneuro_edit.runs.plan import PROMPT_TOKENS, PlanSettings, plan_from_config
from mathneuro_edit.runs.plan_memory import (
    BLOCKS_HELD,
    RUNTIME_BYTES,
    SELECTED_ENTRY_BYTES,
    STORED_ENTRY_BYTES,
)
from mathneuro_edit.weights.edit_plan import ROW_BLOCK_BYTES
from tests._tiny import GENERAL, arithmetic_problems, build

# Llama-3.1-8B's shapes
V, H, W, L, HEADS, KV, D = 128256, 4096, 14336, 32, 32, 8, 128
CFG = dict(
    model_type="llama",
    vocab_size=V,
    hidden_size=H,
    intermediate_size=W,
    num_hidden_layers=L,
    num_attention_heads=HEADS,
    num_key_value_heads=KV,
    tie_word_embeddings=False,
)
b, B, T, TOP_K = 2, 8, 512, 0.05  # bfloat16, calibration batch and tokens
EVAL = {"batch_size": 16, "max_length": 512, "prompt_tokens": PROMPT_TOKENS * 3, "max_new_tokens": 256}


def test_every_per_command_figure_is_its_documented_formula() -> None:
    plan = plan_from_config(
        CFG, PlanSettings(dtype="bfloat16", top_k=TOP_K, batch_size=B, max_length=T, evaluation=EVAL)
    )
    n = plan.n_params  # exact (tests/runs/test_scaling.py counts an instantiated model)
    weights = n * b
    # calibration: B T (4H + 3W) b + B h T^2 b + 2 B T W 4 (activations), + weights + statistics of every set
    activation = B * T * (4 * H + 3 * W) * b + B * HEADS * T**2 * b + 2 * B * T * W * 4
    assert plan.activation_bytes == activation
    stats = 2 * plan.stats_bytes  # math + one general set
    assert plan.calibration_peak_bytes == weights + activation + plan.stats_bytes
    largest = V * H  # lm_head
    assert plan.largest_target == ("lm_head.weight", largest)
    mask = plan.mask_bytes
    mask_peak = largest * (b + 3 * 4 + 2) + mask + stats
    export_peak = largest * (2 * b + 1) + mask
    assert (plan.mask_peak_bytes, plan.export_peak_bytes) == (mask_peak, export_peak)
    gguf = largest * (b + 4) + mask
    blocks = BLOCKS_HELD * ROW_BLOCK_BYTES
    adapter = mask + largest + k_of(TOP_K, largest) * SELECTED_ENTRY_BYTES + blocks
    verify = mask + largest + blocks
    stored = plan.adapter_r * (V + H)
    # evaluation (evaluation/memory.py): general 2 B T V b + 4 T V 4 + activations; math: KV cache + prompt + logits
    eb, et, p, new = EVAL["batch_size"], EVAL["max_length"], EVAL["prompt_tokens"], EVAL["max_new_tokens"]
    general = 2 * eb * et * V * b + 4 * et * V * 4 + eb * et * (4 * H + 3 * W) * b + eb * HEADS * et**2 * b
    generation = eb * (p + new) * 2 * L * KV * D * b + eb * p * (4 * H + 3 * W) * b + eb * HEADS * p**2 * b
    generation += 2 * eb * V * 4
    assert (plan.eval_general_bytes, plan.eval_math_bytes) == (weights + general, weights + generation)
    calibrate = RUNTIME_BYTES + weights + activation + stats
    evaluation = RUNTIME_BYTES + weights + max(general, generation)
    assert plan.ram == {
        "calibrate": calibrate,
        "mask": RUNTIME_BYTES + mask_peak,
        "export": RUNTIME_BYTES + export_peak,
        "export --gguf": RUNTIME_BYTES + max(export_peak, gguf),
        "export --adapter": RUNTIME_BYTES + adapter,
        "verify": RUNTIME_BYTES + max(verify, gguf),
        "verify (adapter)": RUNTIME_BYTES + verify + stored * STORED_ENTRY_BYTES,
        "reproduce": max(calibrate, RUNTIME_BYTES + weights + mask_peak, RUNTIME_BYTES + adapter, evaluation),
        "eval": evaluation,
    }
    text = plan.to_text()
    assert "evaluation (batch 16): general loss and KL over full next-token distributions (512 tokens)" in text
    assert "math generation with the KV cache (<= 768 prompt + 256 new tokens)" in text
    # without evaluation settings: no eval figure, reproduce as before
    plain = plan_from_config(CFG, PlanSettings(dtype="bfloat16", top_k=TOP_K, batch_size=B, max_length=T))
    assert "eval" not in plain.ram and plain.eval_general_bytes == 0 and "evaluation (" not in plain.to_text()


def test_an_8b_evaluation_fits_where_calibration_fits() -> None:
    """The issue's batch of 64 on a 40 GB device: calibration fits (plan), the evaluation's batch is lowered to one
    whose bytes fit what the weights leave free, and one more row would not."""
    plan = plan_from_config(CFG, PlanSettings(dtype="bfloat16", batch_size=B, max_length=T))
    device = 40e9
    assert plan.calibration_peak_bytes < device
    budget = int(memory.BUDGET_SHARE * (device - plan.weights_bytes))
    shapes = shapes_of(plan_config(), b)
    asked = 64
    assert general_batch_bytes(shapes, asked, T) > budget  # as asked, the two logits alone are 16.8 GB
    got = fit_batch(asked, lambda n: general_batch_bytes(shapes, n, T), budget)
    assert 1 <= got < asked
    assert general_batch_bytes(shapes, got, T) <= budget < general_batch_bytes(shapes, got + 1, T)


def plan_config():
    from transformers import LlamaConfig

    return LlamaConfig(**{k: v for k, v in CFG.items() if k != "model_type"})


def _tasks() -> list:
    problems = [{k: p[k] for k in ("question", "answer")} for p in arithmetic_problems(6)]
    return [MathTask("math", problems, max_new_tokens=8), GeneralTask("general", GENERAL[:7], max_length=48)]


def test_the_evaluation_lowers_its_batch_to_the_budget_with_the_same_results(monkeypatch) -> None:
    model, tok = build("llama")
    batches: list[int] = []
    real = runner.batch_ranges

    def spy(n: int, batch_size: int, desc: str, progress: bool):
        batches.append(batch_size)
        return real(n, batch_size, desc, progress)

    monkeypatch.setattr(runner, "batch_ranges", spy)
    asked = evaluate(model, tok, _tasks(), batch_size=8, progress=False)
    assert batches == [8, 8]  # the CPU: no budget, the batch as asked
    shapes = memory.model_shapes(model)
    longest_text = max(len(r) for r in (ids[:48] for ids in tok(list(GENERAL[:7]))["input_ids"]))
    budget = general_batch_bytes(shapes, 2, longest_text)  # two general rows fit, three do not
    monkeypatch.setattr(memory, "device_budget", lambda device: budget)
    batches.clear()
    fitted = evaluate(model, tok, _tasks(), batch_size=8, progress=False)
    math_batch, general_batch = batches
    assert general_batch == 2 and 1 <= math_batch < 8, batches
    assert [p.extracted for p in fitted.base["math"].predictions] == [
        p.extracted for p in asked.base["math"].predictions
    ]
    assert math.isclose(fitted.base["general"].loss, asked.base["general"].loss, rel_tol=1e-5)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU, which has no budget")
def test_the_cpu_has_no_budget() -> None:
    assert memory.device_budget(torch.device("cpu")) is None
