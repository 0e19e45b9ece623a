"""The GPU's calibration hooks, run on the CPU (issue 40, item 4).

On a GPU each dense input is reduced in one kernel to per-sample L2 norms (``recorder.FUSED_DEVICE_TYPES``); on
the CPU the exact three-step reduction stays, bit for bit (the golden hashes of this folder). Adding ``"cpu"`` to
the fused device types runs the GPU's code path here, so that:

- its statistics equal the exact path's and an independent batch-size-1 float64 reference to float32 rounding,
  with padded batches, batch sizes 1, 3 and 8, a float32 and a bf16 model, a module run twice per forward and call
  layouts beyond those kept flat; token counts are equal; the masks they select are equal;
- its hooks do less work per layer and batch than the exact path (fewer tensor operations: fewer, larger kernels);
- the CPU default is untouched: without the switch, the statistics are the exact path's bit for bit.
"""

from __future__ import annotations

import pytest
import torch

import mathneuro_edit.engine.recorder as recorder
from mathneuro_edit import calibrate, find_math_params
from tests._tiny import GENERAL, MATH, build, char_tokenizer
from tests.engine.test_calibration_speed import (
    _CountOps,
    _llama,
    _Reused,
    assert_matches_reference,
    reference_stats,
)

TEXTS = MATH[:6] + GENERAL[:5]  # different lengths: padded batches


def _gpu_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recorder, "FUSED_DEVICE_TYPES", ("cpu", "cuda"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("batch_size", [1, 3, 8])
def test_the_gpu_path_equals_the_exact_path_to_float32_rounding(monkeypatch, dtype, batch_size):
    model, tok = build("llama", dtype=dtype)
    exact = calibrate(model, tok, TEXTS, batch_size=batch_size, progress=False)
    with monkeypatch.context() as m:
        _gpu_path(m)
        fused = calibrate(model, tok, TEXTS, batch_size=batch_size, progress=False)
    assert set(fused.norm_sum) == set(exact.norm_sum)
    for n in exact.norm_sum:
        torch.testing.assert_close(fused.norm_sum[n], exact.norm_sum[n], rtol=2e-6, atol=1e-6, msg=n)
        torch.testing.assert_close(fused.sq_sum[n], exact.sq_sum[n], rtol=2e-6, atol=1e-6, msg=n)
        assert torch.equal(fused.token_count[n], exact.token_count[n]), n
    assert fused.meta == exact.meta  # the same samples, tokens, fingerprints: only float sums may differ


def test_the_gpu_path_matches_the_float64_reference_and_selects_the_same_mask(monkeypatch):
    model, tok = build("llama")
    math_exact = calibrate(model, tok, MATH, batch_size=4, progress=False)
    general_exact = calibrate(model, tok, GENERAL, batch_size=4, progress=False)
    _gpu_path(monkeypatch)
    math_fused = calibrate(model, tok, MATH, batch_size=4, progress=False)
    general_fused = calibrate(model, tok, GENERAL, batch_size=4, progress=False)
    assert_matches_reference(math_fused, reference_stats(model, tok, MATH))
    for top_k in (0.05, 0.2):
        a = find_math_params(model, math_exact, general_exact, top_k=top_k)
        b = find_math_params(model, math_fused, general_fused, top_k=top_k)
        assert a.sha256 == b.sha256, top_k


@pytest.mark.parametrize("max_layouts", [8, 1])  # 1: a second layout goes straight to the targets
def test_the_gpu_path_with_a_reused_module_and_varying_layouts(monkeypatch, max_layouts):
    tok = char_tokenizer()
    model = _Reused(len(tok), tok.convert_tokens_to_ids("Z")).eval()
    monkeypatch.setattr(recorder, "_MAX_LAYOUTS", max_layouts)
    _gpu_path(monkeypatch)
    texts = ["abcdefgh", "Zab", "hello world", "xyZ", "abc", "Z"]
    stats = calibrate(model, tok, texts, batch_size=1, progress=False)
    assert_matches_reference(stats, reference_stats(model, tok, texts))
    plain = [t for t in texts if "Z" not in t] + ["a much longer text without it", "b"]
    stats = calibrate(model, tok, plain, batch_size=2, progress=False)  # padded batches
    assert_matches_reference(stats, reference_stats(model, tok, plain))


def test_the_gpu_path_runs_fewer_operations_per_layer_and_batch(monkeypatch):
    """The count of tests/engine/test_calibration_speed.py: what calibrate adds to one layer's forward, per batch.
    The exact path: a float32 copy, a square and a bmm per distinct input (12 on a Llama layer); the GPU's: one
    norm per distinct input (4), each reading the input once in its own dtype."""
    tok = char_tokenizer()
    text = "abcdefghij"  # one length: no padding
    ids = torch.tensor([tok(text)["input_ids"]] * 2)

    def per_layer(calibrating: bool) -> float:
        counts = {}
        for layers in (1, 3):
            model = _llama(layers)
            if not calibrating:
                with _CountOps() as fwd, torch.no_grad():
                    model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False)
                counts[layers] = fwd.n
                continue
            per = []
            for batches in (2, 4):  # the difference: per-batch work only
                with _CountOps() as cal:
                    calibrate(model, tok, [text] * (2 * batches), batch_size=2, progress=False)
                per.append(cal.n)
            counts[layers] = (per[1] - per[0]) / 2
        return (counts[3] - counts[1]) / 2

    forward = per_layer(False)
    exact = per_layer(True) - forward
    _gpu_path(monkeypatch)
    fused = per_layer(True) - forward
    assert fused <= 4, fused  # 4 distinct inputs per Llama layer (q/k/v and gate/up share theirs): one each
    assert exact >= 3 * fused, (exact, fused)


def test_the_cpu_default_is_the_exact_path():
    assert "cpu" not in recorder.FUSED_DEVICE_TYPES
    model, tok = build("llama")
    a = calibrate(model, tok, TEXTS, batch_size=3, progress=False)
    b = calibrate(model, tok, TEXTS, batch_size=3, progress=False)
    assert a.sha256 == b.sha256
