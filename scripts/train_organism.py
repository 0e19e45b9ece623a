#!/usr/bin/env python
"""Train the model organism: a ~2M-parameter Llama that learns synthetic math and general text from scratch.

It builds a small byte-level BPE tokenizer (digits always split one per token) on the generated corpus, trains
``LlamaForCausalLM`` on a balanced math / general mix with AdamW + warmup + cosine decay, evaluates held-out math
exact match (greedy) and general-text loss, and writes the model folder atomically (temp folder + rename).

Regenerate the shipped model (single process, deterministic seed; one thread is faster than two on a shared
2-core machine, where OpenMP threads stall each other):

    python scripts/train_organism.py --threads 1 --steps 3200

Quick tuning run:

    python scripts/train_organism.py --threads 1 --steps 300 --out /tmp/organism --eval-n 100
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import (
    GenerationConfig,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
    get_cosine_schedule_with_warmup,
)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # Why: run from a checkout without installing the package.

from mathneuro_edit.organism.data import (  # noqa: E402 - after the sys.path line above
    format_math,
    general_text_entropy,
    general_texts,
    math_problems,
    math_texts,
    parse_answer,
)

DEFAULT_OUT = ROOT / "mathneuro_edit" / "organism" / "model"
PAD, BOS, EOS = "<pad>", "<s>", "</s>"
# Why distinct seeds per use: tokenizer corpus, training data and evaluation data never share a generator stream.
TOKENIZER_SEED, EVAL_SEED = 1000, 2000


def build_tokenizer(vocab_size: int) -> PreTrainedTokenizerFast:
    """Byte-level BPE trained on generated text; every digit is its own token (arithmetic stays digit-wise)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[PAD, BOS, EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    corpus = math_texts(5000, seed=TOKENIZER_SEED) + general_texts(5000, seed=TOKENIZER_SEED)
    tok.train_from_iterator(corpus, trainer=trainer)
    bos_id = tok.token_to_id(BOS)
    # Why BOS but no EOS: prompts for generation must not end in EOS; the trainer appends EOS to full texts.
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, bos_id)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=BOS, eos_token=EOS, pad_token=PAD, padding_side="left", model_max_length=256
    )


def encode(tokenizer: PreTrainedTokenizerFast, texts: list[str]) -> list[list[int]]:
    """Token ids of each text: BOS + text + EOS."""
    return [ids + [tokenizer.eos_token_id] for ids in tokenizer(texts)["input_ids"]]


def pack(seqs: list[list[int]], row_tokens: int) -> list[list[int]]:
    """Greedily concatenate whole sequences, in order, into rows of at most ``row_tokens`` tokens."""
    rows: list[list[int]] = []
    row: list[int] = []
    for s in seqs:
        if row and len(row) + len(s) > row_tokens:
            rows.append(row)
            row = []
        row.extend(s[:row_tokens])
    if row:
        rows.append(row)
    return rows


def collate(seqs: list[list[int]], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded batch with labels -100 on padding."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)  # (batch, tokens)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)  # (batch, tokens)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s)
        mask[i, : len(s)] = 1
    labels = ids.masked_fill(mask == 0, -100)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


@torch.no_grad()
def math_accuracy(
    model: LlamaForCausalLM,
    tokenizer: PreTrainedTokenizerFast,
    problems: list[dict[str, str]],
    batch_size: int = 100,
    max_new_tokens: int = 64,
) -> float:
    """Greedy exact match of the integer after ``#### `` on ``problems`` (batched, left-padded)."""
    model.eval()
    correct = 0
    for start in range(0, len(problems), batch_size):
        chunk = problems[start : start + batch_size]
        enc = tokenizer([format_math(p["question"]) for p in chunk], return_tensors="pt", padding=True)
        out = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False)
        texts = tokenizer.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
        correct += sum(parse_answer(t) == parse_answer(p["answer"]) for t, p in zip(texts, chunk))
    return correct / len(problems)


@torch.no_grad()
def text_loss(
    model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast, texts: list[str], batch_size: int = 100
) -> tuple[float, float]:
    """(mean nats per predicted token, mean summed nats per text) of BOS + text + EOS."""
    model.eval()
    total, tokens = 0.0, 0
    for start in range(0, len(texts), batch_size):
        batch = collate(encode(tokenizer, texts[start : start + batch_size]), tokenizer.pad_token_id)
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        labels = batch["labels"][:, 1:]  # (batch, tokens - 1)
        nll = torch.nn.functional.cross_entropy(
            logits[:, :-1].flatten(0, 1).float(), labels.flatten(), ignore_index=-100, reduction="sum"
        )
        total += nll.item()
        tokens += int((labels != -100).sum())
    return total / tokens, total / len(texts)


