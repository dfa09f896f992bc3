#!/usr/bin/env bash
# Install everything and run the test suite: the README's test command, and what CI runs.
#
# As root (CI, a dev box) it also installs the system packages (bubblewrap, a single-node Slurm with
# slurmdbd/MariaDB) and starts the local cluster, so that sandbox and Slurm tests run for real.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -k calibration`.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" = 0 ]; then
    bash slurm/install-local.sh  # Slurm, slurmdbd, MariaDB, munge and bubblewrap
    bash slurm/start-local.sh
    # With the cluster started by us, a Slurm test must fail rather than skip if it is down.
    export WMRL_REQUIRE_SLURM=1
else
    command -v bwrap >/dev/null || echo "warning: bubblewrap (bwrap) is missing: sandbox tests will fail; apt-get install bubblewrap" >&2
    command -v sinfo >/dev/null || echo "note: no Slurm on PATH; start one with 'sudo bash slurm/start-local.sh' to run the Slurm tests" >&2
fi

python3 -m venv .venv
. .venv/bin/activate
pip install -q --upgrade pip
# The CPU wheel of torch first: a bare torch requirement would pull a multi-GB CUDA build.
pip install -q torch==2.13.0
pip install -q -e '.[test]'
exec python -m pytest "$@"
