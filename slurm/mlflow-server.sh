#!/usr/bin/env bash
# Run an MLflow tracking server for many concurrent wmrl runs (a sweep's coordinators on Slurm), on a
# login node or inside a job (slurm/templates/mlflow-server.sbatch). Prints the URI to pass as
# tracking.uri and writes it to ROOT/tracking_uri.
#
#   bash slurm/mlflow-server.sh [--root DIR] [--host ADDR] [--port N] [--workers N] [--backend URI]
#
#   --root     where the store and the artifacts live (default: $WMRL_MLFLOW_ROOT or ./mlflow)
#   --host     address to bind (default 0.0.0.0: reachable from compute nodes; 127.0.0.1: this host only)
#   --port     port (default: a free one)
#   --backend  backend store (default sqlite:///ROOT/mlflow.db). Only the server writes it, so SQLite is
#              safe if ROOT is on a disk of this node; a PostgreSQL URI scales further.
set -euo pipefail
ROOT=${WMRL_MLFLOW_ROOT:-$PWD/mlflow}
HOST=0.0.0.0
PORT=0
WORKERS=4
BACKEND=""
while [[ $# -gt 0 ]]; do
    case $1 in
        --root) ROOT=$2; shift 2 ;;
        --host) HOST=$2; shift 2 ;;
        --port) PORT=$2; shift 2 ;;
        --workers) WORKERS=$2; shift 2 ;;
        --backend) BACKEND=$2; shift 2 ;;
        *) echo "mlflow-server.sh: unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
    esac
done
MLFLOW=${MLFLOW:-mlflow}
PYTHON=${PYTHON:-python3}
mkdir -p "$ROOT/artifacts"
ROOT=$(cd "$ROOT" && pwd)
BACKEND=${BACKEND:-sqlite:///$ROOT/mlflow.db}
if [[ $PORT == 0 ]]; then
    PORT=$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])')
fi
if [[ $HOST == 0.0.0.0 ]]; then ADVERTISE=$(hostname -f 2>/dev/null || hostname); else ADVERTISE=$HOST; fi
URI="http://$ADVERTISE:$PORT"
echo "$URI" > "$ROOT/tracking_uri.tmp" && mv "$ROOT/tracking_uri.tmp" "$ROOT/tracking_uri"
echo "MLflow tracking server: $URI   (store $BACKEND, artifacts $ROOT/artifacts)"
echo "use:    wmrl sweep SPEC tracking.uri=$URI    (or: tracking.uri=\$(cat $ROOT/tracking_uri))"
# MLflow >= 3.5 also starts job-runner processes (huey) for its GenAI jobs; a tracking server needs none.
export MLFLOW_SERVER_ENABLE_JOB_EXECUTION=${MLFLOW_SERVER_ENABLE_JOB_EXECUTION:-false}
# MLflow refuses requests whose Host header it does not know: allow the advertised name and loopback.
exec "$MLFLOW" server --backend-store-uri "$BACKEND" --artifacts-destination "$ROOT/artifacts" \
    --serve-artifacts --host "$HOST" --port "$PORT" --workers "$WORKERS" \
    --allowed-hosts "$ADVERTISE,$ADVERTISE:$PORT,localhost,localhost:$PORT,127.0.0.1,127.0.0.1:$PORT"
