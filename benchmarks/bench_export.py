"""Export benchmark: the streaming baked export vs loading, editing and re-saving the model.

Both routes run side by side in one run, each in its own subprocess (so that its peak RSS is its own), on the
same random bf16 Llama saved in 2+ shards (~370M parameters, ~0.75 GB by default) and the same random mask
(5% of every target matrix):

- ``stream``: ``mathneuro_edit.export_checkpoint(base, mask, 1.1, out)``;
- ``naive``: ``AutoModelForCausalLM.from_pretrained(base)`` + ``apply_mask`` + ``save_pretrained(out)``;
- with ``--workers N`` (N > 1), also ``stream-wN``: ``export_checkpoint(..., workers=N)``, whose files must be
  byte-identical to ``stream``'s (sha256 of every file); its time and peak RSS are reported as ratios to ``stream``.
  The base then has more shards (``--shards``, default 2 x N) so that N workers have work.

Reported: checkpoint size, each route's wall time and peak RSS (``VmHWM``; it includes the imports and
``Mask.load``, which are the same in both routes, so the peak after loading the mask is reported too), and the
ratios. Targets: stream peak RSS <= 0.25 x checkpoint + 300 MB, stream
time <= 1.0 x naive. The two outputs are then compared tensor by tensor (they must be identical). The base
files are read once before timing so that both routes find them in the page cache. These machines are
shared: repeat a run before trusting small differences. On a loaded machine torch's intra-op threads (OpenMP)
can slow the sequential edit several-fold (the blocks are small; the threads wait on each other), which
flatters ``--workers``: compare with ``OMP_NUM_THREADS=1`` too.

Usage: ``python benchmarks/bench_export.py [--small] [--workdir DIR] [--repeat 1] [--workers N] [--shards S]``
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_BUILD = r"""
import sys, torch
from transformers import LlamaConfig, LlamaForCausalLM
from mathneuro_edit import Mask, find_targets
small, base, mask_path, n_shards = sys.argv[1] == "1", sys.argv[2], sys.argv[3], int(sys.argv[4])
cfg = LlamaConfig(vocab_size=32000, hidden_size=256 if small else 1024, intermediate_size=688 if small else 2816,
                  num_hidden_layers=2 if small else 24, num_attention_heads=4 if small else 16,
                  num_key_value_heads=4 if small else 16, tie_word_embeddings=False)
torch.manual_seed(0)
model = LlamaForCausalLM(cfg).to(torch.bfloat16)
n = sum(p.numel() for p in model.parameters())
size = sum(p.numel() * p.element_size() for p in model.parameters())
model.save_pretrained(base, max_shard_size=f"{size // n_shards // 2**20 + 1}MB")  # n_shards to n_shards + 1
g = torch.Generator().manual_seed(1)
mask = Mask({name: torch.rand(t.shape, generator=g) < 0.05 for name, t in find_targets(model).items()})
mask.save(mask_path)
print(n)
"""

_MEASURE = r"""
import json, re, sys, time
def hwm_mib():  # peak RSS of this process (VmHWM; unlike ru_maxrss it does not carry over from the parent)
    return int(re.search(r"VmHWM:\s+(\d+)", open("/proc/self/status").read()).group(1)) / 1024
def reset_hwm():  # Linux >= 4.0: restart the peak from the current RSS
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
t0 = time.perf_counter()
import torch
from mathneuro_edit import Mask
imports = hwm_mib()
mask = Mask.load(sys.argv[2])
after_mask = hwm_mib()
reset_hwm()
t1 = time.perf_counter()
ROUTE
t2 = time.perf_counter()
print(json.dumps({"seconds": t2 - t0, "route_seconds": t2 - t1, "peak_mib": max(after_mask, hwm_mib()),
                  "imports_mib": imports, "mask_load_peak_mib": after_mask, "route_peak_mib": hwm_mib()}))
"""

_STREAM = _MEASURE.replace(
    "ROUTE",
    """
from mathneuro_edit.weights.checkpoint_writer import export_checkpoint
workers = int(sys.argv[4])
export_checkpoint(sys.argv[1], mask, 1.1, sys.argv[3], overwrite=True, workers=workers)
""",
)

_NAIVE = _MEASURE.replace(
    "ROUTE",
    """
from transformers import AutoModelForCausalLM
from mathneuro_edit import apply_mask
model = AutoModelForCausalLM.from_pretrained(sys.argv[1])
apply_mask(model, mask, 1.1)
model.save_pretrained(sys.argv[3])
""",
)

_COMPARE = r"""
import sys, torch
from pathlib import Path
from safetensors import safe_open
def tensors(folder):
    for f in sorted(Path(folder).glob("*.safetensors")):
        with safe_open(str(f), "pt") as h:
            for k in h.keys():
                yield k, f
