#!/usr/bin/env bash
# The single-GPU check (issue 34, item 8): ONE command, ONE GPU of 80 GB with torch + CUDA, no vLLM, no
# network, a few minutes (scripts/gpu_check.py says what it runs: ZeRO-3 load, the chunked loss head at the
# real vocabulary and 24,576 tokens, one optimizer step at the real width with a few layers, planned by
# `wmrl plan` first; the 7-rank projection beside `wmrl plan`'s figure; the GPU probes of items 2 and 5).
# Output: result.json + result.md in $OUT when set (the device tool), else results/gpu_check/.
# ON_DEVICE is documentation for the test; the script itself only installs WHEELS.
#
#   bash scripts/gpu_check.sh [--config C] [--layers 4] [key=value ...]     # on the GPU machine
#   bash scripts/gpu_check.sh --fetch-wheels                               # where pip reaches PyPI, once
#   python scripts/gpu_check.py --cpu-dry-run                              # the same path on a CPU, tiny
# Through the device tool: bash scripts/gpu_check.sh --fetch-wheels here first, then one call
#   run(command="bash scripts/gpu_check.sh", carry=[".whl"], timeout_s=540)
# and commit $OUT's result.json / result.md as results/gpu_check/.
#
# What a machine with torch + CUDA may lack travels as wheels in .whl/ (gitignored; name it in the device
# tool's `carry`): WHEELS below, pure-Python or manylinux x86-64 for Python 3.12, installed with --no-deps
# into /tmp/site ahead of the machine's own packages (~20 MB). The versions are this repository's CPU lock
# (constraints-cpu.txt: what the tests run; DeepSpeed at pyproject.toml's floor); typing-extensions and
# regex because pydantic and transformers need recent ones. ON_DEVICE: the rest of what the check imports,
# from the device image's package list (/work/.library/device/KINDS.md; a version where it gives one).
# tests/test_gpu_check.py checks that the two lists meet every requirement of the carried packages.
# flash-linear-attention is not carried: its Triton kernels are untested against that machine's Triton,
# so the Gated DeltaNet layers run transformers' reference code there (result.json's "kernels" says so).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
WHEEL_DIR=.whl
WHEELS=(deepspeed==0.19.8 hjson==3.1.0 pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0
        typing-inspection==0.4.5 typing-extensions==4.16.0 omegaconf==2.4.0 antlr4-python3-runtime==4.9.3
        transformers==5.24.0 tokenizers==0.23.3 safetensors==0.8.0 regex==2026.11.19)
ON_DEVICE=(torch==2.11.0 numpy==2.5.2 huggingface-hub==1.33.0 einops msgpack ninja psutil py-cpuinfo
           nvidia-ml-py packaging pyyaml tqdm typer filelock fsspec hf-xet)
if [[ "${1:-}" == "--fetch-wheels" ]]; then
    mkdir -p "$WHEEL_DIR"
    for pkg in "${WHEELS[@]}"; do
        # sdist-only packages are built here as pure-Python wheels: antlr4 in pip's isolated build
        # environment, DeepSpeed (its setup imports torch) in this one, DS_BUILD_OPS=0: no CUDA op compiled.
        "$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
            --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
            -d "$WHEEL_DIR" "$pkg" 2>/dev/null \
            || "$PYTHON" -m pip wheel -q --no-deps -w "$WHEEL_DIR" "$pkg" 2>/dev/null \
            || DS_BUILD_OPS=0 "$PYTHON" -m pip wheel -q --no-deps --no-build-isolation -w "$WHEEL_DIR" "$pkg"
    done
    ls -1 "$WHEEL_DIR"
    du -sh "$WHEEL_DIR"
    exit 0
fi

if ! "$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    echo "gpu_check: no CUDA device (torch missing or torch.cuda.is_available() is False): this check measures" \
         "a GPU. Its CPU path: $PYTHON scripts/gpu_check.py --cpu-dry-run" >&2
    exit 2
fi
if compgen -G "$WHEEL_DIR/*.whl" >/dev/null; then
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        "$WHEEL_DIR"/*.whl
    export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
elif ! "$PYTHON" -c "import deepspeed, omegaconf, transformers, pydantic" 2>/dev/null; then
    echo "gpu_check: deepspeed/omegaconf/transformers/pydantic are not importable and $WHEEL_DIR/ holds no" \
         "wheels: run 'bash scripts/gpu_check.sh --fetch-wheels' where pip reaches PyPI and carry $WHEEL_DIR/" >&2
    exit 2
fi
# DeepSpeed's ops are JIT-built when used (FusedAdam, by nvcc): to node-local scratch.
export DS_BUILD_OPS=0 PYTHONUNBUFFERED=1 TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-/tmp/torch_extensions}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
exec "$PYTHON" scripts/gpu_check.py "$@"
