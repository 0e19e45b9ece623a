"""`ActivationStats.merge` (public API: data-parallel ranks, or two calibration runs over disjoint texts) gives the
statistics of calibrating on all the texts at once: every sum, every token count and the sample counts."""

from __future__ import annotations

import torch

from mathneuro_edit import calibrate
from tests._tiny import MATH, build, char_tokenizer


def test_merging_two_halves_equals_calibrating_on_all_texts() -> None:
    model, _ = build("llama")
    tok = char_tokenizer()
    half = len(MATH) // 2
    kwargs = dict(max_length=64, batch_size=1, progress=False)
    first, second = calibrate(model, tok, MATH[:half], **kwargs), calibrate(model, tok, MATH[half:], **kwargs)
    whole = calibrate(model, tok, MATH, **kwargs)
    merged = first.merge(second)
    assert set(merged.targets) == set(whole.targets)
    for key in ("num_samples", "num_tokens", "truncated_samples"):
        assert merged.meta[key] == whole.meta[key] == first.meta[key] + second.meta[key], key
    assert merged.meta["num_tokens"] > 0
    for name in whole.targets:
        assert torch.equal(merged.token_count[name], whole.token_count[name]), name  # what the scores divide by
        assert int(whole.token_count[name].min()) > 0, name
        torch.testing.assert_close(merged.norm_sum[name], whole.norm_sum[name], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(merged.sq_sum[name], whole.sq_sum[name], rtol=1e-5, atol=1e-6)
    assert merged.meta["texts_sha256"] == [first.meta.get("texts_sha256"), second.meta.get("texts_sha256")]
