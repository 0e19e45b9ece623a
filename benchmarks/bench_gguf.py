"""GGUF export on a real model: edit, write GGUF, read it back with transformers and with llama.cpp.

Steps (each number printed is a measurement of this run):

1. the base: an HF folder (``--base DIR``), or a GGUF file (``--base-gguf FILE``) loaded with transformers'
   GGUF loader, copied into a fresh model of the same config and saved (safetensors + tokenizer);
2. a MathNeuro mask from ``--samples`` math texts (GSM8K jsonl) and general texts (WikiText), scale 1.1;
3. ``export_checkpoint(..., gguf=TYPE)`` for each ``--types``; the GGUF is also re-written alone in a subprocess
   whose peak RSS (``VmHWM``) is reported with its baseline after the imports;
4. transformers' GGUF loader: every tensor must equal ``dequantize(quantize(baked tensor))`` (gguf.quants; with
   4/5-bit types the embedding is Q8_0), and the max |GGUF - baked| is reported;
5. llama.cpp (llama-cpp-python, when importable): the same tokens as the HF tokenizer on the prompts, the same
   greedy continuation as transformers running the GGUF's weights, and the max logit difference.

Usage: ``python benchmarks/bench_gguf.py --base-gguf /path/SmolLM2-135M-Instruct.Q4_1.gguf --math gsm8k_train.jsonl
--general wikitext2_valid.txt [--types Q4_1,Q8_0] [--samples 8] [--workdir DIR]``
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROMPTS = [
    "Question: Tom has 3 apples and buys 4 more. How many apples does he have?\nAnswer:",
    "The capital of France is",
    "12 * 7 =",
]


def _peak_rss(folder: Path, out: Path, qtype: str) -> dict:
    code = f"""
import json, re
def hwm(): return int(re.search(r"VmHWM:\\s+(\\d+)", open("/proc/self/status").read()).group(1)) / 1024
import numpy, torch, gguf, safetensors
from mathneuro_edit.weights.gguf_writer import write_gguf
before = hwm()
write_gguf({str(folder)!r}, {str(out)!r}, {qtype!r}, name="local model (MathNeuro edit)")
print(json.dumps({{"baseline_mb": before, "peak_mb": hwm()}}))
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base")
    ap.add_argument("--base-gguf")
    ap.add_argument("--math", required=True)
    ap.add_argument("--general", required=True)
    ap.add_argument("--types", default="Q4_1,Q8_0")
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--workdir")
    a = ap.parse_args()
    import gguf
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mathneuro_edit import calibrate, find_math_params
    from mathneuro_edit.weights.checkpoint_writer import export_checkpoint

    torch.set_num_threads(1)
    work = Path(a.workdir or tempfile.mkdtemp(prefix="bench-gguf-"))
    base = Path(a.base) if a.base else work / "base"
    if a.base_gguf and not base.exists():
        src = Path(a.base_gguf)
        loaded = AutoModelForCausalLM.from_pretrained(src.parent, gguf_file=src.name)
        fresh = AutoModelForCausalLM.from_config(loaded.config)
        fresh.load_state_dict(loaded.state_dict())
        fresh.save_pretrained(base)
        AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name).save_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base).eval()
    tok = AutoTokenizer.from_pretrained(base)
    size_mb = sum(p.numel() * p.element_size() for p in model.parameters()) / 2**20
    print(f"base: {sum(p.numel() for p in model.parameters()):,} parameters, {size_mb:.0f} MiB in memory")
    math = [
        (lambda r: r["question"] + "\n" + r["answer"])(json.loads(line))
        for line in Path(a.math).read_text().splitlines()[: a.samples]
    ]
    general = [t for t in Path(a.general).read_text().split("\n") if len(t) > 200][: a.samples]
    kw = dict(max_length=128, batch_size=4, progress=False)
    mask = find_math_params(model, calibrate(model, tok, math, **kw), calibrate(model, tok, general, **kw), top_k=0.05)
    print(f"mask: {mask.total()[0]:,} of {mask.total()[1]:,} weights")
    del model
    for qtype in a.types.split(","):
        out = work / f"edited-{qtype}"
        t0 = time.perf_counter()
        export_checkpoint(base, mask, 1.1, out, gguf=qtype, overwrite=True)
        dt = time.perf_counter() - t0
        path = out / f"model-{qtype}.gguf"
        rss = _peak_rss(out, work / f"alone-{qtype}.gguf", qtype)
        same = (work / f"alone-{qtype}.gguf").read_bytes() == path.read_bytes()
        print(
            f"\n{qtype}: {path.stat().st_size / 2**20:.1f} MiB, export+gguf {dt:.1f} s; gguf alone: peak RSS "
            f"{rss['peak_mb']:.0f} MiB (baseline after imports {rss['baseline_mb']:.0f} MiB, model {size_mb:.0f} MiB);"
            f" re-written file byte-identical: {same}"
        )
        baked = AutoModelForCausalLM.from_pretrained(out).eval()
        got = AutoModelForCausalLM.from_pretrained(out, gguf_file=path.name).eval()
        exact, worst = True, 0.0
        gs = got.state_dict()
        for k, v in baked.state_dict().items():
            if v.ndim == 1:
                want = v
            else:
                t = gguf.GGMLQuantizationType[
                    "Q8_0" if qtype.startswith(("Q4", "Q5")) and ("embed" in k or "lm_head" in k) else qtype
                ]
                want = torch.from_numpy(gguf.quants.dequantize(gguf.quants.quantize(v.float().numpy(), t), t))
            exact &= torch.equal(gs[k].float(), want.float())
            worst = max(worst, float((gs[k].float() - v.float()).abs().max() / v.float().abs().max()))
        print(
            f"transformers: {len(gs)} tensors == quantize->dequantize of the baked ones: {exact}; "
            f"max |GGUF - baked| / max|baked| = {worst:.4f}"
        )
        try:
            import llama_cpp
        except ImportError:
            print("llama.cpp: llama_cpp not importable, skipped")
            continue
        llm = llama_cpp.Llama(model_path=str(path), n_ctx=256, n_threads=2, logits_all=True, verbose=False)
        for prompt in PROMPTS:
            text = tok.apply_chat_template(
                [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
            )
            ids = tok(text, add_special_tokens=False).input_ids
            cpp_ids = llm.tokenize(text.encode(), add_bos=False, special=True)
            hf_out = got.generate(torch.tensor([ids]), max_new_tokens=16, do_sample=False)[0, len(ids) :].tolist()
            cpp_out = []
            for t in llm.generate(ids, temp=0.0, top_k=1, reset=True):
                cpp_out.append(int(t))
                if len(cpp_out) == 16 or t == tok.eos_token_id:
                    break
            hf_out = hf_out[: len(cpp_out)]
            llm.reset()
            llm.eval(ids)
            cpp = np.array(llm.scores[: len(ids)])
            hf = got(torch.tensor([ids])).logits[0].detach().numpy()
            print(
                f"llama.cpp {prompt[:30]!r}: tokens equal {cpp_ids == ids}; greedy equal {cpp_out == hf_out} "
                f"({tok.decode(cpp_out)!r}); max |logit diff| {np.abs(cpp - hf).max():.4f} (logit range "
                f"{np.abs(hf).max():.1f})"
            )


if __name__ == "__main__":
    main()
