"""GPU check: every CLI stage on CUDA, as a user runs it offline, within about 6 minutes on one H200.

What runs, in this order of priority (a stage is started only while the time budget, ``--budget``, lasts; the
rest is recorded as skipped, so a run cut short still delivers what it measured):

1. ``ratio``: calibration against a plain forward pass on a random Llama-3.2-1B-shaped model (bf16, 64 texts x
   512 tokens, batch 8; target <= 1.1x), measured in the same process, and the data-parallel path
   (``calibrate_distributed`` under ``torch.distributed.run``, one rank) compared with the single-process
   statistics. Both sides load the saved model with ``from_pretrained`` in the same dtype: an in-memory model cast
   with ``.to(bfloat16)`` also casts RoPE's ``inv_freq`` buffer, which ``from_pretrained`` keeps in float32, and
   that alone moved the statistics by 1e-3 (issue 40, finding 5: the benchmark's fault, not the distributed path).
2. ``quickstart``: ``mathneuro-edit run`` of the embedded quickstart on CUDA and on the CPU, at once, and their
   files compared (which are byte-identical, which differ; the mask's content hash).
3. the models (a Llama-3.2-1B-shaped and a Llama-3.1-8B-shaped random model, bf16, with SmolLM2's real
   tokenizer, calibrated on GSM8K and WikiText text from recipes/data), each CLI stage in a process of its own:
   the 1B's ``run`` (checkpoint + GGUF Q8_0 + adapter, each of its stages timed from its stage lines) and
   ``verify``; the 8B's ``calibrate``, ``mask``, ``eval``, ``export --adapter`` and ``verify`` of the adapter
   (``--full``: also its ``run``, checkpoint + GGUF and ``reproduce``); then the 1B's ``calibrate``, ``mask``,
   ``eval``, ``export`` (checkpoint + GGUF), ``export --adapter``, ``verify`` of the adapter and ``reproduce``.
4. ``reproduce`` of the quickstart's CUDA run on the CPU, whose verdict is recorded.

Per stage: wall time, exit status, the peak GPU memory torch allocated in that process, its peak RSS, the GPU
utilization (NVML, sampled every 0.2 s: mean and max) and ``plan``'s prediction for that command (the device
figure for the GPU stages, the RAM figure for the others) with the measured / predicted ratio.

Results go to ``--out`` (default ``$OUT`` when set, else ``gpu_check_results/``) as they are made:
``gpu_check.jsonl`` (one JSON record per stage, appended and flushed) and ``gpu_check.md`` (the summary table,
rewritten after each stage). ``--doc docs/performance.md`` appends the summary there at the end.

``--cpu-smoke`` runs the same steps on tiny models on the CPU in about a minute, in this process (the quickstart's
"CUDA" half is a second CPU run: every file must then be identical); tests/test_gpu_check_smoke.py runs it.

Usage: ``bash benchmarks/gpu_check.sh [--cpu-smoke] [--budget 345] [--out DIR] [--models 1b,8b] [--full]``
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).resolve()  # absolute: stage processes run in the work folder
ROOT = SCRIPT.parents[1]
sys.path.insert(0, str(ROOT))  # runs from a checkout without installing the package
DATA = ROOT / "recipes" / "data"
TOKENIZER = ROOT / "benchmarks" / "data" / "smollm2-tokenizer"
# What every stage process runs with: no Hub kernels, no network (issue 40, finding 1), no tokenizer threads fighting
ENV = {"USE_HUB_KERNELS": "NO", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
MIN_STAGE_S = 8.0  # a stage is not started with less time left

# Llama-3.2-1B's and Llama-3.1-8B's shapes (random weights); the smoke mode's tiny stand-ins keep a vocabulary
# larger than the tokenizer's, as the real shapes do (the GGUF writer names the extra ids as padding)
SHAPES = {
    "1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
               num_key_value_heads=8, head_dim=64, tie_word_embeddings=True, vocab_size=128256),
    "8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
               num_key_value_heads=8, head_dim=128, tie_word_embeddings=False, vocab_size=128256),
}  # fmt: skip
SMOKE_SHAPES = {
    "1b": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, head_dim=16, tie_word_embeddings=True, vocab_size=49216),
    "8b": dict(hidden_size=96, intermediate_size=192, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, head_dim=24, tie_word_embeddings=False, vocab_size=49216),
}  # fmt: skip


@dataclass
class Settings:
    """The workload of one mode: the ratio's and the CLI stages' sizes, the dtype and the device."""

    smoke: bool
    device: str
    dtype: str
    ratio_samples: int
    ratio_tokens: int
    batch: int
    samples: int  # calibration texts per set of the CLI stages
    max_length: int
    eval_samples: int
    new_tokens: int
    quickstart_sets: tuple[str, ...]

    @classmethod
    def of(cls, smoke: bool) -> Settings:
        if smoke:  # bf16 on the CPU too: the data-parallel check must compare like with like in bf16
            qs = ("data.samples=4", "evaluation.samples=2", "evaluation.max_new_tokens=4")
            return cls(True, "cpu", "bfloat16", 8, 32, 4, 4, 32, 2, 4, qs)
        return cls(False, "cuda", "bfloat16", 64, 512, 8, 32, 512, 16, 32, ())


# ------------------------------------------------------------------------------------------------ results


@dataclass
class Results:
    """The records so far, written to ``gpu_check.jsonl`` (appended) and ``gpu_check.md`` (rewritten) each time."""

    folder: Path
    header: dict[str, Any]
    records: list[dict[str, Any]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)  # the quickstart's two runs finish at once

    def __post_init__(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / "gpu_check.jsonl").write_text(json.dumps({"header": self.header}) + "\n")
        self.write_markdown()

    def add(self, record: dict[str, Any]) -> None:
        with self._lock:
            self.records.append(record)
            with open(self.folder / "gpu_check.jsonl", "a", encoding="utf-8") as f:
                f.write(json.dumps(record, default=str) + "\n")
                f.flush()
            self.write_markdown()
        print(f"gpu_check: {record.get('stage')}: {record.get('status')} ({record.get('wall_s', '-')} s)", flush=True)

    def write_markdown(self) -> None:
        (self.folder / "gpu_check.md").write_text(to_markdown(self.header, self.records), encoding="utf-8")


def _gb(n: Any) -> str:
    return "-" if not isinstance(n, (int, float)) else f"{n / 1e9:.2f}"


def to_markdown(header: dict[str, Any], records: list[dict[str, Any]]) -> str:
    """The summary: the header, the stage table, then the ratio, data-parallel and quickstart findings."""
    lines = [
        f"## gpu_check, {header.get('date')}, {header.get('device')}",
        "",
        f"{header.get('versions')}; budget {header.get('budget_s')} s; settings: {header.get('settings')}.",
        "",
        "| stage | status | wall s | peak GPU GB (torch) | plan GB (device) | peak RSS GB | plan GB (RAM) | GPU util mean / max % |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in records:
        if "stage" not in r or r.get("kind") != "stage":
            continue
        util = r.get("gpu_util") or {}
        lines.append(
            f"| {r['stage']} | {r['status']} | {r.get('wall_s', '-')} | {_gb(r.get('peak_gpu_bytes'))} | "
            f"{_gb(r.get('plan_device_bytes'))} | {_gb(r.get('peak_rss_bytes'))} | {_gb(r.get('plan_ram_bytes'))} | "
            f"{util.get('mean', '-')} / {util.get('max', '-')} |"
        )
        for sub in r.get("stages") or []:
            lines.append(
                f"| &nbsp;&nbsp;{sub['label'][:70]} | | {sub['seconds']} | {_gb(sub.get('peak_gpu_bytes'))} | | | | |"
            )
    for r in records:
        if r.get("kind") == "ratio":
            lines += ["", f"calibrate / forward: {r.get('ratio')}x ({'meets' if (r.get('ratio') or 9) <= 1.1 else 'MISSES'} "
                      f"the <= 1.1x target); {r.get('calibrate_s')} s vs {r.get('forward_s')} s; "
                      f"data-parallel ({r.get('dp_backend')}, 1 rank) equals single process: {r.get('dp_equal')} "
                      f"(max relative difference {r.get('dp_max_rel')})."]  # fmt: skip
        if r.get("kind") == "compare":
            lines += ["", f"quickstart {r.get('a_label')} vs {r.get('b_label')}: {len(r.get('same', []))} files "
                      f"byte-identical, different: {', '.join(r.get('different', [])) or 'none'}; mask content "
                      f"sha256 equal: {r.get('mask_content_same')}; weights identical: {r.get('weights_same')}."]  # fmt: skip
        if r.get("kind") == "verdict":
            lines += ["", f"{r.get('stage')}: {r.get('verdict')}"]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------- GPU sampling


class GpuSampler:
    """NVML's GPU utilization and device memory in use, every ``period`` seconds, in a thread (``None`` values
    where NVML is absent: the CPU, or no nvidia-ml-py)."""

    def __init__(self, period: float = 0.2) -> None:
        self.period, self.util, self.used = period, [], []
        self._stop = threading.Event()
        self._handle = None
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        except Exception:  # noqa: BLE001 - no NVML: no utilization figures, the rest of the check runs
            self._handle = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.util.append(int(self._nvml.nvmlDeviceGetUtilizationRates(self._handle).gpu))
                self.used.append(int(self._nvml.nvmlDeviceGetMemoryInfo(self._handle).used))
            except Exception:  # noqa: BLE001
                return
            self._stop.wait(self.period)

    def __enter__(self) -> GpuSampler:
        if self._handle is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2)

    def summary(self) -> dict[str, Any] | None:
        if not self.util:
            return None
        return {
            "mean": round(sum(self.util) / len(self.util), 1),
            "max": max(self.util),
            "device_used_max": max(self.used),
        }


# ----------------------------------------------------------------------------------------- one CLI stage


def stage_in_process(cli_args: list[str]) -> dict[str, Any]:
    """Run one CLI command in this process; time each of its stage lines and the GPU memory torch allocated in it."""
    import torch

    from mathneuro_edit.cli.main import main
    from mathneuro_edit.util import console

    marks: list[dict[str, Any]] = []
    cuda = torch.cuda.is_available()
    t0 = time.perf_counter()

    def used() -> bool:  # asked only once CUDA is in use: a CPU-only stage never makes a CUDA context for this
        return cuda and torch.cuda.is_initialized()

    def close_mark() -> None:
        if marks and "seconds" not in marks[-1]:
            marks[-1]["seconds"] = round(time.perf_counter() - marks[-1]["t"], 2)
            marks[-1]["peak_gpu_bytes"] = torch.cuda.max_memory_allocated() if used() else None

    original = console.Stages.start

    def start(self: Any, label: str) -> None:
        close_mark()
        if used():
            torch.cuda.reset_peak_memory_stats()
        marks.append({"label": label, "t": time.perf_counter()})
        original(self, label)

    console.Stages.start = start  # type: ignore[method-assign]
    peak_total = 0
    code: Any = 0
    output = ""
    try:
        from click.testing import CliRunner

        result = CliRunner().invoke(main, cli_args)
        code, output = result.exit_code, result.output
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            output += f"\n{type(result.exception).__name__}: {result.exception}"
    finally:
        console.Stages.start = original  # type: ignore[method-assign]
        close_mark()
    peak_total = max(
        [m.get("peak_gpu_bytes") or 0 for m in marks] + [torch.cuda.max_memory_allocated() if used() else 0]
    )
    return {
        "code": code,
        "wall_s": round(time.perf_counter() - t0, 2),
        "peak_gpu_bytes": peak_total if used() else None,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "stages": [{k: v for k, v in m.items() if k != "t"} for m in marks],
        "output_tail": output[-1500:],
    }


@dataclass
class Context:
    """What every stage needs: the mode, where results go, the deadline, the work folder, the sampler switch."""

    settings: Settings
    results: Results
    deadline: float
    work: Path
    in_process: bool

    def left(self) -> float:
        return self.deadline - time.monotonic()


def run_stage(
    ctx: Context,
    name: str,
    cli_args: list[str],
    *,
    plan_device: int | None = None,
    plan_ram: int | None = None,
    needs: str | None = None,
) -> dict[str, Any]:
    """One CLI command as a stage: skipped when the budget is spent or a package it needs is missing, else run (a
    process of its own on a GPU, so that its peaks are its own) and recorded with ``plan``'s prediction."""
    record: dict[str, Any] = {"kind": "stage", "stage": name, "command": "mathneuro-edit " + " ".join(cli_args)}
    if needs and not _has(needs):
        record["status"] = f"skipped: {needs} not installed"
    elif ctx.left() < MIN_STAGE_S:
        record["status"] = "skipped: time budget"
    else:
        with GpuSampler() as sampler:
            metrics = _stage_metrics(ctx, cli_args)
        record.update(metrics)
        record["gpu_util"] = sampler.summary()
        code = metrics.get("code")
        record["status"] = "ok" if code == 0 else "cut short: time budget" if code == "timeout" else f"exit {code}"
    record["plan_device_bytes"], record["plan_ram_bytes"] = plan_device, plan_ram
    for kind, measured in (("device", record.get("peak_gpu_bytes")), ("ram", record.get("peak_rss_bytes"))):
        predicted = record[f"plan_{kind}_bytes"]
        if predicted and measured:
            record[f"{kind}_measured_over_plan"] = round(measured / predicted, 2)
    ctx.results.add(record)
    return record


