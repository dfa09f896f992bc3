#!/usr/bin/env bash
# Sweep anchor_frac x w_max on the simulator (each point: wmrl over 5 seeds, one MLflow run per seed).
# Compare in MLflow (`mlflow ui --backend-store-uri sqlite:///mlflow.db`, experiment "wmrl-sweep")
# or in the tables under results/sweeps/. Extra arguments are passed to every `wmrl simulate`,
# e.g. `bash sweeps/simulate-anchor-frac-w-max.sh simulator.phi=bump`.
set -euo pipefail
cd "$(dirname "$0")/.."
for anchor_frac in 0.125 0.25 0.5; do
    for w_max in 1 2 4 8; do
        out="results/sweeps/anchor_frac=${anchor_frac}/w_max=${w_max}"
        echo "== anchor_frac=${anchor_frac} w_max=${w_max} -> ${out}"
        wmrl simulate configs/simulate.yaml --variants wmrl --seeds 5 --out "$out" \
            "algorithm.anchor_frac=${anchor_frac}" "algorithm.w_max=${w_max}" \
            tracking.experiment=wmrl-sweep "$@"
    done
done
