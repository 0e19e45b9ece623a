"""Tiny random models of several transformers families and an offline character tokenizer, for tests."""

from __future__ import annotations

import json
import string
from pathlib import Path

import torch
import yaml
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
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

    common = dict(
        vocab_size=VOCAB,
        hidden_size=hidden_size,
        num_hidden_layers=2,
        num_attention_heads=4,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=None,
    )
    if family == "llama":
        cfg = tf.LlamaConfig(intermediate_size=64, num_key_value_heads=2, tie_word_embeddings=False, **common)
    elif family == "qwen2":
        cfg = tf.Qwen2Config(intermediate_size=64, num_key_value_heads=2, tie_word_embeddings=False, **common)
    elif family == "gemma2":
        cfg = tf.Gemma2Config(
            intermediate_size=64, num_key_value_heads=2, head_dim=8, tie_word_embeddings=True, **common
        )
    elif family == "gpt2":
        cfg = tf.GPT2Config(
            vocab_size=VOCAB, n_embd=hidden_size, n_layer=2, n_head=4, n_positions=256, bos_token_id=1, eos_token_id=2
        )
    elif family == "mixtral":
        cfg = tf.MixtralConfig(
            intermediate_size=48,
            num_key_value_heads=2,
            num_local_experts=4,
            num_experts_per_tok=2,
            tie_word_embeddings=False,
            **common,
        )
    elif family == "qwen3_moe":
        cfg = tf.Qwen3MoeConfig(
            intermediate_size=64,
            moe_intermediate_size=24,
            num_key_value_heads=2,
            num_experts=4,
            num_experts_per_tok=2,
            decoder_sparse_step=1,
            mlp_only_layers=[],
            head_dim=8,
            tie_word_embeddings=False,
            **common,
        )
    else:
        raise ValueError(family)
    torch.manual_seed(seed)
    model = tf.AutoModelForCausalLM.from_config(cfg).to(dtype).eval()
    return model, char_tokenizer()


def arithmetic_problems(n: int, offset: int = 0) -> list[dict]:
    """``n`` GSM8K-style records (question, answer with ``#### gold``) of one-step additions."""
    out = []
    for i in range(n):
        a, b = 2 + (i + offset) % 7, 3 + (i * 3 + offset) % 5
        out.append(
            {
                "question": f"Tom has {a} apples and buys {b} more. How many?",
                "answer": f"{a} + {b} = {a + b}\n#### {a + b}",
            }
        )
    return out


def write_workspace(root: Path) -> Path:
    """The CLI tests' workspace in ``root``: a tiny sharded llama (with an index) in ``base/``, local data files
    (``math.jsonl``, ``eval.jsonl``, ``general.txt``) and ``recipe.yaml`` naming them by absolute path.

    Returns:
        The recipe path, ``root / "recipe.yaml"``.

    Example:
        >>> recipe = write_workspace(tmp_path)  # doctest: +SKIP
    """
    model, tok = build("llama")
    model.save_pretrained(root / "base", max_shard_size="50KB")
    tok.save_pretrained(root / "base")
    (root / "math.jsonl").write_text("".join(json.dumps(p) + "\n" for p in arithmetic_problems(12)))
    (root / "eval.jsonl").write_text("".join(json.dumps(p) + "\n" for p in arithmetic_problems(6, offset=5)))
    (root / "general.txt").write_text("\n\n".join(GENERAL) + "\n")
    recipe = {
        "base": {"model": str(root / "base"), "dtype": "float32", "device": "cpu"},
        "data": {
            "math": {"path": str(root / "math.jsonl")},
            "general": [{"path": str(root / "general.txt")}],
            "samples": 8,
            "seed": 0,
        },
        "calibration": {"max_length": 64, "batch_size": 4},
        "mask": {"method": "mathneuro", "top_k": 0.1},
        "edit": {"scale": 1.1},
        "outputs": {"checkpoint": True, "adapter": True},
        "evaluation": {
            "math": {"path": str(root / "eval.jsonl")},
            "general": [{"path": str(root / "general.txt")}],
            "samples": 4,
            "max_new_tokens": 8,
        },
    }
    (root / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    return root / "recipe.yaml"
