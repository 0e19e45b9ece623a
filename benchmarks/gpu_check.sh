#!/usr/bin/env bash
# GPU check of mathneuro-edit: every CLI stage on CUDA (run, calibrate, mask, eval, export checkpoint + GGUF and
# adapter, verify, reproduce) on random Llama-3.2-1B- and Llama-3.1-8B-shaped models with a real tokenizer and
# real GSM8K/WikiText text, the quickstart on CUDA and on the CPU with their files compared, and calibration
# against a plain forward; within about 6 minutes on one H200 (start-up of the machine aside). Each stage's wall
# time, peak GPU memory, GPU utilization and `plan`'s prediction go to OUT/gpu_check.jsonl and OUT/gpu_check.md
# as they are made (a run cut short leaves what it measured). Never required by the tests; its CPU smoke mode is
# (tests/test_gpu_check_smoke.py).
#
#   bash benchmarks/gpu_check.sh --out "$OUT"            # on a GPU machine (default budget 345 s)
#   bash benchmarks/gpu_check.sh --cpu-smoke --out DIR    # tiny models on the CPU: checks the script, seconds
#   bash benchmarks/gpu_check.sh --doc docs/performance.md   # also append the summary there
#
# Offline, and no code from the Hub: the same settings a user without network has (issue 40).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
export USE_HUB_KERNELS=NO HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
"$PY" - <<'PYEOF'
import importlib.util, sys
need = ("torch", "transformers", "accelerate", "safetensors", "tqdm", "peft", "yaml", "click", "pydantic", "numpy")
missing = [m for m in need if importlib.util.find_spec(m) is None]
if missing:
    sys.exit(f"gpu_check: missing Python packages: {' '.join(missing)} (install them, or carry their wheels)")
for optional, what in (("gguf", "the GGUF stages are skipped"), ("pynvml", "no GPU utilization figures")):
    if importlib.util.find_spec(optional) is None:
        print(f"gpu_check: {optional} is not installed: {what}", file=sys.stderr)
PYEOF
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec "$PY" benchmarks/gpu_check.py "$@"
