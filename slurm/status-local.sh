#!/usr/bin/env bash
# Show whether each daemon of the local cluster runs, the node and queue, and where the logs are.
# Exit status 0 only if every daemon runs and the node is usable.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=slurm/lib.sh
source "$HERE/lib.sh"
export PATH=$PATH:/usr/sbin:/sbin

ok=0
for entry in "/run/munge/munged.pid munged" "$RUN_DIR/mysqld.pid mariadbd" \
    "$RUN_DIR/slurmdbd.pid slurmdbd" "$RUN_DIR/slurmctld.pid slurmctld" "$RUN_DIR/slurmd.pid slurmd"; do
    read -r pidfile exe <<<"$entry"
    if pid_alive "$pidfile" "$exe"; then
        printf '%-10s running (pid %s)\n' "$exe" "$(<"$pidfile")"
    else
        printf '%-10s NOT running\n' "$exe"
        ok=1
    fi
done
echo
sinfo -N -l 2>&1 || ok=1
state=$(sinfo -h -N -n "$NODE_NAME" -o %T 2>/dev/null | head -n 1)
[[ $state =~ ^(idle|mixed|allocated|completing)$ ]] || ok=1
echo
squeue 2>&1
echo
echo "logs: $LOG_DIR ($(ls "$LOG_DIR" 2>/dev/null | tr '\n' ' '))"
exit $ok