def write_atomic(
    out: Path, model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast, scores: dict, card: str
) -> None:
    """Save everything to a temp folder beside ``out``, then swap it in with renames."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-tmp-", dir=out.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        (tmp / "organism_training.json").write_text(
            json.dumps(scores, indent=2) + "\n"
        )  # the base's record, not an edit's
        (tmp / "README.md").write_text(card)
        # Why chmod: mkdtemp makes a 0700 folder; shipped package data must be readable by every user.
        tmp.chmod(0o755)
        for f in tmp.iterdir():
            f.chmod(0o644)
        old = out.parent / f".{out.name}-old"
        if old.exists():
            shutil.rmtree(old)
        if out.exists():
            out.rename(old)
        tmp.rename(out)
        if old.exists():
            shutil.rmtree(old)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def model_card(s: dict, command: str) -> str:
    """The short README.md of the model folder."""
    # card metadata: the license and tags are what `base_card.base_card_fields` and the Hub read
    return f"""---
license: apache-2.0
library_name: transformers
pipeline_tag: text-generation
tags:
- mathneuro
- model-organism
- synthetic
---
# mathneuro-edit model organism

A tiny `LlamaForCausalLM` ({s["parameters"]:,} parameters, float32) trained from scratch, in one CPU process,
on synthetic data from `mathneuro_edit.organism.data`, so that MathNeuro can be demonstrated offline.
Two separable skills: GSM8K-style math word problems (1-3 add / subtract / multiply steps, worked steps such
as `5 + 7 = 12`, final line `#### <integer>`), and general English text (stories, descriptions, dialogues)
with the same names and objects but no digits or arithmetic.

- Tokenizer: byte-level BPE, {s["vocab_size"]} tokens, digits split one per token; `<s>` prepended, `</s>` ends
  each training text.
- Architecture: {s["layers"]} layers, hidden {s["hidden"]}, MLP {s["intermediate"]}, {s["heads"]} heads.
- Training: {s["steps"]} steps x {s["batch_size"]} packed rows of {s["row_tokens"]} tokens (texts alternate
  `format_math(q, a)` and general), bf16 autocast, AdamW
  (lr {s["lr"]}, weight decay {s["weight_decay"]}), {s["warmup"]} warmup steps then cosine decay, seed {s["seed"]},
  {s["threads"]} CPU threads, {s["train_seconds"]:.0f} s.
- Regenerate: `{command}`

## Scores (held-out split, never seen in training)

| metric | value |
|---|---|
| math exact match, greedy, {s["math_n"]} problems | {s["math_exact_match"]:.3f} |
| general text loss (nats / token) | {s["general_loss_per_token"]:.4f} |
| general text loss (nats / text) | {s["general_nats_per_text"]:.2f} |
| generator path surprisal, an upper bound on the data entropy (nats / text) | {s["general_entropy_nats_per_text"]:.2f} |
| math text loss (nats / token) | {s["math_loss_per_token"]:.4f} |

