"""A tiny random Llama written as a GGUF file with the gguf package, the way llama.cpp's converter writes one.

What llama.cpp's ``convert_hf_to_gguf.py`` does, and transformers' GGUF loader undoes (``integrations/ggml.py``,
``modeling_gguf_pytorch_utils.py``): tensor names from gguf's tensor name map (``token_embd``, ``blk.N.attn_q``,
...), q/k rows permuted for llama.cpp's rotary layout, no ``output.weight`` when the embeddings are tied, and a
byte-level BPE tokenizer (``tokenizer.ggml.model: gpt2``) with its chat template. Here the q/k matrices and the
norms are stored F32 (so the loaded values must equal the original ones exactly, proving the permutation is
undone) and the other matrices Q8_0 (so the loaded values must equal gguf's own dequantization).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MERGES = ["Ġ t", "h e", "Ġt he"]
LAYERS, HIDDEN, FFN, HEADS, KV_HEADS = 2, 64, 128, 4, 2  # multiples of 32: Q8_0 blocks are 32 entries


def _byte_chars() -> list[str]:
    """GPT-2's byte -> printable character table (the byte-level BPE alphabet)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for _, c in sorted(zip(bs, cs))]


def tokens() -> list[str]:
    """The vocabulary: special tokens, the 256 byte characters, then one token per merge."""
    return SPECIALS + _byte_chars() + [m.replace(" ", "") for m in MERGES]


def tiny_llama(seed: int = 0) -> torch.nn.Module:
    """A random tied-embedding Llama sized for the vocabulary of :func:`tokens`."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=len(tokens()),
        hidden_size=HIDDEN,
        intermediate_size=FFN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        head_dim=HIDDEN // HEADS,
        max_position_embeddings=256,
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
    )
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # norms away from 1.0 so that a wrong mapping shows
        for n, p in model.named_parameters():
            if "norm" in n:
                p.copy_(1 + 0.1 * torch.randn_like(p))
    return model


def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's q/k row permutation (``LlamaModel.permute`` in convert_hf_to_gguf.py)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(model: torch.nn.Module, path: str | Path) -> dict[str, str]:
    """Write ``model`` as a llama GGUF file; returns ``{HF parameter name: "F32" | "Q8_0"}``."""
    import gguf

    cfg = model.config
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny-llama")
    w.add_license("apache-2.0")
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_rope_dimension_count(cfg.hidden_size // cfg.num_attention_heads)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_vocab_size(cfg.vocab_size)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens())
    w.add_token_types([3] * len(SPECIALS) + [1] * (len(tokens()) - len(SPECIALS)))
    w.add_token_merges(MERGES)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_pad_token_id(2)
    w.add_add_bos_token(False)
    w.add_chat_template(CHAT_TEMPLATE)
    kinds: dict[str, str] = {}
    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}

    def put(gguf_name: str, hf_name: str, arr: np.ndarray, quantize: bool) -> None:
        kinds[hf_name] = "Q8_0" if quantize else "F32"
        if quantize:
            q = gguf.quants.quantize(arr, gguf.GGMLQuantizationType.Q8_0)
            w.add_tensor(gguf_name, q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            w.add_tensor(gguf_name, np.ascontiguousarray(arr, dtype=np.float32))

    put("token_embd.weight", "model.embed_tokens.weight", sd["model.embed_tokens.weight"], True)
    put("output_norm.weight", "model.norm.weight", sd["model.norm.weight"], False)
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        put(f"blk.{i}.attn_norm.weight", p + "input_layernorm.weight", sd[p + "input_layernorm.weight"], False)
        put(
            f"blk.{i}.ffn_norm.weight",
            p + "post_attention_layernorm.weight",
            sd[p + "post_attention_layernorm.weight"],
            False,
        )
        put(
            f"blk.{i}.attn_q.weight",
            p + "self_attn.q_proj.weight",
            _permute(sd[p + "self_attn.q_proj.weight"], cfg.num_attention_heads),
            False,
        )
        put(
            f"blk.{i}.attn_k.weight",
            p + "self_attn.k_proj.weight",
            _permute(sd[p + "self_attn.k_proj.weight"], cfg.num_key_value_heads),
            False,
        )
        for g, h in (
            ("attn_v", "self_attn.v_proj"),
            ("attn_output", "self_attn.o_proj"),
            ("ffn_gate", "mlp.gate_proj"),
            ("ffn_up", "mlp.up_proj"),
            ("ffn_down", "mlp.down_proj"),
        ):
            put(f"blk.{i}.{g}.weight", p + h + ".weight", sd[p + h + ".weight"], True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return kinds


def expected_weights(model: torch.nn.Module, kinds: dict[str, str]) -> dict[str, torch.Tensor]:
    """What a correct loader gives: F32 tensors exactly, Q8_0 ones as gguf's own quantize -> dequantize."""
    import gguf

    out = {}
    for name, kind in kinds.items():
        arr = model.state_dict()[name].detach().float().numpy()
        if kind == "Q8_0":
            q8 = gguf.GGMLQuantizationType.Q8_0
            arr = gguf.quants.dequantize(gguf.quants.quantize(arr, q8), q8)
        out[name] = torch.from_numpy(np.ascontiguousarray(arr, dtype=np.float32))
    return out