def _stage_metrics(ctx: Context, cli_args: list[str]) -> dict[str, Any]:
    if ctx.in_process:
        return stage_in_process(cli_args)
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        metrics_path = f.name
    cmd = [sys.executable, str(SCRIPT), "--stage-child", metrics_path, "--", *cli_args]
    try:
        proc = subprocess.run(
            cmd, env=_child_env(), capture_output=True, text=True, timeout=max(ctx.left(), 1.0), cwd=str(ctx.work)
        )
    except subprocess.TimeoutExpired:
        return {"code": "timeout"}
    try:
        return json.loads(Path(metrics_path).read_text())
    except (OSError, ValueError):
        return {"code": proc.returncode, "output_tail": (proc.stdout + proc.stderr)[-1500:]}


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(ENV)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return env


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


# ------------------------------------------------------------------------------------------- the models


def make_model(name: str, folder: Path, s: Settings) -> Path:
    """A random model of ``name``'s shapes in ``folder`` (safetensors, bf16) with SmolLM2's real tokenizer."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    shapes = (SMOKE_SHAPES if s.smoke else SHAPES)[name]
    cfg = LlamaConfig(rope_theta=500000.0, max_position_embeddings=4096, bos_token_id=1, eos_token_id=2,
                      pad_token_id=2, dtype=s.dtype, **shapes)  # fmt: skip
    torch.manual_seed(0)
    default = torch.get_default_dtype()
    torch.set_default_dtype(getattr(torch, s.dtype))  # made in bf16: an 8B in float32 would be 32 GB first
    try:
        with torch.device(s.device):
            model = LlamaForCausalLM(cfg)
    finally:
        torch.set_default_dtype(default)
    model.generation_config = GenerationConfig(bos_token_id=1, eos_token_id=2, pad_token_id=2)
    model.save_pretrained(folder, max_shard_size="5GB")
    del model
    for f in TOKENIZER.iterdir():
        if f.name != "README.md":
            shutil.copy(f, folder / f.name)
    if s.device == "cuda":
        torch.cuda.empty_cache()
    return folder


def write_recipe(path: Path, model: Path, s: Settings, *, gguf: bool) -> Path:
    """The CLI stages' recipe: real GSM8K and WikiText text, the model on the mode's device."""
    import yaml

    recipe = {
        "base": {"model": str(model), "dtype": s.dtype, "device": s.device},
        "data": {
            "math": {"path": str(DATA / "gsm8k_train_200.jsonl")},
            "general": [{"path": str(DATA / "wikitext2_test_calib.txt")}],
            "samples": s.samples,
            "seed": 0,
        },
        "calibration": {"max_length": s.max_length, "batch_size": s.batch},
        "mask": {"method": "mathneuro", "top_k": 0.05},
        "edit": {"scale": 1.1},
        "outputs": {"checkpoint": True, "adapter": True, "gguf": "Q8_0" if gguf else None},
        "evaluation": {
            "math": {"path": str(DATA / "gsm8k_test_300.jsonl")},
            "general": [{"path": str(DATA / "wikitext2_valid_eval.txt")}],
            "samples": s.eval_samples,
            "max_new_tokens": s.new_tokens,
        },
    }
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    return path


# ------------------------------------------------------------------------------- 1. calibrate vs forward


class _Tok:
    """Pre-tokenized random ids: the ratio measures the model, not a tokenizer."""

    pad_token_id = 0
    eos_token_id = 0

    def __init__(self, texts_to_ids: dict[str, list[int]]) -> None:
        self.map = texts_to_ids

    def __call__(self, texts: list[str], **kw: Any) -> dict[str, Any]:
        return {"input_ids": [self.map[t] for t in texts]}


def _data(samples: int, tokens: int, vocab: int) -> tuple[list[str], _Tok, list[list[int]]]:
    import torch

    g = torch.Generator().manual_seed(1)
    ids = [torch.randint(3, vocab, (tokens,), generator=g).tolist() for _ in range(samples)]
    texts = [f"sample {i}" for i in range(samples)]
    return texts, _Tok(dict(zip(texts, ids))), ids


def _sync(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()


def _best(fn: Callable[[], None], device: Any, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        _sync(device)
        t0 = time.perf_counter()
        fn()
        _sync(device)
        best = min(best, time.perf_counter() - t0)
    return best


def load_like_the_cli(folder: Path, s: Settings) -> Any:
    """The saved model as the CLI and the data-parallel worker load it: ``from_pretrained`` in the run's dtype
    (RoPE's ``inv_freq`` stays float32), then moved to the device."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, s.dtype), use_safetensors=True)
    return model.to(s.device).eval()


def time_ratio(model: Any, s: Settings) -> tuple[dict[str, Any], Any]:
    """Best of 3 of a plain forward and of ``calibrate`` over the same batches, after one warm-up of each:
    ``(figures, the statistics)``."""
    import torch

    from mathneuro_edit import calibrate

    device = next(model.parameters()).device
    texts, tok, ids = _data(s.ratio_samples, s.ratio_tokens, min(model.config.vocab_size, 49152))
    batches = [torch.tensor(ids[i : i + s.batch], device=device) for i in range(0, len(ids), s.batch)]
    stats: list[Any] = []

    def forward() -> None:
        with torch.no_grad():
            for x in batches:
                model(input_ids=x, attention_mask=torch.ones_like(x), use_cache=False)

    def calib() -> None:
        stats[:] = [calibrate(model, tok, texts, max_length=s.ratio_tokens, batch_size=s.batch, progress=False)]

    forward(), calib()  # warm-up: kernels, allocator, lazy imports
    t_fwd, t_cal = _best(forward, device), _best(calib, device)
    tokens = s.ratio_samples * s.ratio_tokens
    figures = {
        "forward_s": round(t_fwd, 4),
        "calibrate_s": round(t_cal, 4),
        "ratio": round(t_cal / t_fwd, 3),
        "calibrate_tokens_per_s": round(tokens / t_cal),
        "forward_tokens_per_s": round(tokens / t_fwd),
        "workload": f"{s.ratio_samples} x {s.ratio_tokens} tokens, batch {s.batch}, {s.dtype}, best of 3",
    }
    return figures, stats[0]


def ratio_part(ctx: Context, name: str) -> None:
    """Write the first model, time calibration against a forward on it, check the data-parallel path; or record why
    not (the budget)."""
    if ctx.left() < 3 * MIN_STAGE_S:
        ctx.results.add({"kind": "stage", "stage": "ratio: calibrate vs forward", "status": "skipped: time budget"})
        return
    folder = make_model(name, ctx.work / f"model-{name}", ctx.settings)  # kept: the model's CLI stages use it too
    ratio_and_data_parallel(ctx, folder)


def ratio_and_data_parallel(ctx: Context, folder: Path) -> None:
    """Calibration vs a plain forward in one process, then ``calibrate_distributed`` with one rank against it."""
    import torch

    s = ctx.settings
    record: dict[str, Any] = {"kind": "ratio", "stage": "ratio: calibrate vs forward, data-parallel"}
    t0 = time.perf_counter()
    model = load_like_the_cli(folder, s)
    figures, ref = time_ratio(model, s)
    del model
    if s.device == "cuda":
        torch.cuda.empty_cache()
    record.update(figures)
    record.update(data_parallel(ctx, folder, ref))
    record.update(status="ok", wall_s=round(time.perf_counter() - t0, 1))
    ctx.results.add(record)


def data_parallel(ctx: Context, folder: Path, ref: Any) -> dict[str, Any]:
    """``calibrate_distributed`` with one rank, its model loaded as ``ref``'s was, against ``ref``: under
    ``torch.distributed.run`` on a GPU (as a user launches it), in this process on the CPU smoke (gloo, one rank:
    the same collectives without two more interpreters starting)."""
    import torch

    from mathneuro_edit import ActivationStats

    s = ctx.settings
    if ctx.left() < 2 * MIN_STAGE_S:
        return {"dp_equal": None, "dp_backend": "skipped: time budget"}
    out = ctx.work / "dp.stats.safetensors"
    t0 = time.perf_counter()
    if ctx.in_process:
        dp = dp_in_process(folder, out, s)
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1", str(SCRIPT),
               "--dp-worker", "--model-dir", str(folder), "--stats-out", str(out)] + (["--cpu-smoke"] if s.smoke else [])  # fmt: skip
        try:
            proc = subprocess.run(cmd, env=_child_env(), capture_output=True, text=True, timeout=max(ctx.left(), 1.0))
        except subprocess.TimeoutExpired:
            return {"dp_equal": None, "dp_backend": "cut short: time budget"}
        if proc.returncode != 0:
            return {"dp_equal": None, "dp_backend": f"failed: {proc.stderr[-500:]}"}
        dp = json.loads([ln for ln in proc.stdout.splitlines() if ln.startswith("{")][-1])
    got = ActivationStats.load(out)
    worst = 0.0
    for n in ref.targets:
        a, b = got.norm_sum[n], ref.norm_sum[n]
        worst = max(worst, float(((a - b).abs() / b.abs().clamp_min(1e-30)).max()))
    equal = all(
        torch.allclose(got.norm_sum[n], ref.norm_sum[n], rtol=1e-4, atol=1e-4)
        and torch.equal(got.token_count[n], ref.token_count[n])
        for n in ref.targets
    )
    return {
        "dp_equal": equal,
        "dp_bitwise": got.sha256 == ref.sha256,
        "dp_max_rel": f"{worst:.2g}",
        "dp_backend": dp["backend"],
        "dp_calibrate_s": round(dp["dp_seconds"], 3),
        "dp_wall_s": round(time.perf_counter() - t0, 1),
    }


