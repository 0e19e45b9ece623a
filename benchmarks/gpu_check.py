"""GPU check: calibration overhead, throughput, peak memory and the data-parallel path on a random ~1B Llama.

Measured in one short run (a few minutes on one GPU), side by side:

- ``forward``: plain forward passes over the calibration batches (no hooks): the floor;
- ``calibrate``: ``mathneuro_edit.calibrate`` on the same texts (target: <= 1.1x the forward time);
- tokens per second of calibration, peak GPU memory of both (``torch.cuda.max_memory_allocated``), and the
  planner's estimate of the calibration peak (``mathneuro_edit.runs.plan``) next to the measured one;
- ``data-parallel``: ``calibrate_distributed`` under ``torch.distributed.run --nproc-per-node 1`` (nccl, the
  full collective path with one rank) on the same model saved to a temporary folder, compared with the
  single-process statistics (allclose, float32).

Results are appended to ``docs/performance.md`` with the date and the device. ``--cpu-smoke`` runs the same
steps on a tiny float32 model on CPU (gloo) and only prints them.

Usage: ``python benchmarks/gpu_check.py [--cpu-smoke] [--samples 64] [--tokens 512] [--batch 8] [--out FILE]``
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # runs from a checkout without installing the package


def _config(smoke: bool):
    from transformers import LlamaConfig

    if smoke:
        return LlamaConfig(
            vocab_size=1000,
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            tie_word_embeddings=False,
        )
    # Llama-3.2-1B's shape (1.24B parameters, tied embeddings)
    return LlamaConfig(
        vocab_size=128256,
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=16,
        num_attention_heads=32,
        num_key_value_heads=8,
        tie_word_embeddings=True,
        rope_theta=500000.0,
        max_position_embeddings=4096,
    )


class _Tok:
    """Pre-tokenized random ids: the check measures the model, not a tokenizer."""

    pad_token_id = 0
    eos_token_id = 0

    def __init__(self, texts_to_ids: dict[str, list[int]]) -> None:
        self.map = texts_to_ids

    def __call__(self, texts, **kw):
        return {"input_ids": [self.map[t] for t in texts]}


def _data(samples: int, tokens: int, vocab: int):
    import torch

    g = torch.Generator().manual_seed(1)
    ids = [torch.randint(3, vocab, (tokens,), generator=g).tolist() for _ in range(samples)]
    texts = [f"sample {i}" for i in range(samples)]
    return texts, _Tok(dict(zip(texts, ids))), ids


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()


def _timed(fn, device, repeat: int) -> tuple[float, int]:
    """Best wall time of ``repeat`` runs and the peak accelerator memory (bytes, 0 on CPU)."""
    import torch

    best = float("inf")
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    for _ in range(repeat):
        _sync(device)
        t0 = time.perf_counter()
        fn()
        _sync(device)
        best = min(best, time.perf_counter() - t0)
    return best, (torch.cuda.max_memory_allocated() if device.type == "cuda" else 0)


def _dp_worker(args) -> None:
    """Runs under torch.distributed.run: load the saved model, calibrate_distributed, rank 0 writes the stats."""
    import torch
    from transformers import AutoModelForCausalLM

    from mathneuro_edit.engine.distributed import calibrate_distributed, local_device

    model = AutoModelForCausalLM.from_pretrained(args.model_dir, dtype="auto", use_safetensors=True)
    model = model.to("cpu" if args.cpu_smoke else local_device()).eval()
    texts, tok, _ = _data(args.samples, args.tokens, model.config.vocab_size)
    t0 = time.perf_counter()
    calibrate_distributed(
        model,
        tok,
        texts,
        out=args.stats_out,
        max_length=args.tokens,
        batch_size=args.batch,
        progress=False,
        timeout_s=300,
    )
    _sync(next(model.parameters()).device)
    print(json.dumps({"dp_seconds": time.perf_counter() - t0, "backend": torch.distributed.get_backend()}))


def run(args) -> dict:
    import torch
    import transformers
    from transformers import LlamaForCausalLM

    from mathneuro_edit import ActivationStats, calibrate
    from mathneuro_edit.runs.plan import plan_from_config

    device = torch.device("cpu" if args.cpu_smoke else "cuda")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("gpu_check: no CUDA device; run with --cpu-smoke on a CPU machine")
    dtype = torch.float32 if args.cpu_smoke else torch.bfloat16
    cfg = _config(args.cpu_smoke)
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(cfg).to(dtype).eval()
    n_params = sum(p.numel() for p in model.parameters())
    texts, tok, ids = _data(args.samples, args.tokens, cfg.vocab_size)
    batches = [torch.tensor(ids[i : i + args.batch], device=device) for i in range(0, len(ids), args.batch)]

    def forward() -> None:
        with torch.no_grad():
            for x in batches:
                model(input_ids=x, attention_mask=torch.ones_like(x), use_cache=False)

    stats: list[ActivationStats] = []

    def calib() -> None:
        stats[:] = [calibrate(model, tok, texts, max_length=args.tokens, batch_size=args.batch, progress=False)]

    forward(), calib()  # warm-up: kernels, allocator, lazy imports
    t_fwd, mem_fwd = _timed(forward, device, args.repeat)
    t_cal, mem_cal = _timed(calib, device, args.repeat)
    plan = plan_from_config(
        cfg.to_dict(), dtype=str(dtype).removeprefix("torch."), batch_size=args.batch, max_length=args.tokens
    )

    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)  # safetensors; the worker loads it with mathneuro_edit.weights.loading
        out = Path(tmp) / "dp.stats.safetensors"
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "1",
            __file__,
            "--dp-worker",
            "--model-dir",
            tmp,
            "--stats-out",
            str(out),
            "--samples",
            str(args.samples),
            "--tokens",
            str(args.tokens),
            "--batch",
            str(args.batch),
        ] + (["--cpu-smoke"] if args.cpu_smoke else [])
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        dp_wall = time.perf_counter() - t0
        if proc.returncode != 0:
            raise SystemExit(f"gpu_check: data-parallel run failed:\n{proc.stderr[-3000:]}")
        dp = json.loads([ln for ln in proc.stdout.splitlines() if ln.startswith("{")][-1])
        dp_stats = ActivationStats.load(out)
    ref = stats[0]
    dp_equal = all(
        torch.allclose(dp_stats.norm_sum[n], ref.norm_sum[n], rtol=1e-4, atol=1e-4)
        and torch.equal(dp_stats.token_count[n], ref.token_count[n])
        for n in ref.targets
    )
    tokens = args.samples * args.tokens
    return {
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu (smoke)",
        "versions": f"torch {torch.__version__}, transformers {transformers.__version__}",
        "model": f"random Llama, {n_params / 1e6:,.1f}M parameters, {str(dtype).removeprefix('torch.')}",
        "workload": f"{args.samples} samples x {args.tokens} tokens, batch {args.batch}, best of {args.repeat}",
        "forward_s": round(t_fwd, 4),
        "calibrate_s": round(t_cal, 4),
        "ratio": round(t_cal / t_fwd, 3),
        "calibrate_tokens_per_s": round(tokens / t_cal),
        "forward_tokens_per_s": round(tokens / t_fwd),
        "peak_mem_forward_gb": round(mem_fwd / 1e9, 2),
        "peak_mem_calibrate_gb": round(mem_cal / 1e9, 2),
        "planner_calibration_peak_gb": round(plan.calibration_peak_bytes / 1e9, 2),
        "dp_backend": dp["backend"],
        "dp_calibrate_s": round(dp["dp_seconds"], 4),
        "dp_wall_s_with_startup": round(dp_wall, 1),
        "dp_equals_single_process": dp_equal,
    }


def to_markdown(r: dict) -> str:
    target = "meets" if r["ratio"] <= 1.1 else "MISSES"
    rows = [
        (
            "calibrate / forward time",
            f"{r['ratio']}x ({target} the <= 1.1x target); {r['calibrate_s']} s vs {r['forward_s']} s",
        ),
        ("tokens per second", f"calibrate {r['calibrate_tokens_per_s']:,}, forward {r['forward_tokens_per_s']:,}"),
        (
            "peak GPU memory",
            "n/a on CPU"
            if r["device"].startswith("cpu")
            else f"calibrate {r['peak_mem_calibrate_gb']} GB, forward {r['peak_mem_forward_gb']} GB; "
            f"planner estimate {r['planner_calibration_peak_gb']} GB",
        ),
        (
            "data-parallel, 1 rank",
            f"{r['dp_backend']}, calibrate {r['dp_calibrate_s']} s "
            f"({r['dp_wall_s_with_startup']} s with torchrun start-up); equals single "
            f"process: {r['dp_equals_single_process']}",
        ),
    ]
    lines = [
        f"## gpu_check, {r['date']}, {r['device']}",
        "",
        f"{r['model']}; {r['workload']}; {r['versions']}.",
        "",
        "| measure | result |",
        "|---|---|",
    ]
    lines += [f"| {a} | {b} |" for a, b in rows]
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cpu-smoke", action="store_true", help="a tiny float32 model on CPU; prints, writes nothing")
    p.add_argument("--samples", type=int, default=None, help="calibration texts (default 64; smoke 8)")
    p.add_argument("--tokens", type=int, default=None, help="tokens per text (default 512; smoke 32)")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--out", default=None, help="markdown file to append to (default docs/performance.md on GPU)")
    p.add_argument("--dp-worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--model-dir", help=argparse.SUPPRESS)
    p.add_argument("--stats-out", help=argparse.SUPPRESS)
    args = p.parse_args()
    args.samples = args.samples or (8 if args.cpu_smoke else 64)
    args.tokens = args.tokens or (32 if args.cpu_smoke else 512)
    if args.dp_worker:
        _dp_worker(args)
        return
    result = run(args)
    text = to_markdown(result)
    print(json.dumps(result, indent=1))
    print(text)
    out = args.out or (None if args.cpu_smoke else str(ROOT / "docs" / "performance.md"))
    if out:
        path = Path(out)
        head = "" if path.exists() else "# Performance measurements\n\nAppended by `benchmarks/gpu_check.sh`.\n\n"
        with path.open("a", encoding="utf-8") as f:
            f.write(head + text + "\n")
        print(f"appended to {path}")
    if os.environ.get("GPU_CHECK_STRICT") and (result["ratio"] > 1.1 or not result["dp_equals_single_process"]):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
