"""How far the default mask is from the released script's (``mask.reference: official``) on a real model.

Usage:

    python scripts/official_jaccard.py --gguf /path/SmolLM2-135M-Instruct.Q4_1.gguf --samples 16 --top-k 0.05

Loads the GGUF with mathneuro_edit's ``load_model`` in bfloat16 on the CPU (the script always loads bfloat16), takes
``--samples`` texts per set from recipes/data/gsm8k_train_200.jsonl (math) and recipes/data/wikitext2_test_calib.txt
(general) with the recipes' sampler (seed ``--seed``), and builds on the same model:

- the default mask: float32 statistics (``calibrate``, batch 8, longest first) and ``find_math_params``;
- the official one: per-sample bf16 products summed in bf16, batch 1, texts in order (``official_set_masks``).

It prints (and writes to ``--out`` as JSON) the Jaccard index ``|A & B| / |A | B|`` over all (tensor, index) pairs of
the MathNeuro masks, of the math and of the general top-k sets alone, the entries tied with the k-th largest sum
(where the script's own ``torch.topk`` on a CPU may break ties otherwise than on CUDA), and the Jaccard between the
official selection and the one with those ties sent to the higher index instead (the most a different tie rule
can move it). Only the weights both rules score are compared (the official rule skips no weight of these models
that the default scores; the script prints the counts).
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import torch

from mathneuro_edit.data.sources import load_texts
from mathneuro_edit.engine.calibration import calibrate
from mathneuro_edit.engine.mask import find_math_params, k_of
from mathneuro_edit.engine.official import OfficialPass, official_set_masks
from mathneuro_edit.engine.topk import top_fraction_flat
from mathneuro_edit.weights.loading import load_model

ROOT = Path(__file__).resolve().parent.parent
MATH = ROOT / "recipes" / "data" / "gsm8k_train_200.jsonl"
GENERAL = ROOT / "recipes" / "data" / "wikitext2_test_calib.txt"


def jaccard(a, b, names) -> float:
    inter = sum(int((a[n] & b[n]).sum()) for n in names)
    union = sum(int((a[n] | b[n]).sum()) for n in names)
    return inter / union if union else 1.0


def ties_and_high(sums: dict[str, torch.Tensor], top_k: float) -> tuple[int, dict[str, torch.Tensor]]:
    """Entries tied with each matrix's k-th largest sum, and the top-k with ties to the HIGHER flat index."""
    tied, high = 0, {}
    for name, acc in sums.items():
        flat = acc.reshape(-1).abs().float()
        k = k_of(top_k, flat.numel())
        if k:
            kth = torch.topk(flat, k).values[-1]
            tied += int((flat == kth).sum())
        high[name] = top_fraction_flat(flat.flip(0), [k])[0].flip(0).reshape(acc.shape)
    return tied, high


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gguf", type=Path, required=True)
    ap.add_argument("--samples", type=int, default=16, help="texts per set")
    ap.add_argument("--top-k", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-length", type=int, default=512)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()

    t0 = time.time()
    model, tok = load_model(str(args.gguf), dtype="bfloat16", device="cpu")
    math = load_texts(str(MATH), args.samples, args.seed).texts
    general = load_texts(str(GENERAL), args.samples, args.seed).texts
    kw = dict(max_length=args.max_length, progress=False)

    t1 = time.time()
    ms, gs = calibrate(model, tok, math, **kw), calibrate(model, tok, general, **kw)
    default = find_math_params(model, ms, gs, top_k=args.top_k)
    d_math = find_math_params(model, ms, None, top_k=args.top_k, method="wanda")
    d_gen = find_math_params(model, gs, None, top_k=args.top_k, method="wanda")
    t2 = time.time()
    m_sums: dict[str, torch.Tensor] = {}
    g_sums: dict[str, torch.Tensor] = {}
    (o_math,), m_meta = official_set_masks(model, tok, math, [args.top_k], run=OfficialPass(**kw), keep_sums=m_sums)
    (o_gen,), g_meta = official_set_masks(model, tok, general, [args.top_k], run=OfficialPass(**kw), keep_sums=g_sums)
    t3 = time.time()

    names = [n for n in o_math if n in default]
    official = {n: o_math[n] & ~o_gen[n] for n in names}
    m_tied, m_high = ties_and_high(m_sums, args.top_k)
    g_tied, g_high = ties_and_high(g_sums, args.top_k)
    high = {n: m_high[n] & ~g_high[n] for n in names}
    selected = sum(int(official[n].sum()) for n in names)
    result = {
        "model": args.gguf.name,
        "dtype": "bfloat16",
        "samples_per_set": args.samples,
        "seed": args.seed,
        "top_k": args.top_k,
        "max_length": args.max_length,
        "tokens": {"math": m_meta["num_tokens"], "general": g_meta["num_tokens"]},
        "truncated": {"math": m_meta["truncated_samples"], "general": g_meta["truncated_samples"]},
        "tensors": {"default": len(default), "official": len(o_math), "compared": len(names)},
        "selected": {"default": sum(int(default[n].sum()) for n in names), "official": selected},
        "jaccard_mathneuro": jaccard(default, official, names),
        "jaccard_math_top_k": jaccard(d_math, o_math, names),
        "jaccard_general_top_k": jaccard(d_gen, o_gen, names),
        "tied_with_kth": {"math": m_tied, "general": g_tied},
        "jaccard_official_ties_low_vs_high": jaccard(official, high, names),
        "seconds": {"load": round(t1 - t0, 1), "default": round(t2 - t1, 1), "official": round(t3 - t2, 1)},
        "versions": {"torch": torch.__version__, "python": platform.python_version()},
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
