#!/usr/bin/env bash
# requeue-now.sh JOBID [--no-requeue]
# Requeue a job (`scontrol requeue`) and make it eligible at once. Slurm holds a requeued job
# PENDING (reason BeginTime) for cred_expire seconds (120 by default; 10 on the local cluster);
# `scontrol update jobid=ID StartTime=now`, issued once the job is PENDING again, lifts that.
# --no-requeue: only lift the delay of a job that something else requeued (preemption, or a
# submitit Checkpointable job requeueing itself at its time limit).
# Lifting it in the same wall-clock second in which slurmd revoked the job's old credential makes
# the restart fail ("Job credential revoked") and the job end FAILED, so this waits for the clock
# to pass that second (1-2 s) first. JOBID may be an array task (123_4).
# Exits non-zero if the job is not PENDING within 60 s.
set -euo pipefail
if [[ $# -lt 1 || $# -gt 2 || ( $# -eq 2 && $2 != --no-requeue ) ]]; then
    echo "usage: $(basename "$0") JOBID [--no-requeue]" >&2
    exit 2
fi
job=$1
if [[ ${2:-} != --no-requeue ]]; then
    scontrol requeue "$job"
fi
for ((i = 0; i < 600; i++)); do
    state=$(squeue -h -j "$job" -o %T 2>/dev/null | head -n 1)
    if [[ $state == PENDING ]]; then
        # The old credential was revoked before the job turned PENDING: a credential made two
        # seconds later is newer than the revocation at one-second resolution.
        pending_at=$(date +%s)
        while (($(date +%s) < pending_at + 2)); do sleep 0.1; done
        scontrol update jobid="$job" StartTime=now
        echo "[wmrl-slurm] job $job requeued and eligible now"
        exit 0
    fi
    sleep 0.1
done
echo "[wmrl-slurm] job $job did not become PENDING within 60 s (state: ${state:-gone}); squeue -j $job" >&2
exit 1
