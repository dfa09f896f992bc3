#!/usr/bin/env bash
# Start the single-node development/CI Slurm cluster: munge, a private MariaDB, slurmdbd, slurmctld,
# slurmd, all run directly (no systemd). Idempotent: daemons already running are left alone, stale
# pid files from a crash are ignored, a changed configuration restarts the Slurm daemons.
# Waits until the node is idle and sinfo/sacct answer; on failure prints the logs' tails.
# Install the packages first with slurm/install-local.sh.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=slurm/lib.sh
source "$HERE/lib.sh"
require_root

for exe in munged mariadbd mariadb-install-db slurmdbd slurmctld slurmd sinfo sacct sacctmgr; do
    if ! PATH=$PATH:/usr/sbin:/sbin command -v "$exe" >/dev/null; then
        echo "[wmrl-slurm] $exe not found: run slurm/install-local.sh first" >&2
        exit 1
    fi
done
export PATH=$PATH:/usr/sbin:/sbin

deadline=$((SECONDS + WMRL_SLURM_START_TIMEOUT))

fail() {
    echo "[wmrl-slurm] start failed: $*" >&2
    show_logs
    exit 1
}

# wait_for WHAT CMD...: poll CMD (quietly) every 0.5 s until it succeeds or the start deadline passes.
wait_for() {
    local what=$1
    shift
    until "$@" >/dev/null 2>&1; do
        ((SECONDS < deadline)) || fail "timed out after ${WMRL_SLURM_START_TIMEOUT}s waiting for $what"
        sleep 0.5
    done
}

mkdir -p "$WMRL_SLURM_STATE"/{ctld,slurmd,run} "$LOG_DIR" "$WMRL_SLURM_ETC"
chmod 755 "$WMRL_SLURM_STATE" "$LOG_DIR"

# --- munge -------------------------------------------------------------------------------------
munge_ok() { munge -n </dev/null | unmunge >/dev/null; }
if ! munge_ok 2>/dev/null; then
    install -d -o munge -g munge -m 755 /run/munge
    install -d -o munge -g munge -m 755 "$LOG_DIR/munge"
    if [[ ! -s /etc/munge/munge.key ]]; then
        log "creating /etc/munge/munge.key"
        runuser -u munge -- mungekey --create --keyfile=/etc/munge/munge.key
    fi
    rm -f /run/munge/munged.pid "$MUNGE_SOCKET" "$MUNGE_SOCKET.lock"
    log "starting munged"
    runuser -u munge -- munged --pid-file=/run/munge/munged.pid \
        --log-file="$LOG_DIR/munge/munged.log" </dev/null >/dev/null 2>&1 ||
        fail "munged did not start"
    wait_for "munge to answer" munge_ok
fi

# --- MariaDB (accounting storage for slurmdbd) --------------------------------------------------
render "$SLURM_CONF_DIR_SRC/my.cnf.in" "$MY_CNF" 644 >/dev/null
db() { mariadb --defaults-file="$MY_CNF" --socket="$DB_SOCKET" -u root "$@"; }
if ! pid_alive "$RUN_DIR/mysqld.pid" mariadbd; then
    if [[ ! -d $WMRL_SLURM_STATE/mysql/mysql ]]; then
        log "initialising MariaDB datadir $WMRL_SLURM_STATE/mysql"
        rm -rf "$WMRL_SLURM_STATE/mysql"
        mariadb-install-db --defaults-file="$MY_CNF" --user=root --skip-test-db \
            --auth-root-authentication-method=socket >"$LOG_DIR/mariadb-install.log" 2>&1 ||
            fail "mariadb-install-db failed (see $LOG_DIR/mariadb-install.log)"
    fi
    rm -f "$RUN_DIR/mysqld.pid" "$DB_SOCKET"
    log "starting mariadbd"
    setsid mariadbd --defaults-file="$MY_CNF" </dev/null >>"$LOG_DIR/mariadb.log" 2>&1 &
    wait_for "MariaDB to answer on $DB_SOCKET" mariadb-admin --socket="$DB_SOCKET" -u root ping
fi
pass=$(db_password)
db <<SQL || fail "could not create the slurmdbd database user"
CREATE DATABASE IF NOT EXISTS $WMRL_SLURM_DB_NAME;
CREATE USER IF NOT EXISTS '$WMRL_SLURM_DB_USER'@'127.0.0.1' IDENTIFIED BY '$pass';
CREATE USER IF NOT EXISTS '$WMRL_SLURM_DB_USER'@'localhost' IDENTIFIED BY '$pass';
ALTER USER '$WMRL_SLURM_DB_USER'@'127.0.0.1' IDENTIFIED BY '$pass';
ALTER USER '$WMRL_SLURM_DB_USER'@'localhost' IDENTIFIED BY '$pass';
GRANT ALL ON $WMRL_SLURM_DB_NAME.* TO '$WMRL_SLURM_DB_USER'@'127.0.0.1';
GRANT ALL ON $WMRL_SLURM_DB_NAME.* TO '$WMRL_SLURM_DB_USER'@'localhost';
FLUSH PRIVILEGES;
SQL

# --- Slurm configuration ------------------------------------------------------------------------
for f in slurm.conf slurmdbd.conf gres.conf; do
    if [[ -f $WMRL_SLURM_ETC/$f ]] && ! grep -q 'wmrl development/CI cluster' "$WMRL_SLURM_ETC/$f"; then
        log "keeping the existing $WMRL_SLURM_ETC/$f as $f.before-wmrl"
        cp -n "$WMRL_SLURM_ETC/$f" "$WMRL_SLURM_ETC/$f.before-wmrl"
    fi