a, b = dict(tensors(sys.argv[1])), dict(tensors(sys.argv[2]))
assert a.keys() == b.keys(), "different tensor names"
for k in a:
    with safe_open(str(a[k]), "pt") as fa, safe_open(str(b[k]), "pt") as fb:
        x, y = fa.get_tensor(k), fb.get_tensor(k)
        assert x.dtype == y.dtype and torch.equal(x.view(torch.int16), y.view(torch.int16)), k
print(len(a))
"""


def _run(code: str, *args: str) -> str:
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"subprocess failed:\n{proc.stderr[-3000:]}")
    return proc.stdout.strip().splitlines()[-1]


def _hashes(folder: Path) -> dict[str, str]:
    """sha256 of every file under ``folder`` (the parallel export must be byte-identical to the sequential one)."""
    return {
        p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--small", action="store_true", help="a ~20M-parameter model: a quick check")
    parser.add_argument("--workdir", type=Path, default=None, help="where to write (default: a temp folder)")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each route (the best is reported)")
    parser.add_argument("--workers", type=int, default=1, help="also time export_checkpoint(workers=N) vs workers=1")
    parser.add_argument("--shards", type=int, default=None, help="base shards (default: 2, or 2 x workers)")
    args = parser.parse_args()
    if args.workers < 1:
        parser.error("--workers must be >= 1")
    n_shards = args.shards or (2 if args.workers <= 1 else 2 * args.workers)
    routes = [("stream", _STREAM, "1"), ("naive", _NAIVE, "1")]
    if args.workers > 1:
        routes.append((f"stream-w{args.workers}", _STREAM, str(args.workers)))

    work = Path(tempfile.mkdtemp(prefix="bench_export_", dir=args.workdir))
    try:
        base, mask = work / "base", work / "mask.safetensors"
        t = time.perf_counter()
        n_params = int(_run(_BUILD, "1" if args.small else "0", str(base), str(mask), str(n_shards)))
        shards = sorted(base.glob("*.safetensors"))
        size = sum(p.stat().st_size for p in shards)
        print(
            f"base: {n_params / 1e6:.0f}M parameters, {size / 2**20:.0f} MiB in {len(shards)} shards "
            f"(built in {time.perf_counter() - t:.0f} s)"
        )
        for p in shards:  # warm the page cache: both routes then read from memory
            p.read_bytes()

        results: dict[str, dict[str, float]] = {}
        for _ in range(args.repeat):
            for route, code, workers in routes:
                r = json.loads(_run(code, str(base), str(mask), str(work / route), workers))
                if route not in results or r["seconds"] < results[route]["seconds"]:
                    results[route] = r
        n = int(_run(_COMPARE, str(work / "stream"), str(work / "naive")))
        print(f"outputs identical: {n} tensors compared bit for bit")

        for route, r in results.items():
            print(
                f"{route:>9}: {r['seconds']:6.1f} s (after loading the mask {r['route_seconds']:.1f} s), "
                f"peak RSS {r['peak_mib']:6.0f} MiB (imports {r['imports_mib']:.0f}, "
                f"Mask.load peak {r['mask_load_peak_mib']:.0f}, peak after loading the mask {r['route_peak_mib']:.0f})"
            )
        s, nv = results["stream"], results["naive"]
        budget = (0.25 * size + 300 * 10**6) / 2**20
        print(f"time ratio stream/naive: {s['seconds'] / nv['seconds']:.2f} (target <= 1.0)")
        print(
            f"peak RSS ratio stream/naive: {s['peak_mib'] / nv['peak_mib']:.2f}; after loading the mask: "
            f"{s['route_peak_mib'] / nv['route_peak_mib']:.2f}"
        )
        for what in ("peak_mib", "route_peak_mib"):
            print(
                f"stream {what}: {s[what]:.0f} MiB = {s[what] * 2**20 / size:.2f} x checkpoint; target <= 0.25 x "
                f"size + 300 MB = {budget:.0f} MiB: {'met' if s[what] <= budget else 'NOT met'}"
            )
        if args.workers > 1:
            w = results[f"stream-w{args.workers}"]
            same = _hashes(work / "stream") == _hashes(work / f"stream-w{args.workers}")
            print(f"workers={args.workers} output byte-identical to workers=1: {same}")
            print(
                f"time ratio workers={args.workers}/workers=1: {w['seconds'] / s['seconds']:.2f}; after loading the "
                f"mask: {w['route_seconds'] / s['route_seconds']:.2f} (speed-up "
                f"{s['route_seconds'] / w['route_seconds']:.2f}x); "
                f"peak RSS ratio: {w['peak_mib'] / s['peak_mib']:.2f}, "
                f"after loading the mask: {w['route_peak_mib'] / s['route_peak_mib']:.2f}"
            )
            if not same:
                raise SystemExit("parallel export differs from the sequential one")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