def dp_in_process(folder: Path, out: Path, s: Settings) -> dict[str, Any]:
    """One gloo rank in this process (torchrun's environment set, then restored: later stages are single-process)."""
    import socket

    import torch.distributed as dist

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {"WORLD_SIZE": "1", "RANK": "0", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        return dp_calibrate(folder, out, s)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def dp_calibrate(folder: Path, out: Path, s: Settings) -> dict[str, Any]:
    """Load the saved model like the CLI does and ``calibrate_distributed`` it; rank 0 writes ``out``."""
    import torch

    from mathneuro_edit.engine.distributed import calibrate_distributed, local_device

    model = load_like_the_cli(folder, s).to("cpu" if s.smoke else local_device())
    texts, tok, _ = _data(s.ratio_samples, s.ratio_tokens, min(model.config.vocab_size, 49152))
    t0 = time.perf_counter()
    calibrate_distributed(model, tok, texts, out=out, max_length=s.ratio_tokens, batch_size=s.batch,
                          progress=False, timeout_s=300)  # fmt: skip
    _sync(next(model.parameters()).device)
    return {"dp_seconds": time.perf_counter() - t0, "backend": torch.distributed.get_backend()}


def _dp_worker(args: argparse.Namespace) -> None:
    """Under torch.distributed.run: :func:`dp_calibrate`, its figures as one JSON line."""
    print(json.dumps(dp_calibrate(Path(args.model_dir), Path(args.stats_out), Settings.of(args.cpu_smoke))))


# --------------------------------------------------------------------------------------- 2. the quickstart


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def compare_runs(a: Path, b: Path) -> dict[str, Any]:
    """Two run folders file by file: byte-identical, different, present in one only; the masks' content hashes."""
    from mathneuro_edit.engine.mask import Mask

    files_a = {p.relative_to(a).as_posix() for p in a.rglob("*") if p.is_file()}
    files_b = {p.relative_to(b).as_posix() for p in b.rglob("*") if p.is_file()}
    same = sorted(f for f in files_a & files_b if sha256_of(a / f) == sha256_of(b / f))
    weights = [
        f for f in files_a & files_b if f.endswith(".safetensors") and f.split("/")[0] in ("checkpoint", "adapter")
    ]
    return {
        "same": same,
        "different": sorted((files_a & files_b) - set(same)),
        "only_a": sorted(files_a - files_b),
        "only_b": sorted(files_b - files_a),
        "mask_content_same": Mask.load(a / "mask.safetensors").sha256 == Mask.load(b / "mask.safetensors").sha256,
        "weights_same": bool(weights) and all(f in same for f in weights),
    }


def quickstart(ctx: Context) -> None:
    """The quickstart on the accelerator and on the CPU (at once on a GPU machine), their files compared."""
    s = ctx.settings
    a, b = ctx.work / "quickstart-a", ctx.work / "quickstart-b"
    first = "cuda" if not s.smoke else "cpu"
    sets = [x for kv in s.quickstart_sets for x in ("--set", kv)]
    second = " (a second run)" if s.smoke else ""  # the smoke's "accelerator" run is the CPU's too
    runs = [(f"quickstart: run on {first}", a, first), (f"quickstart: run on cpu{second}", b, "cpu")]
    if ctx.in_process:
        for name, out, device in runs:
            run_stage(ctx, name, ["run", "--out", str(out), "-q", *sets, "--set", f"base.device={device}"])
    else:  # both at once: the CPU run's cores and the GPU run's device do not compete much, and time is short
        threads = [
            threading.Thread(target=run_stage, args=(ctx, name, ["run", "--out", str(out), "-q", *sets, "--set", f"base.device={device}"]))
            for name, out, device in runs
        ]  # fmt: skip
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    if not ((a / "mask.safetensors").is_file() and (b / "mask.safetensors").is_file()):
        return
    found = compare_runs(a, b)
    ctx.results.add({"kind": "compare", "stage": "quickstart: files compared", "status": "ok",
                     "a_label": first, "b_label": "cpu", **found})  # fmt: skip


def quickstart_reproduced_on_cpu(ctx: Context) -> None:
    """``reproduce`` of the quickstart's accelerator run on the CPU: the verdict across devices (issue 40, item 2)."""
    s = ctx.settings
    a = ctx.work / "quickstart-a"
    if not (a / "mask.safetensors").is_file():
        return
    first = "cuda" if not s.smoke else "cpu"
    sets = [x for kv in s.quickstart_sets for x in ("--set", kv)]
    name = f"quickstart: reproduce the {first} run on cpu"
    rec = run_stage(ctx, name, ["reproduce", str(a), "-q", "--set", "base.device=cpu", *sets])
    tail = (rec.get("output_tail") or "").strip().splitlines()
    verdict = next((ln for ln in reversed(tail) if ln.startswith("reproduced:")), None)
    ctx.results.add(
        {"kind": "verdict", "stage": "quickstart: the verdict", "status": rec["status"], "verdict": verdict}
    )


# ------------------------------------------------------------------------------------------- 3. a model


@dataclass
class ModelSetup:
    """A random model written to disk, its recipe, and every CLI stage on it with ``plan``'s predictions:
    ``label -> (CLI arguments, plan's device bytes, plan's RAM bytes, a package it needs)``."""

    name: str
    folder: Path
    stages: dict[str, tuple[list[str], int | None, int | None, str | None]]


def prepare_model(ctx: Context, name: str, *, gguf: bool) -> ModelSetup | None:
    """Write the random model and its recipe and plan its stages (``None``, recorded, when the time is short)."""
    from mathneuro_edit.recipe.io import load_recipe
    from mathneuro_edit.runs.plan import plan_recipe

    s = ctx.settings
    if ctx.left() < (150 if name == "8b" and not s.smoke else 3 * MIN_STAGE_S):  # an 8B is 16 GB to write first
        ctx.results.add({"kind": "stage", "stage": f"{name}: all stages", "status": "skipped: time budget"})
        return None
    folder = ctx.work / f"model-{name}"
    t0 = time.perf_counter()
    if not folder.is_dir():
        make_model(name, folder, s)
    ctx.results.add({"kind": "stage", "stage": f"{name}: write the random model", "status": "ok",
                     "wall_s": round(time.perf_counter() - t0, 1)})  # fmt: skip
    recipe = write_recipe(ctx.work / f"{name}.yaml", folder, s, gguf=gguf and _has("gguf"))
    plan = plan_recipe(load_recipe(recipe))
    ram, w = plan.ram, ctx.work
    evaluation = max(plan.eval_general_bytes, plan.eval_math_bytes)
    run_device = max(plan.calibration_peak_bytes, evaluation)
    r, out, stats, mask = str(recipe), w / f"{name}-run", w / f"{name}-stats", str(w / f"{name}-mask.safetensors")
    base = ["--base", str(folder)]
    redacted = [f"--set={k}={v}" for k, v in (
        ("data.math.path", DATA / "gsm8k_train_200.jsonl"), ("data.general.0.path", DATA / "wikitext2_test_calib.txt"),
        ("evaluation.math.path", DATA / "gsm8k_test_300.jsonl"),
        ("evaluation.general.0.path", DATA / "wikitext2_valid_eval.txt"))]  # fmt: skip
    adapter = str(w / f"{name}-adapter")
    stages = {
        "run": (["run", r, "--out", str(out), "-q"], run_device, ram["reproduce"], None),
        "verify": (["verify", str(out), *base, "-q"], None, ram["verify"], None),
        "calibrate": (["calibrate", r, "--out", str(stats), "-q"], plan.calibration_peak_bytes, ram["calibrate"], None),
        "mask": (["mask", r, "--stats", str(stats), "--out", mask, "-q"], None, ram["mask"], None),
        "eval": (["eval", r, "--mask", mask, "--out", str(w / f"{name}-eval.json"), "-q"], evaluation, ram["eval"], None),
        "export checkpoint + GGUF Q8_0": (["export", r, "--mask", mask, "--out", str(w / f"{name}-export"),
                                          "--gguf", "Q8_0", "-q"], None, ram["export --gguf"], "gguf"),
        "export --adapter": (["export", r, "--mask", mask, "--adapter", "--out", adapter, "-q"], None,
                             ram["export --adapter"], None),
        "verify the adapter": (["verify", adapter, *base, "--mask", mask, "-q"], None, ram["verify (adapter)"], None),
        "reproduce": (["reproduce", str(out), *base, *redacted, "-q"], run_device, ram["reproduce"], None),
    }  # fmt: skip
    return ModelSetup(name, folder, stages)


def model_stages(ctx: Context, setup: ModelSetup | None, labels: list[str]) -> None:
    """The named stages of a prepared model, in order, each in a process of its own."""
    if setup is None:
        return
    for label in labels:
        args, device, ram, needs = setup.stages[label]
        run_stage(ctx, f"{setup.name}: {label}", args, plan_device=device, plan_ram=ram, needs=needs)


# The order of the check: what matters most first (a run cut short keeps it). The 8B gets the stages that bound a
# user's machine (calibrate, the mask step, the evaluation's memory, the adapter and its audit); its run, checkpoint
# + GGUF and reproduce only with --full.
FIRST_1B = ["run", "verify"]
REST_1B = ["calibrate", "mask", "eval", "export checkpoint + GGUF Q8_0", "export --adapter", "verify the adapter",
           "reproduce"]  # fmt: skip
HEAVY_8B = ["calibrate", "mask", "eval", "export --adapter", "verify the adapter"]
FULL_8B = ["run", "verify", "calibrate", "mask", "eval", "export checkpoint + GGUF Q8_0", "export --adapter",
           "verify the adapter", "reproduce"]  # fmt: skip


# ------------------------------------------------------------------------------------------------- main


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cpu-smoke", action="store_true", help="tiny models on the CPU, in this process (seconds)")
    p.add_argument("--budget", type=float, default=None, help="seconds for the whole check (default 345; smoke 600)")
    p.add_argument("--out", default=None, help="results folder (default $OUT, else gpu_check_results/)")
    p.add_argument("--work", default=None, help="folder for models and runs (default: a temporary folder)")
    p.add_argument("--models", default="1b,8b", help="comma-separated: 1b, 8b")
    p.add_argument("--full", action="store_true", help="also the 8B's run, checkpoint + GGUF and reproduce")
    p.add_argument("--skip", default="", help="comma-separated parts to skip: ratio, quickstart, models")
    p.add_argument("--doc", default=None, help="markdown file to append the summary to (docs/performance.md)")
    p.add_argument(
        "--processes",
        action="store_true",
        help="the smoke too runs each stage and the data-parallel rank in a process of its own, as on a GPU",
    )
    p.add_argument("--stage-child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--dp-worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--model-dir", help=argparse.SUPPRESS)
    p.add_argument("--stats-out", help=argparse.SUPPRESS)
    args, rest = p.parse_known_args()
    for k, v in ENV.items():
        os.environ.setdefault(k, v)
    if args.stage_child:  # one CLI stage in this process: its metrics to the given file
        metrics = stage_in_process([a for a in rest if a != "--"])
        Path(args.stage_child).write_text(json.dumps(metrics))
        return
    if args.dp_worker:
        _dp_worker(args)
        return
    run_check(args)


def run_check(args: argparse.Namespace) -> Results:
    """The whole check (see the module docstring); returns its results (also written to ``--out``)."""
    import torch
    import transformers

    s = Settings.of(args.cpu_smoke)
    if s.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("gpu_check: no CUDA device; run with --cpu-smoke on a CPU machine")
    budget = args.budget if args.budget is not None else (600.0 if s.smoke else 345.0)
    out = Path(args.out or os.environ.get("OUT") or "gpu_check_results")
    header = {
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "device": torch.cuda.get_device_name() if s.device == "cuda" else "cpu (smoke)",
        "versions": f"torch {torch.__version__}, transformers {transformers.__version__}",
        "budget_s": budget,
        "settings": {k: v for k, v in vars(s).items() if k != "quickstart_sets"},
    }
    results = Results(out, header)
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="gpu-check-"))
    work.mkdir(parents=True, exist_ok=True)
    ctx = Context(s, results, time.monotonic() + budget, work, in_process=s.smoke and not args.processes)
    skip = {x for x in args.skip.split(",") if x}
    models = [m for m in args.models.split(",") if m]
    try:
        if "ratio" not in skip and models:
            ratio_part(ctx, models[0])
        if "quickstart" not in skip:
            quickstart(ctx)
        if "models" not in skip:
            # the run writes the GGUF on a GPU (verify audits it); the smoke leaves that to `export --gguf` (seconds)
            small = prepare_model(ctx, "1b", gguf=not s.smoke) if "1b" in models else None
            model_stages(ctx, small, FIRST_1B)
            if "8b" in models:
                big = prepare_model(ctx, "8b", gguf=args.full and not s.smoke)
                model_stages(ctx, big, FULL_8B if args.full else HEAVY_8B)
                if big is not None and not s.smoke:  # the disk: an 8B is 16 GB
                    shutil.rmtree(big.folder, ignore_errors=True)
            model_stages(ctx, small, REST_1B)
        if "quickstart" not in skip:
            quickstart_reproduced_on_cpu(ctx)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    text = to_markdown(header, results.records)
    print(text)
    if args.doc:
        with open(args.doc, "a", encoding="utf-8") as f:
            f.write("\n" + text)
    return results


if __name__ == "__main__":
    main()
