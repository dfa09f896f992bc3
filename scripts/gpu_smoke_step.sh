#!/usr/bin/env bash
# The GPU smoke test, extended to one full WMRL step (issue 10, "Must show", last bullet). Run on a
# GPU node from the repository root. First scripts/gpu_smoke.sh for the colocated placement: vLLM
# generation, sleep/wake and one weight update (it needs the `gpu` extra: pip install -e '.[gpu]'). Then
# one step of the LLM trainer on a random-init ~0.6B Qwen3.5-architecture model: vLLM generation with
# CUDA-IPC weight sync, the world model as a second vLLM engine, the DeepSpeed learner (bf16, ZeRO-2),
# anchor executions in local workers. Prints the step-time breakdown and writes OUT/breakdown.json.
# Nothing else is installed; the model and the task pool are built here, never downloaded.
#   bash scripts/gpu_smoke_step.sh [--tasks-root DIR] [--out results/gpu_smoke_step]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/gpu_smoke.sh --placement colocated
exec "${PYTHON:-python3}" scripts/gpu_smoke_step.py "$@"
