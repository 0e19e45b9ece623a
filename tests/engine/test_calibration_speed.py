"""Calibration's hooks stay cheap and exact: no timing here, only what the speed rests on.

- the hooks' work per batch grows by a few tensor operations per distinct scored input, not per target (the cost
  that made calibration slower than a plain forward on narrow, deep models such as SmolLM2-135M);
- the batched, flat accumulation equals an independent batch-size-1 float64 reference, also when a module runs
  twice per forward, when the set of modules that run varies between batches (beyond the layouts kept flat),
  and for a bf16 model (whose float32 copy of each input is squared in place: the model's own activations
  must not change).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import LlamaConfig, LlamaForCausalLM

import mathneuro_edit.engine.recorder as recorder
from mathneuro_edit import calibrate
from tests._tiny import MATH, VOCAB, build, char_tokenizer


def reference_stats(model: nn.Module, tokenizer, texts: list[str]) -> tuple[dict, dict, dict]:
    """Batch size 1, float64, every ``nn.Linear`` (lm_head included): per-sample L2 norms, squares, tokens."""
    norm: dict[str, torch.Tensor] = {}
    sq: dict[str, torch.Tensor] = {}
    count: dict[str, int] = {}

    def hook(module, args, name):
        x = args[0].reshape(-1, args[0].shape[-1]).double()  # (tokens, d_in) of ONE sample
        norm[name] = norm.get(name, 0) + x.pow(2).sum(0).sqrt()
        sq[name] = sq.get(name, 0) + x.pow(2).sum(0)
        count[name] = count.get(name, 0) + x.shape[0]

    handles = [
        m.register_forward_pre_hook(lambda m, a, n=f"{n}.weight": hook(m, a, n))
        for n, m in model.named_modules()
        if isinstance(m, nn.Linear)
    ]
    try:
        with torch.no_grad():
            for text in texts:
                model(input_ids=torch.tensor([tokenizer(text)["input_ids"]]), use_cache=False)
    finally:
        for h in handles:
            h.remove()
    return norm, sq, count


def assert_matches_reference(stats, ref, rtol=1e-5, atol=1e-6):
    norm, sq, count = ref
    assert set(norm) <= set(stats.norm_sum)
    for n in set(stats.norm_sum) - set(norm):  # a scored module that never ran: zero statistics
        assert not stats.norm_sum[n].any() and not stats.sq_sum[n].any() and not stats.token_count[n].any(), n
    for n in norm:
        torch.testing.assert_close(stats.norm_sum[n][0], norm[n].float(), rtol=rtol, atol=atol, msg=n)
        torch.testing.assert_close(stats.sq_sum[n][0], sq[n].float(), rtol=rtol, atol=atol, msg=n)
        assert int(stats.token_count[n][0]) == count[n], n


class _CountOps(TorchDispatchMode):
    """Counts the aten operations run inside the block."""

    def __init__(self) -> None:
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.n += 1
        return func(*args, **(kwargs or {}))


def _llama(layers: int) -> LlamaForCausalLM:
    cfg = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=False,
        pad_token_id=None,
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg).eval()


def test_hook_work_per_layer_and_batch_is_a_few_operations_per_distinct_input():
    tok = char_tokenizer()
    text = "abcdefghij"  # one length: no padding, every batch of the plain forward's shape
    ids = torch.tensor([tok(text)["input_ids"]] * 2)  # (2, tokens): one batch

    def per_batch(layers: int) -> tuple[float, int]:
        """Operations of one more calibration batch, and of one plain forward of that batch."""
        model = _llama(layers)
        counts = []
        for batches in (2, 4):  # the difference: per-batch work only (setup and the final sums cancel)
            with _CountOps() as cal:
                calibrate(model, tok, [text] * (2 * batches), batch_size=2, progress=False)
            counts.append(cal.n)
        with _CountOps() as fwd, torch.no_grad():
            model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False)
        return (counts[1] - counts[0]) / 2, fwd.n

    (cal1, fwd1), (cal3, fwd3) = per_batch(1), per_batch(3)
    extra_per_layer = ((cal3 - cal1) - (fwd3 - fwd1)) / 2  # what calibrate adds to each layer's forward, per batch
    # 7 targets per Llama layer read 4 distinct inputs (q/k/v share one, gate/up share one): square and bmm per
    # input, the batch's flat sums at its end; reductions per target and batch (the former code: 153 operations
    # per layer and batch) do not fit
    assert extra_per_layer <= 4 * 4, extra_per_layer


def test_bf16_model_statistics_match_reference_and_activations_are_untouched():
    model, tok = build("llama", dtype=torch.bfloat16)
    ids = torch.tensor([tok(MATH[0])["input_ids"]])
    with torch.no_grad():
        before = model(input_ids=ids).logits
    # batch size 1: the bf16 matmuls see the reference's shapes, so both see the same bf16 activations; a hook
    # that squared a module's input in place would change every later activation, and the statistics with them
    stats = calibrate(model, tok, MATH, batch_size=1, progress=False)
    assert_matches_reference(stats, reference_stats(model, tok, MATH))
    with torch.no_grad():
        assert torch.equal(model(input_ids=ids).logits, before)


class _Reused(nn.Module):
    """A toy causal LM applying one Linear twice per forward, and a branch that runs only for the token 'Z'."""

    def __init__(self, vocab: int, z_id: int, d: int = 8) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(vocab, d)
        self.shared = nn.Linear(d, d)
        self.q, self.k = nn.Linear(d, d), nn.Linear(d, d)  # one input, two readers
        self.rare = nn.Linear(d, d)
        self.lm_head = nn.Linear(d, vocab)
        self.z_id = z_id

    def get_input_embeddings(self):
        return self.embed

    def get_output_embeddings(self):
        return self.lm_head

    def forward(self, input_ids, attention_mask=None, use_cache=None):
        h = self.embed(input_ids)  # (batch, tokens, d)
        h = torch.tanh(self.shared(h))
        h = h + self.q(h) * self.k(h)
        if (input_ids == self.z_id).any():  # a different set of scored calls in batches with a 'Z'
            h = h + self.rare(h)
        h = torch.tanh(self.shared(h))  # the same module again: its target is fed twice per forward
        return self.lm_head(h)


@pytest.mark.parametrize("max_layouts", [8, 1])  # 1: a second layout goes straight to the targets
def test_reused_module_and_varying_call_layouts_match_reference(monkeypatch, max_layouts):
    tok = char_tokenizer()
    model = _Reused(len(tok), tok.convert_tokens_to_ids("Z")).eval()
    monkeypatch.setattr(recorder, "_MAX_LAYOUTS", max_layouts)
    # batch size 1 (the branch depends on the whole batch): texts with a 'Z' run one more scored module
    texts = ["abcdefgh", "Zab", "hello world", "xyZ", "abc", "Z"]
    stats = calibrate(model, tok, texts, batch_size=1, progress=False)
    assert_matches_reference(stats, reference_stats(model, tok, texts))
    n_tokens = stats.meta["num_tokens"]
    assert int(stats.token_count["shared.weight"][0]) == 2 * n_tokens  # twice per forward
    assert int(stats.token_count["q.weight"][0]) == int(stats.token_count["k.weight"][0]) == n_tokens
    assert torch.equal(stats.norm_sum["q.weight"], stats.norm_sum["k.weight"])  # one input, one computation
    # padded batches (one layout): padding counts nowhere, also in a module run twice
    plain = [t for t in texts if "Z" not in t] + ["a much longer text without it", "b"]
    stats = calibrate(model, tok, plain, batch_size=2, progress=False)
    assert_matches_reference(stats, reference_stats(model, tok, plain))
