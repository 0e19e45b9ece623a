"""Each quantized GGUF of a run against the base quantized the same way, in llama.cpp, paired, on held-out problems.

Usage:

    python scripts/eval_gguf_pair.py out/smollm2-gguf --base PATH/SmolLM2-135M-Instruct.Q4_1.gguf \\
        --n 300 --skip 2200 --out docs/data/smollm2-gguf/eval.json

For every ``checkpoint/model-<TYPE>.gguf`` of the run folder (its quantized types): the base is exported as the run
exported the edit (its checkpoint at the checkpoint's dtype, the same float GGUF, the same quantizer:
:func:`mathneuro_edit.weights.gguf_quantize.write_gguf_types`, into a temporary folder), and both files answer the
same arithmetic problems in llama.cpp (llama-cpp-python): problems ``skip .. skip + n`` of the task's seed-0
stream (the boost search chose on the first 1,000 and confirmed on the next 1,200, so ``--skip 2200`` takes
problems it never saw), with the confirmation's prompt (0-shot, the chat template, the answer started by its
prefill), greedy, up to 8 new tokens, read by the evaluation's own rule. The prompt's token ids come from the
checkpoint's tokenizer (as the evaluation encodes them) and are fed to llama.cpp as ids. Prints, per type, both
accuracies with their 95% Wilson intervals, the paired difference and the exact McNemar p-value; ``--out`` writes
them with every problem's answers. Resumable: a type already in ``--out`` is not evaluated again.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from mathneuro_edit.data.arithmetic import arithmetic_problems
from mathneuro_edit.engine.mask import as_mask
from mathneuro_edit.evaluation.prompts import extract_prediction, render_prompt
from mathneuro_edit.evaluation.results import extract_answer
from mathneuro_edit.evaluation.significance import discordant_pairs, mcnemar_exact, wilson_interval
from mathneuro_edit.outputs.gguf import checkpoint_dtype
from mathneuro_edit.weights.base import resolve_base
from mathneuro_edit.weights.checkpoint_writer import export_checkpoint
from mathneuro_edit.weights.gguf_quantize import source_type, write_gguf_types
from mathneuro_edit.weights.gguf_writer import gguf_file_type

UNQUANTIZED = ("F32", "F16", "BF16")


def answers(path: Path, prompts: list[list[int]], threads: int, eos: int) -> list[str]:
    """Greedy completions (up to 8 tokens, stopped once the answer is complete) of llama.cpp on ``path``."""
    import llama_cpp

    llm = llama_cpp.Llama(model_path=str(path), n_ctx=256, n_threads=threads, verbose=False, seed=0)
    out = []
    for ids in prompts:
        got: list[int] = []
        for tok in llm.generate(ids, temp=0.0, top_k=1, reset=True):
            if int(tok) == eos:
                break
            got.append(int(tok))
            if len(got) == 8:
                break
        out.append(llm.detokenize(got).decode("utf-8", errors="replace"))
    return out


def summary(name: str, base: list[bool], edited: list[bool]) -> dict:
    n, kb, ke = len(base), sum(base), sum(edited)
    b, c = discordant_pairs(base, edited)
    return {
        "type": name,
        "n": n,
        "base": {"correct": kb, "accuracy": kb / n, "wilson95": wilson_interval(kb, n)},
        "edited": {"correct": ke, "accuracy": ke / n, "wilson95": wilson_interval(ke, n)},
        "difference_pp": 100 * (ke - kb) / n,
        "discordant": {"base_only": b, "edited_only": c},
        "mcnemar_p": mcnemar_exact(b, c),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path, help="the run folder (checkpoint/model-<TYPE>.gguf, mask.safetensors)")
    ap.add_argument("--base", required=True, help="the base the run edited (a .gguf file, folder or Hub id)")
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--skip", type=int, default=2200, help="problems of the seed-0 stream the search used")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--types", nargs="*", help="only these types (default: every quantized file)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    from transformers import AutoTokenizer

    ckpt = args.run / "checkpoint"
    tok = AutoTokenizer.from_pretrained(ckpt)
    problems = arithmetic_problems(args.skip + args.n, seed=0)[args.skip :]
    texts = [render_prompt(tok, p, [], chat=True) for p in problems]
    prompts = [list(ids) for ids in tok(texts, add_special_tokens=False)["input_ids"]]
    gold = [int(extract_answer(p["answer"])) for p in problems]
    done = json.loads(args.out.read_text()) if args.out and args.out.is_file() else {"types": {}}
    files = {gguf_file_type(p): p for p in sorted(ckpt.glob("model-*.gguf"))}
    todo = [t for t in files if t not in UNQUANTIZED and t not in done["types"] and t in (args.types or files)]
    dtype = checkpoint_dtype(ckpt)
    with tempfile.TemporaryDirectory(dir=args.run, prefix=".eval-gguf-") as tmp:
        base_files = {}
        if todo:
            mask = as_mask(args.run / "mask.safetensors")
            base_ck = export_checkpoint(resolve_base(args.base), mask, 1.0, Path(tmp) / "base", dtype=dtype)
            base_files = write_gguf_types(base_ck, todo, source=source_type(dtype))
        for t in todo:
            t0 = time.time()
            right = {}
            for who, path in (("base", base_files[t]), ("edited", files[t])):
                said = answers(path, prompts, args.threads, tok.eos_token_id)
                pre = [p["prefill"] for p in problems]
                right[who] = [extract_prediction(s, f) == g for s, f, g in zip(said, pre, gold)]
                right[who + "_answers"] = said
            row = summary(t, right["base"], right["edited"])
            row["seconds"] = round(time.time() - t0, 1)
            done["types"][t] = {**row, "answers": {k: right[k + "_answers"] for k in ("base", "edited")}}
            print(
                f"{t}: base {row['base']['accuracy']:.1%} {tuple(round(x, 3) for x in row['base']['wilson95'])}, "
                f"edited {row['edited']['accuracy']:.1%} {tuple(round(x, 3) for x in row['edited']['wilson95'])}, "
                f"{row['difference_pp']:+.1f} pp, McNemar p = {row['mcnemar_p']:.3g} (n = {row['n']}, "
                f"{row['seconds']} s)",
                flush=True,
            )
            if args.out:
                done.update({"n": args.n, "skip": args.skip, "prompt": "0-shot, chat template, prefill"})
                args.out.write_text(json.dumps(done, indent=1) + "\n")


if __name__ == "__main__":
    main()
