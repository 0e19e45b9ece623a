#!/usr/bin/env bash
# GPU check of mathneuro-edit's scale-out path, in one short run on a lent GPU (a few minutes):
# calibrate vs plain forward on a random ~1B Llama in bf16, tokens/s, peak GPU memory (vs the planner's
# estimate), and calibrate_distributed with one rank under torchrun (nccl). Results are appended to
# docs/performance.md with the date and the device. Never required by the tests.
#
#   bash benchmarks/gpu_check.sh               # on a GPU machine
#   bash benchmarks/gpu_check.sh --cpu-smoke   # tiny model on CPU: checks the script, prints only
#   GPU_CHECK_STRICT=1 bash benchmarks/gpu_check.sh   # exit 1 if the ratio is > 1.1x or the data-parallel
#                                                     # statistics differ from single-process ones
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
"$PY" - <<'EOF'
import importlib, sys
missing = [m for m in ("torch", "transformers", "accelerate", "safetensors", "tqdm") if importlib.util.find_spec(m) is None]
if missing:
    sys.exit(f"gpu_check: missing Python packages: {' '.join(missing)} (pip install them first)")
EOF
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" TOKENIZERS_PARALLELISM=false
exec "$PY" benchmarks/gpu_check.py "$@"
