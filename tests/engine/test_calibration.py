"""Calibration and its statistics: gpt-oss experts (transposed weights with biases, called positionally or by
keyword) against a per-text reference, the tied lm_head option, a target no token reaches, a tokenizer without pad
and eos tokens, calibrate's defaults, bounds and truncation count, the recorded meta (exact keys, dtype, public
model name, local paths hidden), the texts fingerprint of non-ASCII text, the statistics file round trip and the
disk-full message of ActivationStats.save."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import torch

from mathneuro_edit import InputError, calibrate
from mathneuro_edit.engine.calibration import _public_name
from mathneuro_edit.util.hashing import texts_sha256
from tests._faults import fill_disk
from tests._tiny import MATH, build


def test_texts_fingerprint_is_the_sha256_of_the_utf8_json_list() -> None:
    # written out by hand: the JSON text of the list, non-ASCII characters as themselves (not \\u escapes)
    assert texts_sha256(["café", "1 + 1 = 2"]) == hashlib.sha256('["café", "1 + 1 = 2"]'.encode()).hexdigest()
    assert texts_sha256(["a", "b"]) != texts_sha256(["b", "a"])


@pytest.mark.parametrize(
    "name, public",
    [
        ("", ""),
        ("HuggingFaceTB/SmolLM2-135M-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct"),
        ("./models/mine", "<local>"),
        ("~/models/mine", "<local>"),
        ("/abs/path/model", "<local>"),
    ],
)
def test_public_model_name_hides_local_paths(name: str, public: str) -> None:
    from mathneuro_edit.util.paths import LOCAL

    assert LOCAL == "<local>"
    assert _public_name(name) == public


def test_calibrate_passes_include_tied_lm_head_through() -> None:
    model, tok = build("gemma2")  # tied lm_head
    texts = MATH[:3]
    plain = calibrate(model, tok, texts, progress=False)
    assert "lm_head.weight" not in plain.targets
    stats = calibrate(model, tok, texts, progress=False, include_tied_lm_head=True)
    assert "lm_head.weight" in stats.targets
    # reference: the lm_head's input, one text at a time: sum over texts of each feature's L2 norm over tokens
    ref = torch.zeros(model.lm_head.weight.shape[1], dtype=torch.float64)
    seen: list[torch.Tensor] = []
    handle = model.lm_head.register_forward_pre_hook(lambda m, args: seen.append(args[0].detach()))
    try:
        with torch.no_grad():
            for t in texts:
                model(input_ids=torch.tensor([tok(t)["input_ids"]]), use_cache=False)
                ref += seen.pop()[0].double().pow(2).sum(0).sqrt()
    finally:
        handle.remove()
    assert torch.allclose(stats.norm_sum["lm_head.weight"][0].double(), ref, rtol=1e-4, atol=1e-5)
    # the other targets are the same with or without the head
    for name in plain.targets:
        assert torch.equal(stats.norm_sum[name], plain.norm_sum[name]), name


def test_stats_save_on_a_full_disk_names_the_file_and_the_bytes_it_needs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, tok = build("llama")
    stats = calibrate(model, tok, MATH[:2], progress=False)
    needed = sum(
        stats.norm_sum[n].numel() * 4 + stats.sq_sum[n].numel() * 4 + stats.token_count[n].numel() * 8
        for n in stats.norm_sum
    )  # float32, float32, int64
    # make it need more than 1 MB, so the message's number tells the sizes apart
    big = 3 * 10**6 // 4
    stats.norm_sum["pad"], stats.sq_sum["pad"] = torch.zeros(1, big), torch.zeros(1, big)
    stats.token_count["pad"] = torch.zeros(1, dtype=torch.int64)
    needed += 2 * big * 4 + 8

    fill_disk(monkeypatch)  # the writer Mask.save and ActivationStats.save share
    path = tmp_path / "math.stats.safetensors"
    with pytest.raises(InputError) as err:
        stats.save(path)
    mb = -(-needed // 10**6)
    assert mb >= 7 and str(err.value) == f"no space left on device writing {path}; free {mb} MB or choose another --out"
    assert list(tmp_path.iterdir()) == []


def _gpt_oss():
    import transformers as tf

    from tests._tiny import VOCAB, char_tokenizer

    cfg = tf.GptOssConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        intermediate_size=24,
        num_local_experts=4,
        num_experts_per_tok=2,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=None,
        tie_word_embeddings=False,
        layer_types=["full_attention", "full_attention"],
    )
    torch.manual_seed(0)
    model = tf.AutoModelForCausalLM.from_config(cfg).eval()
    with torch.no_grad():  # biases are zero-initialised: make them count
        for name, p in model.named_parameters():
            if name.endswith("_bias"):
                p.normal_(0, 0.5)
    return model, char_tokenizer()


def test_experts_with_biases_and_transposed_weights_match_a_per_text_reference() -> None:
    """gpt-oss experts: stored (experts, d_in, d_out) ("transposed") with biases; the down_proj input is the
    gated activation of ``x @ W_up[e] + b_up[e]``. Reference: each text alone, its routing read from the model."""
    model, tok = _gpt_oss()
    texts = MATH[:4]
    stats = calibrate(model, tok, texts, batch_size=4, progress=False)
    experts = {n: m for n, m in model.named_modules() if type(m).__name__ == "GptOssExperts"}
    assert len(experts) == 2
    seen: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    handles = [
        m.register_forward_pre_hook(lambda m, args, n=n: seen.__setitem__(n, (args[0], args[1])))
        for n, m in experts.items()
    ]
    ref = {n: (torch.zeros(4, 32, dtype=torch.float64), torch.zeros(4, 24, dtype=torch.float64)) for n in experts}
    try:
        with torch.no_grad():
            for t in texts:
                model(input_ids=torch.tensor([tok(t)["input_ids"]]), use_cache=False)
                for n, m in experts.items():
                    hidden, routed = seen[n]  # (tokens, hidden), (tokens, k)
                    for e in range(4):
                        x = hidden[(routed == e).any(dim=-1)]
                        if len(x) == 0:
                            continue
                        h = m._apply_gate(x @ m.gate_up_proj[e] + m.gate_up_proj_bias[e])  # the model's own gate
                        ref[n][0][e] += x.double().pow(2).sum(0).sqrt()
                        ref[n][1][e] += h.double().pow(2).sum(0).sqrt()
    finally:
        for h in handles:
            h.remove()
    for n in experts:
        assert torch.allclose(stats.norm_sum[f"{n}.gate_up_proj"].double(), ref[n][0], rtol=1e-4, atol=1e-5), n
        assert torch.allclose(stats.norm_sum[f"{n}.down_proj"].double(), ref[n][1], rtol=1e-4, atol=1e-5), n


def test_a_target_no_token_reaches_has_zero_statistics_of_its_shape() -> None:
    from torch import nn

    model, tok = build("llama")
    model.model.extra = nn.Linear(32, 16, bias=False)  # a scored Linear that the forward never calls
    stats = calibrate(model, tok, MATH[:2], progress=False)
    for table in (stats.norm_sum, stats.sq_sum):
        assert table["model.extra.weight"].dtype == torch.float32
        assert torch.equal(table["model.extra.weight"], torch.zeros(1, 32))
    assert torch.equal(stats.token_count["model.extra.weight"], torch.zeros(1, dtype=torch.int64))


def test_meta_records_exact_keys_dtype_and_public_model_name() -> None:
    import transformers

    import mathneuro_edit

    model, tok = build("llama", dtype=torch.bfloat16)
    model.config._name_or_path = "org/tiny-llama"
    texts = MATH[:3]
    stats = calibrate(model, tok, texts, max_length=20, progress=False)
    meta = stats.meta
    assert list(meta) == [
        "num_samples",
        "num_tokens",
        "truncated_samples",
        "max_length",
        "texts_sha256",
        "model_fingerprint",
        "model_name",
        "dtype",
        "versions",
    ]
    lengths = [len(tok(t)["input_ids"]) for t in texts]
    assert (meta["num_samples"], meta["num_tokens"], meta["truncated_samples"], meta["max_length"]) == (
        3,
        sum(min(n, 20) for n in lengths),
        sum(n > 20 for n in lengths),
        20,
    )
    assert meta["texts_sha256"] == texts_sha256(texts) and meta["model_name"] == "org/tiny-llama"
    assert meta["dtype"] == "bfloat16"
    assert meta["versions"] == {
        "mathneuro_edit": mathneuro_edit.__version__,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }


class _NoPadNoEos:
    """A tokenizer with neither a pad nor an eos token (padding then uses id 0; it is masked out anyway)."""

    pad_token_id = None
    eos_token_id = None

    def __init__(self, tok) -> None:  # type: ignore[no-untyped-def]
        self._tok = tok

    def __call__(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        return self._tok(*args, **kwargs)


def test_a_tokenizer_without_pad_and_eos_pads_with_id_0() -> None:
    model, tok = build("llama")
    texts = MATH[:4]  # mixed lengths: padded batches
    with_eos = calibrate(model, tok, texts, batch_size=4, progress=False)
    bare = calibrate(model, _NoPadNoEos(tok), texts, batch_size=4, progress=False)
    for name in with_eos.targets:
        # right padding under causal attention: the pad id cannot change a real token's input
        assert torch.allclose(bare.norm_sum[name], with_eos.norm_sum[name], rtol=1e-5, atol=1e-6), name


def test_experts_called_with_keyword_arguments_give_the_same_statistics() -> None:
    model, tok = build("mixtral")
    texts = MATH[:3]
    positional = calibrate(model, tok, texts, progress=False)
    experts = [m for m in model.modules() if type(m).__name__ == "MixtralExperts"]

    def as_keywords(module, args, kwargs):  # type: ignore[no-untyped-def]
        hidden, index, weights = args
        return (hidden,), {"top_k_index": index, "top_k_weights": weights, **kwargs}

    handles = [m.register_forward_pre_hook(as_keywords, with_kwargs=True) for m in experts]  # runs before ours
    try:
        keywords = calibrate(model, tok, texts, progress=False)
    finally:
        for h in handles:
            h.remove()
    assert experts and positional.sha256 == keywords.sha256


def test_calibrate_defaults_bounds_include_and_truncation_count(capfd: pytest.CaptureFixture[str]) -> None:
    model, tok = build("llama")
    stats = calibrate(model, tok, MATH[:2])  # defaults: max_length 512, a progress bar
    assert stats.meta["max_length"] == 512 and stats.meta["model_name"] == ""  # no name: empty, not a placeholder
    assert "calibrate" in capfd.readouterr().err
    only_q = calibrate(model, tok, MATH[:2], include=[r"q_proj"], progress=False)
    assert list(only_q.targets) == [f"model.layers.{i}.self_attn.q_proj.weight" for i in range(2)]
    n = len(tok(MATH[0])["input_ids"])
    exact = calibrate(model, tok, [MATH[0]], max_length=n, progress=False)
    assert exact.meta["truncated_samples"] == 0 and exact.meta["num_tokens"] == n  # exactly max_length: kept whole
    assert calibrate(model, tok, [MATH[0]], max_length=n - 1, progress=False).meta["truncated_samples"] == 1
    assert calibrate(model, tok, ["ab"], max_length=1, batch_size=1, progress=False).meta["num_tokens"] == 1
    for bad in ({"max_length": 0}, {"batch_size": 0}):
        with pytest.raises(InputError, match="must be >= 1"):
            calibrate(model, tok, MATH[:1], progress=False, **bad)


def test_stats_round_trip_keeps_every_target_record(tmp_path: Path) -> None:
    model, tok = build("mixtral")  # experts targets carry a role ("up" / "down")
    stats = calibrate(model, tok, MATH[:2], progress=False)
    back = type(stats).load(stats.save(tmp_path / "s.safetensors"))
    assert {t.role for t in stats.targets.values()} >= {"up", "down"}
    assert back.targets == stats.targets and back.meta == stats.meta and back.sha256 == stats.sha256
