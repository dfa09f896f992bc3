#!/usr/bin/env bash
# GPU smoke test of the vLLM generation backend (run on a GPU node, from the repository root):
# installs the `gpu` extra (vLLM with its CUDA torch) unless vLLM is already importable, then runs a
# random-init Qwen3.5-architecture model of ~0.5B parameters through vLLM generation and one weight
# update through the native weight-transfer API, and prints tokens/s and seconds.
#   bash scripts/gpu_smoke.sh [--transfer ipc|nccl] [--out results/gpu_smoke.json]
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c "import vllm" 2>/dev/null; then
    "$PYTHON" -m pip install -q -e '.[gpu]' || {
        echo "gpu_smoke: vLLM is not installed and 'pip install -e .[gpu]' failed (vLLM 0.27-0.33 with its own" \
             "CUDA torch, ~3 GB of wheels: this needs PyPI, or a wheelhouse: PIP_FIND_LINKS=DIR PIP_NO_INDEX=1)" >&2
        exit 1
    }
fi
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
exec "$PYTHON" benchmarks/gpu_smoke.py "$@"
