#!/usr/bin/env bash
# GPU smoke test of generation for each vLLM placement (run on a GPU node, from the repository root):
# a random-init ~0.5B Qwen3.5-architecture model served by vLLM, with
#   colocated (1 GPU):  generation tokens/s, sleep / wake_up(weights) / wake_up(kv_cache) seconds and the
#                       CUDA-IPC weight update seconds           -> results/gpu_smoke_colocated.json
#   dedicated (2+ GPUs): generation tokens/s and the NCCL weight update seconds
#                                                                -> results/gpu_smoke_dedicated.json
# Nothing is installed or downloaded. Without vLLM (the `gpu` extra: pip install -e '.[gpu]', ~3 GB of
# wheels) it says so in one line and runs the single-GPU learner check only (scripts/gpu_check.sh).
#   bash scripts/gpu_smoke.sh [--placement colocated|dedicated] [--sleep-level 1|2]
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
if ! "$PYTHON" -c "import vllm" 2>/dev/null; then
    echo "gpu_smoke: vLLM is not installed (pip install -e '.[gpu]'); running the single-GPU learner check only"
    exec bash scripts/gpu_check.sh
fi
if [ "$#" -gt 0 ]; then
    exec "$PYTHON" benchmarks/gpu_smoke.py "$@"
fi
"$PYTHON" benchmarks/gpu_smoke.py --placement colocated
gpus=$(nvidia-smi --list-gpus | wc -l)
if [ "$gpus" -ge 2 ]; then
    "$PYTHON" benchmarks/gpu_smoke.py --placement dedicated
else
    echo "gpu_smoke: dedicated placement skipped: it needs 2 GPUs, this machine has $gpus"
fi
