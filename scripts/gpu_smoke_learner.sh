#!/usr/bin/env bash
# The learner's GPU smoke (issue 20, item 7), for a GPU machine that has torch with CUDA but no vLLM and
# maybe no network: one learner step of a random-init Qwen3.5-architecture model (model.architecture of
# the config: the 4B by default) with the real 248k-token vocabulary, at 24k tokens, ZeRO-3 on one GPU,
# the chunked loss head and the shipped precision; prints the measured peak memory beside `wmrl plan`'s
# learner-phase figure and the step's seconds, and writes OUT/result.{json,md}. From the repository root:
#
#   bash scripts/gpu_smoke_learner.sh [--out results/gpu_smoke_learner] [--config C] [key=value ...]
#
# What torch does not bring (DeepSpeed, omegaconf, pydantic, hjson, ...) is installed from wheels carried
# in .whl/ (pip --no-index, into /tmp/site), when they are not importable. Make that folder where pip
# reaches PyPI, once:  bash scripts/gpu_smoke_learner.sh --fetch-wheels   (Python 3.12, x86-64 wheels;
# DeepSpeed and antlr4 are built here as pure-Python wheels, no CUDA op is compiled).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
WHEELS=.whl
# Versions this repository is tested with (the CPU venv), the DeepSpeed floor of pyproject.toml.
PACKAGES=(deepspeed==0.19.8 omegaconf==2.4.0 antlr4-python3-runtime==4.9.3 hjson==3.1.0 pydantic==2.14.4
          pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 py-cpuinfo==9.0.0)

if [[ "${1:-}" == "--fetch-wheels" ]]; then
    mkdir -p "$WHEELS"
    for pkg in "${PACKAGES[@]}"; do
        "$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
            --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
            -d "$WHEELS" "$pkg" 2>/dev/null || "$PYTHON" -m pip wheel -q --no-deps --no-build-isolation -w "$WHEELS" "$pkg"
    done
    ls -1 "$WHEELS"
    exit 0
fi

if ! "$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    echo "gpu_smoke_learner: no CUDA device (torch missing or torch.cuda.is_available() is False): this smoke" \
         "measures a GPU and runs nowhere else. Its CPU-equivalent path: $PYTHON scripts/gpu_smoke_learner.py" \
         "--device cpu --tokens 128 --dims hidden_size=64,intermediate_size=128,num_hidden_layers=4" >&2
    exit 2
fi
if ! "$PYTHON" -c "import deepspeed, omegaconf, transformers" 2>/dev/null; then
    if ! compgen -G "$WHEELS/*.whl" >/dev/null; then
        echo "gpu_smoke_learner: deepspeed/omegaconf are not importable and $WHEELS/ holds no wheels; run" \
             "'bash scripts/gpu_smoke_learner.sh --fetch-wheels' where pip reaches PyPI and carry $WHEELS/ here" >&2
        exit 2
    fi
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        "$WHEELS"/*.whl
    export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export DS_BUILD_OPS=0 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
OUT=results/gpu_smoke_learner
ARGS=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --out) OUT="$2"; shift 2 ;;
        *) ARGS+=("$1"); shift ;;
    esac
done
exec "$PYTHON" scripts/gpu_smoke_learner.py --device cuda --out "$OUT" "${ARGS[@]}"
