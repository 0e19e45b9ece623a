"""Core benchmark: calibration overhead, the released-script approach, and masks from saved statistics.

Everything is measured side by side in one run and reported as ratios (these machines are noisy). Each route
runs in its own subprocess so that its peak RSS is its own.

Routes, on one random bf16 Llama (~120M parameters by default) and N samples of T tokens:
- ``forward``: plain forward passes (batch 8), no hooks: the floor.
- ``calibrate``: ``mathneuro_edit.calibrate`` (batch 8).
- ``naive``: the released script's approach: batch size 1, and per sample ``|W| x ||X_j||`` materialised into a
  weight-sized float32 accumulator for every weight.
- ``masks``: 8 ``find_math_params`` calls (8 top_k values) from saved statistics, vs 8 calibrations;
  ``masks_multi``: the same 8 masks from one ``find_math_params_multi`` call (what ``sweep`` does).

Usage: ``python benchmarks/bench_core.py [--small] [--samples 8] [--tokens 256] [--repeat 2]``
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _model(small: bool):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=32000,
        hidden_size=256 if small else 768,
        intermediate_size=688 if small else 2048,
        num_hidden_layers=2 if small else 12,
        num_attention_heads=4 if small else 12,
        num_key_value_heads=4 if small else 12,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg).to(torch.bfloat16).eval()


class _Tok:
    """Pre-tokenized random ids: the benchmark measures the model, not a tokenizer."""

    pad_token_id = 0
    eos_token_id = 0

    def __init__(self, texts_to_ids):
        self.map = texts_to_ids

    def __call__(self, texts, **kw):
        return {"input_ids": [self.map[t] for t in texts]}


def _data(samples: int, tokens: int):
    import torch

    g = torch.Generator().manual_seed(1)
    ids = [torch.randint(3, 32000, (tokens,), generator=g).tolist() for _ in range(samples)]
    texts = [f"sample {i}" for i in range(samples)]
    return texts, _Tok(dict(zip(texts, ids))), ids


def route(name: str, small: bool, samples: int, tokens: int, repeat: int, workdir: str) -> dict:
    import torch

    torch.set_num_threads(2)
    from mathneuro_edit import ActivationStats, calibrate, find_math_params
    from mathneuro_edit.mask import find_math_params_multi

    model = _model(small)
    texts, tok, ids = _data(samples, tokens)
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        if name == "forward":
            with torch.no_grad():
                for i in range(0, samples, 8):
                    model(input_ids=torch.tensor(ids[i : i + 8]), use_cache=False)
        elif name == "calibrate":
            calibrate(model, tok, texts, batch_size=8, progress=False)
        elif name == "naive":
            acc = {}
            hooks = []
            for mod_name, m in model.named_modules():
                if isinstance(m, torch.nn.Linear):
                    def hook(mod, args, key=mod_name):
                        x = args[0][0].float()  # (tokens, d_in), batch size 1
                        score = mod.weight.abs().float() * x.norm(dim=0)[None, :]  # weight-sized, per sample
                        acc[key] = acc[key] + score if key in acc else score
                    hooks.append(m.register_forward_pre_hook(hook))
            with torch.no_grad():
                for row in ids:
                    model(input_ids=torch.tensor([row]), use_cache=False)
            for h in hooks:
                h.remove()
        elif name in ("masks", "masks_multi"):
            stats_path = Path(workdir) / "m.stats.safetensors"
            if not stats_path.exists():
                calibrate(model, tok, texts, batch_size=8, progress=False).save(stats_path)
                calibrate(model, tok, texts[::-1][: max(1, samples // 2)], batch_size=8, progress=False).save(
                    Path(workdir) / "g.stats.safetensors"
                )
            t0 = time.perf_counter()
            ms = ActivationStats.load(stats_path)
            gs = ActivationStats.load(Path(workdir) / "g.stats.safetensors")
            ks = (0.001, 0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3)
            if name == "masks":
                for k in ks:  # eight separate calls
                    find_math_params(model, ms, gs, top_k=k)
            else:  # one call for the eight values (what `sweep` uses)
                find_math_params_multi(model, ms, gs, top_ks=ks)
        best = min(best, time.perf_counter() - t0)
    return {"route": name, "seconds": best}


def _run_child(name: str, args, workdir: str) -> dict:
    cmd = [sys.executable, __file__, "--child", name, "--samples", str(args.samples), "--tokens", str(args.tokens),
           "--repeat", str(args.repeat), "--workdir", workdir] + (["--small"] if args.small else [])
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    result["peak_rss_mb"] = result.pop("rss_kb") / 1024
    del before
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--small", action="store_true", help="a ~10M model for a quick check")
    p.add_argument("--samples", type=int, default=8)
    p.add_argument("--tokens", type=int, default=256)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--child")
    p.add_argument("--workdir")
    args = p.parse_args()
    if args.child:
        r = route(args.child, args.small, args.samples, args.tokens, args.repeat, args.workdir)
        r["rss_kb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(json.dumps(r))
        return
    with tempfile.TemporaryDirectory() as wd:
        # the model-only baseline: import + build the model, nothing else
        res = {n: _run_child(n, args, wd) for n in ("forward", "calibrate", "naive", "masks", "masks_multi")}
    f, c, n, m = (res[k] for k in ("forward", "calibrate", "naive", "masks"))
    report = {
        "setup": {"small": args.small, "samples": args.samples, "tokens": args.tokens, "repeat": args.repeat},
        "seconds": {k: round(v["seconds"], 3) for k, v in res.items()},
        "peak_rss_mb": {k: round(v["peak_rss_mb"], 1) for k, v in res.items()},
        "calibrate_over_forward": round(c["seconds"] / f["seconds"], 3),
        "naive_over_calibrate_time": round(n["seconds"] / c["seconds"], 2),
        "calibrate_over_naive_extra_memory": round(
            (c["peak_rss_mb"] - f["peak_rss_mb"]) / max(1e-9, n["peak_rss_mb"] - f["peak_rss_mb"]), 3
        ),
        "calibrate_over_naive_peak_rss": round(c["peak_rss_mb"] / n["peak_rss_mb"], 3),
        "eight_calibrations_over_eight_masks": round(8 * c["seconds"] / m["seconds"], 1),
        "eight_calibrations_over_one_multi_call": round(8 * c["seconds"] / res["masks_multi"]["seconds"], 1),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