Prompt format: `Question: {{question}}\\nAnswer:`; the prediction is the integer after `#### `.
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--steps", type=int, default=3200)
    ap.add_argument("--batch-size", type=int, default=24, help="packed rows per step")
    ap.add_argument("--row-tokens", type=int, default=160)
    ap.add_argument("--no-bf16", action="store_true")
    ap.add_argument("--eval-every", type=int, default=500)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--intermediate", type=int, default=512)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--vocab-size", type=int, default=1024)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--eval-n", type=int, default=500)
    ap.add_argument("--log-every", type=int, default=100)
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    t0 = time.time()
    tokenizer = build_tokenizer(args.vocab_size)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=args.hidden,
        intermediate_size=args.intermediate,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.heads,
        max_position_embeddings=256,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        do_sample=False,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        max_new_tokens=64,
    )
    n_params = sum(p.numel() for p in model.parameters())
    # Why packing: whole texts are packed greedily into rows of --row-tokens (each row starts with a text's BOS),
    # so little compute goes to padding; math and general texts alternate, a balanced mix by text count.
    per_row = max(1, args.row_tokens // 40)  # Why 40: below the shortest mean text length, so enough rows
    n_each = args.steps * args.batch_size * per_row // 2 + 1000
    math_ids = encode(tokenizer, math_texts(n_each, seed=args.seed, split="train"))
    gen_ids = encode(tokenizer, general_texts(n_each, seed=args.seed, split="train"))
    rows = pack([s for pair in zip(math_ids, gen_ids) for s in pair], args.row_tokens)
    if len(rows) < args.steps * args.batch_size:
        raise RuntimeError(f"packed only {len(rows)} rows, need {args.steps * args.batch_size}")
    print(
        f"params={n_params} vocab={len(tokenizer)} data={time.time() - t0:.1f}s "
        f"mean_len math={sum(map(len, math_ids)) / n_each:.1f} general={sum(map(len, gen_ids)) / n_each:.1f} "
        f"rows={len(rows)}",
        flush=True,
    )
    eval_problems = math_problems(100, seed=EVAL_SEED + 1, split="test")

    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    # Why betas (0.9, 0.98): the usual choice for short, high-lr transformer runs; norms get no weight decay.
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=args.lr,
        betas=(0.9, 0.98),
    )
    sched = get_cosine_schedule_with_warmup(opt, args.warmup, args.steps)
    t_train = time.time()
    model.train()
    running = 0.0
    for step in range(args.steps):
        batch = collate(rows[step * args.batch_size : (step + 1) * args.batch_size], tokenizer.pad_token_id)
        # Why bf16 autocast: ~25% faster on CPUs with avx512_bf16; master weights and the optimizer stay float32.
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=not args.no_bf16):
            loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # Why 1.0: guards the high-lr warmup
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        running += loss.item()
        if (step + 1) % args.log_every == 0:
            el = time.time() - t_train
            msg = f"step {step + 1}/{args.steps} loss {running / args.log_every:.4f} lr {sched.get_last_lr()[0]:.2e}"
            if args.eval_every and (step + 1) % args.eval_every == 0:
                msg += f" math_acc100 {math_accuracy(model, tokenizer, eval_problems):.2f}"
                model.train()
            print(f"{msg} {el:.0f}s eta {el / (step + 1) * (args.steps - step - 1):.0f}s", flush=True)
            running = 0.0
    train_seconds = time.time() - t_train

    model.eval()
    t_eval = time.time()
    problems = math_problems(args.eval_n, seed=EVAL_SEED, split="test")
    acc = math_accuracy(model, tokenizer, problems)
    gen_test = general_texts(args.eval_n, seed=EVAL_SEED, split="test")
    g_tok, g_text = text_loss(model, tokenizer, gen_test)
    m_tok, _ = text_loss(model, tokenizer, math_texts(args.eval_n, seed=EVAL_SEED, split="test"))
    scores = {
        "math_exact_match": acc,
        "math_n": args.eval_n,
        "general_loss_per_token": g_tok,
        "general_nats_per_text": g_text,
        "general_entropy_nats_per_text": general_text_entropy(args.eval_n, seed=EVAL_SEED, split="test"),
        "math_loss_per_token": m_tok,
        "eval_seed": EVAL_SEED,
        "parameters": n_params,
        "vocab_size": len(tokenizer),
        "layers": args.layers,
        "hidden": args.hidden,
        "intermediate": args.intermediate,
        "heads": args.heads,
        "steps": args.steps,
        "batch_size": args.batch_size,
        "row_tokens": args.row_tokens,
        "lr": args.lr,
        "weight_decay": args.weight_decay,
        "warmup": args.warmup,
        "seed": args.seed,
        "threads": args.threads,
        "train_seconds": round(train_seconds, 1),
    }
    print(json.dumps(scores, indent=2), f"\neval {time.time() - t_eval:.1f}s", flush=True)
    command = "python scripts/train_organism.py " + " ".join(
        f"--{k.replace('_', '-')} {v}"
        for k, v in vars(args).items()
        if k not in ("out", "log_every", "eval_every", "eval_n", "no_bf16")
    )
    write_atomic(args.out, model, tokenizer, scores, model_card(scores, command))
    print(f"wrote {args.out} total {time.time() - t0:.0f}s", flush=True)


if __name__ == "__main__":
    main()
