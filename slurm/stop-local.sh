#!/usr/bin/env bash
# Stop the local cluster's daemons (slurmd, slurmctld, slurmdbd, MariaDB, munge), newest first.
# Idempotent; state (jobs, accounting database) stays in $WMRL_SLURM_STATE for the next start.
# --purge also deletes that state directory and the rendered /etc/slurm configuration.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=slurm/lib.sh
source "$HERE/lib.sh"
require_root
export PATH=$PATH:/usr/sbin:/sbin

stop_pidfile "$RUN_DIR/slurmd.pid" slurmd
stop_pidfile "$RUN_DIR/slurmctld.pid" slurmctld
stop_pidfile "$RUN_DIR/slurmdbd.pid" slurmdbd
stop_pidfile "$RUN_DIR/mysqld.pid" mariadbd
stop_pidfile /run/munge/munged.pid munged

if [[ ${1:-} == --purge ]]; then
    log "removing $WMRL_SLURM_STATE and the wmrl-rendered configuration in $WMRL_SLURM_ETC"
    rm -rf "$WMRL_SLURM_STATE"
    for f in slurm.conf slurmdbd.conf gres.conf; do
        if grep -qs 'wmrl development/CI cluster' "$WMRL_SLURM_ETC/$f"; then rm -f "$WMRL_SLURM_ETC/$f"; fi
    done
fi
log "stopped"
