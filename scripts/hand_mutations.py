"""Re-apply issue 17's hand mutations, each on its own scratch copy, and check that the named tests fail.

Usage:
    python scripts/hand_mutations.py            # all of them (3.6 min measured on the shared, loaded 2 cores)
    python scripts/hand_mutations.py front budget

Each mutation is one exact text replacement in one file; a mutation whose text is no longer found is reported as
STALE (the code moved: update the entry). Exit status 1 when a mutation is MISSED (the tests still pass) or stale.
Runs in a temporary copy of the working tree (tracked + untracked, not ignored files); the checkout is never
modified.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# label: (file, original text, mutated text, tests that must fail)
MUTATIONS: dict[str, tuple[str, str, str, list[str]]] = {
    "card-drops-recipe-sha256-row": (
        "mathneuro_edit/publish/card.py", '| recipe sha256 | `{lock.get("recipe_sha256", "")}` |\n', "",
        ["tests/publish/test_card.py::test_checkpoint_card_metadata_parses_back"]),
    "front": ("mathneuro_edit/runs/sweep_procedure.py", "if not dominated:", "if True:", ["tests/runs/test_sweep.py"]),
    "budget": ("mathneuro_edit/runs/sweep_procedure.py", "p.general_kl <= kl_budget and ", "", ["tests/runs/test_sweep.py"]),
    "confirm-either-direction": ("mathneuro_edit/runs/sweep_procedure.py", "return b, c, p, c > b and p < alpha",
                                 "return b, c, p, p < alpha", ["tests/runs/test_sweep_procedure.py", "tests/runs/test_sweep.py"]),
    "holm-without-running-max": ("mathneuro_edit/evaluation/significance.py",
                                 "running = max(running, min(1.0, (m - rank) * ps[i]))",
                                 "running = min(1.0, (m - rank) * ps[i])", ["tests/runs/test_sweep_procedure.py"]),
    "row-lowest-k": ("mathneuro_edit/engine/mask.py", "return [top_fraction(scores, k_of",
                     "return [top_fraction(-scores, k_of", ["tests/engine/test_regressions.py"]),
    "wanda-is-l2": ("mathneuro_edit/engine/mask.py", ".statistic(name, statistic)", '.statistic(name, "l2")',
                    ["tests/engine/test_regressions.py"]),
    "wanda-stat-is-l2": ("mathneuro_edit/engine/stats.py",
                         'return self.norm_sum[name] if kind == "l2" else self.sq_sum[name].sqrt()',
                         "return self.norm_sum[name]", ["tests/engine/test_regressions.py"]),
    "jaccard-is-containment": ("mathneuro_edit/runs/consistency.py", "union += int((x | y).sum())",
                               "union += int(x.sum())", ["tests/runs/test_consistency.py"]),
    "first-general-only": ("mathneuro_edit/engine/mask.py", "for gs in generals:", "for gs in generals[:1]:",
                           ["tests/engine/test_regressions.py"]),
    # issue 28 item 5: mask.reference official (the released script's arithmetic)
    "official-sums-in-float32": ("mathneuro_edit/engine/official.py", "torch.zeros_like(w, memory_format",
                                 "torch.zeros_like(w, dtype=torch.float32, memory_format",
        ["tests/engine/test_official.py"]),
    "official-fused-product-and-sum": ("mathneuro_edit/engine/official.py",
                                       "tmp.mul_(self.norms[name].to(w.device))  #",
                                       "acc.addcmul_(tmp, self.norms[name].to(w.device)); continue  #",
        ["tests/engine/test_official.py"]),
    "official-norm-in-float32": ("mathneuro_edit/engine/official.py", "x.norm(p=2, dim=1).to(torch.bfloat16)",
                                 "x.float().norm(p=2, dim=1)",
        ["tests/engine/test_official.py"]),
    "official-longest-first": ("mathneuro_edit/engine/official.py",
                               "ids, truncated = _tokenize(tokenizer, texts, max_length)\n",
                               "ids, truncated = _tokenize(tokenizer, texts, max_length)\n"
                               "    ids = sorted(ids, key=len, reverse=True)\n",
        ["tests/engine/test_official.py"]),
    "official-ties-to-higher-index": ("mathneuro_edit/engine/official.py",
                                      "top_fraction_flat(flat, [k_of(k, flat.numel()) for k in top_ks])):",
                                      "[s.flip(0) for s in top_fraction_flat(flat.flip(0), "
                                      "[k_of(k, flat.numel()) for k in top_ks])]):",
        ["tests/engine/test_official.py"]),
    "official-tied-head-scored": ("mathneuro_edit/engine/official.py",
                                  "find_targets(model, include=include, exclude=exclude).items()",
                                  "find_targets(model, include=include, exclude=exclude, "
                                  "include_tied_lm_head=True).items()",
        ["tests/engine/test_official.py"]),
    "official-embed-scored": ("mathneuro_edit/engine/official.py", ' and "embed" not in name\n', "\n",
        ["tests/engine/test_official.py"]),
    "run-ignores-official": ("mathneuro_edit/runs/pipeline.py", 'if m.reference == "official":  # its own',
                             'if False:  # its own', ["tests/runs/test_official_recipe.py"]),
    # issue 24: the GGUF of every family (tests that fail without llama.cpp too, so the run needs no build)
    "gguf-experts-stacked-reversed": ("mathneuro_edit/weights/gguf_writer.py",
                                      "names = tuple(members[i] for i in range(n_experts))",
                                      "names = tuple(members[i] for i in reversed(range(n_experts)))",
                                      ["tests/weights/test_gguf_moe.py"]),
    "gguf-longrope-factors-swapped": ("mathneuro_edit/weights/gguf_writer.py",
                                      'return long if name.startswith("rope_factors_long") else short',
                                      'return short if name.startswith("rope_factors_long") else long',
                                      ["tests/weights/test_gguf_rope.py"]),
    "gguf-gpt2-c-proj-not-transposed": ("mathneuro_edit/weights/gguf_arch/dense.py",
                                        '".c_attn.weight", ".c_proj.weight", ".c_fc.weight"',
                                        '".c_attn.weight", ".c_fc.weight"', ["tests/weights/test_gguf_gpt2.py"]),
    "gguf-gemma-norms-not-shifted": ("mathneuro_edit/weights/gguf_arch/gemma.py", "return 1.0 if cfg.get(",
                                     "return 0.0 if cfg.get(", ["tests/runs/test_families.py::"
                                                                "test_family_row_is_run_and_matches_the_doc"]),
    "gguf-spm-scores-flat": ("mathneuro_edit/weights/gguf_vocab.py",
                             "kind, score = gguf.TokenType.NORMAL, -float(ranks[t]) if t in ranks else 0.0",
                             "kind, score = gguf.TokenType.NORMAL, -1000.0", ["tests/weights/test_gguf_vocab.py"]),
    "gguf-moe-norm-topk-not-refused": ("mathneuro_edit/weights/gguf_arch/moe.py",
                                       'if model_type != "mixtral" and bool(cfg.get("norm_topk_prob", False))',
                                       'if False and bool(cfg.get("norm_topk_prob", False))',
                                       ["tests/weights/test_gguf_moe.py"]),
}


def _copy_tree(dest: Path) -> None:
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, check=True).stdout.decode().split("\0")
    for rel in filter(None, files):
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def main(labels: list[str]) -> int:
    unknown = [x for x in labels if x not in MUTATIONS]
    if unknown:
        print(f"unknown mutation(s) {unknown}; choose from: {', '.join(MUTATIONS)}", file=sys.stderr)
        return 2
    bad = 0
    for label in labels or list(MUTATIONS):
        rel, old, new, tests = MUTATIONS[label]
        with tempfile.TemporaryDirectory(prefix="mathneuro-hand-mutation-") as tmp:
            dest = Path(tmp)
            _copy_tree(dest)
            path = dest / rel
            text = path.read_text()
            if old not in text:
                print(f"{label}: STALE (text not found in {rel})")
                bad += 1
                continue
            path.write_text(text.replace(old, new))
            env = {**os.environ, "PYTHONPATH": str(dest), "OMP_NUM_THREADS": "1"}
            proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests],
                                  cwd=dest, env=env, capture_output=True, text=True)
            failed = [ln for ln in proc.stdout.splitlines() if ln.startswith("FAILED")]
            if proc.returncode == 0:
                print(f"{label}: MISSED ({' '.join(tests)} still pass)")
                bad += 1
            else:
                print(f"{label}: caught by {failed[0].split(' ')[1] if failed else 'pytest exit ' + str(proc.returncode)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
