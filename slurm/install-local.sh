#!/usr/bin/env bash
# Install the Debian packages of a single-node Slurm cluster (munge, slurmctld, slurmd, slurmdbd,
# MariaDB, client tools) for development and CI. Run as root; idempotent (re-running is a no-op
# once everything is present). Starts nothing: slurm/start-local.sh does, without systemd.
set -euo pipefail

PACKAGES=(munge slurm-wlm slurmctld slurmd slurmdbd slurm-client mariadb-server mariadb-client bubblewrap)

if [[ $EUID -ne 0 ]]; then
    echo "install-local.sh: must run as root (it installs Debian packages)" >&2
    exit 1
fi

missing=()
for pkg in "${PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$pkg")
    fi
done
if [[ ${#missing[@]} -eq 0 ]]; then
    echo "install-local.sh: all packages already installed"
    exit 0
fi

echo "install-local.sh: installing ${missing[*]}"
# No systemd here: keep the packages' maintainer scripts from starting daemons (policy-rc.d 101 =
# "action forbidden"); start-local.sh starts them itself with our own configuration.
policy=/usr/sbin/policy-rc.d
created_policy=0
if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod 755 "$policy"
    created_policy=1
fi
cleanup() { if [[ $created_policy -eq 1 ]]; then rm -f "$policy"; fi; }
trap cleanup EXIT

export DEBIAN_FRONTEND=noninteractive
# A stale package list makes apt miss packages on a fresh machine: update once, retry on a flaky mirror.
for attempt in 1 2 3; do
    if apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}"; then
        echo "install-local.sh: done"
        exit 0
    fi
    echo "install-local.sh: apt attempt $attempt failed; retrying in 5 s" >&2
    sleep 5
done
echo "install-local.sh: could not install ${missing[*]} (see apt output above)" >&2
exit 1
