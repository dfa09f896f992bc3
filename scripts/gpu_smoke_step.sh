#!/usr/bin/env bash
# One full WMRL step on a GPU node (issue 10, "Must show", last bullet), from the repository root:
# a random-init Qwen3.5-architecture model of ~0.6B parameters, vLLM generation with CUDA-IPC weight
# sync, the world model as a second vLLM engine, the DeepSpeed learner (bf16, ZeRO-2) and anchor
# executions in local workers. Prints the step-time breakdown and writes
# results/gpu_smoke_step/breakdown.json. Installs what scripts/gpu_smoke.sh installs (the `gpu` extra:
# vLLM with its CUDA torch) and nothing else; the model and the task pool are built here.
#   bash scripts/gpu_smoke_step.sh [--tasks-root DIR] [--out DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c "import vllm" 2>/dev/null; then
    "$PYTHON" -m pip install -q -e '.[gpu]'
fi
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
exec "$PYTHON" scripts/gpu_smoke_step.py "$@"
