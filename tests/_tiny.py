"""Tiny random models of several transformers families and an offline character tokenizer, for tests."""

from __future__ import annotations

import string

import torch
from tokenizers import Tokenizer, models, pre_tokenizers, decoders
from transformers import PreTrainedTokenizerFast

FAMILIES = ["llama", "qwen2", "gemma2", "gpt2", "mixtral", "qwen3_moe"]

# mixed lengths on purpose: padding must not count
MATH = [
    "Question: Tom has 3 apples and buys 4 more. How many?\nAnswer: 3 + 4 = 7\n#### 7",
    "2 + 2 = 4",
    "Question: 12 * 3?\nAnswer: 12 * 3 = 36\n#### 36",
    "Question: A box holds 5 pens. 6 boxes hold how many pens?\nAnswer: 5 * 6 = 30\n#### 30",
    "9 - 4 = 5",
    "Question: 100 / 4?\nAnswer: 25\n#### 25",
    "x",
    "Question: Sara reads 7 pages a day for 3 days. Pages?\nAnswer: 7 * 3 = 21\n#### 21",
    "Question: 8 + 15 - 6?\nAnswer: 8 + 15 = 23, 23 - 6 = 17\n#### 17",
    "1 + 1 = 2",
]
GENERAL = [
    "The quiet river wound through the valley, past old farms and tall green trees.",
    "Hello there!",
    "Mia walked her dog to the park, where children were playing by the pond.",
    "A short note.",
    "The library opens early on Mondays and closes late on Fridays.",
    "Birds sang in the morning light while the town slowly woke up.",
    "ok",
    "She painted the fence blue and then sat down to read a long novel.",
    "The market was busy with people buying bread, cheese and flowers.",
]

_CHARS = string.ascii_letters + string.digits + string.punctuation + " \n"


def char_tokenizer() -> PreTrainedTokenizerFast:
    """A character-level fast tokenizer with bos/eos and NO pad token (callers must cope)."""
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for c in _CHARS:
        vocab.setdefault(c, len(vocab))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    tok.decoder = decoders.Fuse()
    from tokenizers.processors import TemplateProcessing

    tok.post_processor = TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")


VOCAB = 3 + len(set(_CHARS))


def build(family: str, *, dtype: torch.dtype = torch.float32, hidden_size: int = 32, seed: int = 0):
    """A tiny random causal LM of ``family`` and the character tokenizer."""
    import transformers as tf

    common = dict(vocab_size=VOCAB, hidden_size=hidden_size, num_hidden_layers=2, num_attention_heads=4,
                  bos_token_id=1, eos_token_id=2, pad_token_id=None)
    if family == "llama":
        cfg = tf.LlamaConfig(intermediate_size=64, num_key_value_heads=2, tie_word_embeddings=False, **common)
    elif family == "qwen2":
        cfg = tf.Qwen2Config(intermediate_size=64, num_key_value_heads=2, tie_word_embeddings=False, **common)
    elif family == "gemma2":
        cfg = tf.Gemma2Config(intermediate_size=64, num_key_value_heads=2, head_dim=8, tie_word_embeddings=True,
                              **common)
    elif family == "gpt2":
        cfg = tf.GPT2Config(vocab_size=VOCAB, n_embd=hidden_size, n_layer=2, n_head=4, n_positions=256,
                            bos_token_id=1, eos_token_id=2)
    elif family == "mixtral":
        cfg = tf.MixtralConfig(intermediate_size=48, num_key_value_heads=2, num_local_experts=4,
                               num_experts_per_tok=2, tie_word_embeddings=False, **common)
    elif family == "qwen3_moe":
        cfg = tf.Qwen3MoeConfig(intermediate_size=64, moe_intermediate_size=24, num_key_value_heads=2, num_experts=4,
                                num_experts_per_tok=2, decoder_sparse_step=1, mlp_only_layers=[], head_dim=8,
                                tie_word_embeddings=False, **common)
    else:
        raise ValueError(family)
    torch.manual_seed(seed)
    model = tf.AutoModelForCausalLM.from_config(cfg).to(dtype).eval()
    return model, char_tokenizer()