done
dbd_changed=$(render "$SLURM_CONF_DIR_SRC/slurmdbd.conf.in" "$WMRL_SLURM_ETC/slurmdbd.conf" 600)
conf_changed=$(render "$SLURM_CONF_DIR_SRC/slurm.conf.in" "$WMRL_SLURM_ETC/slurm.conf" 644)
conf_changed+=$(render "$SLURM_CONF_DIR_SRC/gres.conf.in" "$WMRL_SLURM_ETC/gres.conf" 644)
# The fake GPUs' device files (gres.conf): character devices with /dev/null's numbers.
mkdir -p "$WMRL_SLURM_STATE/fake-gpu"
for ((i = 0; i < WMRL_SLURM_GPUS; i++)); do
    [[ -c $WMRL_SLURM_STATE/fake-gpu/nvidia$i ]] || mknod -m 666 "$WMRL_SLURM_STATE/fake-gpu/nvidia$i" c 1 3
done

# --- slurmdbd -----------------------------------------------------------------------------------
if [[ -n $dbd_changed ]] && pid_alive "$RUN_DIR/slurmdbd.pid" slurmdbd; then
    log "slurmdbd.conf changed: restarting slurmdbd"
    stop_pidfile "$RUN_DIR/slurmdbd.pid" slurmdbd
fi
if ! pid_alive "$RUN_DIR/slurmdbd.pid" slurmdbd; then
    rm -f "$RUN_DIR/slurmdbd.pid"
    log "starting slurmdbd"
    setsid slurmdbd </dev/null >>"$LOG_DIR/slurmdbd.log" 2>&1 || fail "slurmdbd did not start"
fi
wait_for "slurmdbd to answer (sacctmgr show cluster)" sacctmgr -n show cluster

# The cluster must exist in the database before slurmctld registers, or jobs never reach sacct.
if ! sacctmgr -n -P show cluster format=cluster | grep -qx "$WMRL_SLURM_CLUSTER"; then
    log "adding cluster $WMRL_SLURM_CLUSTER to the accounting database"
    sacctmgr -i add cluster "$WMRL_SLURM_CLUSTER" >/dev/null || fail "sacctmgr add cluster failed"
fi
if ! sacctmgr -n -P show account format=account | grep -qx "$WMRL_SLURM_ACCOUNT"; then
    sacctmgr -i add account "$WMRL_SLURM_ACCOUNT" cluster="$WMRL_SLURM_CLUSTER" \
        description="wmrl local cluster" organization=wmrl >/dev/null || fail "sacctmgr add account failed"
fi
if ! sacctmgr -n -P show assoc where user=root account="$WMRL_SLURM_ACCOUNT" format=user | grep -qx root; then
    sacctmgr -i add user root account="$WMRL_SLURM_ACCOUNT" cluster="$WMRL_SLURM_CLUSTER" >/dev/null ||
        fail "sacctmgr add user root failed"
fi

# --- slurmctld and slurmd -----------------------------------------------------------------------
if [[ -n $conf_changed ]] && { pid_alive "$RUN_DIR/slurmctld.pid" slurmctld || pid_alive "$RUN_DIR/slurmd.pid" slurmd; }; then
    log "slurm.conf changed: restarting slurmctld and slurmd"
    stop_pidfile "$RUN_DIR/slurmd.pid" slurmd
    stop_pidfile "$RUN_DIR/slurmctld.pid" slurmctld
fi
if ! pid_alive "$RUN_DIR/slurmctld.pid" slurmctld; then
    rm -f "$RUN_DIR/slurmctld.pid"
    log "starting slurmctld"
    setsid slurmctld </dev/null >>"$LOG_DIR/slurmctld.log" 2>&1 || fail "slurmctld did not start"
fi
wait_for "slurmctld to answer (scontrol ping)" bash -c 'scontrol ping | grep -q UP'
if ! pid_alive "$RUN_DIR/slurmd.pid" slurmd; then
    rm -f "$RUN_DIR/slurmd.pid"
    log "starting slurmd"
    setsid slurmd </dev/null >>"$LOG_DIR/slurmd.log" 2>&1 || fail "slurmd did not start"
fi

# A node left DOWN/DRAINED by a crash or a killed slurmd comes back only when told to.
node_state() { sinfo -h -N -n "$NODE_NAME" -o %T 2>/dev/null | head -n 1; }
node_ready() { [[ $(node_state) =~ ^(idle|mixed|allocated|completing)$ ]]; }
resumed=0
until node_ready; do
    state=$(node_state)
    if [[ $resumed -eq 0 && $state =~ (down|drain|fail) ]]; then
        log "node $NODE_NAME is $state: resuming it"
        scontrol update nodename="$NODE_NAME" state=resume >/dev/null 2>&1 || true
        resumed=1
    fi
    ((SECONDS < deadline)) || fail "timed out waiting for node $NODE_NAME to be idle (state: ${state:-unknown})"
    sleep 0.5
done
wait_for "sacct to answer" sacct -n -X -S now-1hours

log "cluster up: node $NODE_NAME is $(node_state), partition $WMRL_SLURM_PARTITION, logs in $LOG_DIR"
