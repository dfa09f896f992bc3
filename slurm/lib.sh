# Shared settings and helpers of the local-cluster scripts (sourced, not run).
# Every setting can be overridden from the environment; the defaults suit one dev/CI machine.

WMRL_SLURM_STATE=${WMRL_SLURM_STATE:-/var/lib/wmrl-slurm}
WMRL_SLURM_ETC=${WMRL_SLURM_ETC:-/etc/slurm}          # where Slurm's clients look for slurm.conf
WMRL_SLURM_CLUSTER=${WMRL_SLURM_CLUSTER:-wmrl}
WMRL_SLURM_PARTITION=${WMRL_SLURM_PARTITION:-debug}
WMRL_SLURM_ACCOUNT=${WMRL_SLURM_ACCOUNT:-wmrl}
WMRL_SLURM_CPUS=${WMRL_SLURM_CPUS:-16}                 # declared, not real: see slurm.conf.in
WMRL_SLURM_GPUS=${WMRL_SLURM_GPUS:-8}                  # fake (no device files): see slurm.conf.in
WMRL_SLURM_CRED_EXPIRE=${WMRL_SLURM_CRED_EXPIRE:-10}
WMRL_SLURM_START_TIMEOUT=${WMRL_SLURM_START_TIMEOUT:-120}
WMRL_SLURM_CTLD_PORT=${WMRL_SLURM_CTLD_PORT:-6817}
WMRL_SLURM_SLURMD_PORT=${WMRL_SLURM_SLURMD_PORT:-6818}
WMRL_SLURM_DBD_PORT=${WMRL_SLURM_DBD_PORT:-6819}
WMRL_SLURM_DB_PORT=${WMRL_SLURM_DB_PORT:-3307}        # private MariaDB; 3307 leaves a system one alone
WMRL_SLURM_DB_NAME=slurm_acct_db
WMRL_SLURM_DB_USER=slurm

SLURM_CONF_DIR_SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/conf
NODE_NAME=$(hostname -s)
LOG_DIR=$WMRL_SLURM_STATE/log
RUN_DIR=$WMRL_SLURM_STATE/run
MY_CNF=$WMRL_SLURM_STATE/my.cnf
DB_SOCKET=$RUN_DIR/mysqld.sock
DB_PASS_FILE=$WMRL_SLURM_STATE/db.pass
MUNGE_SOCKET=/run/munge/munge.socket.2

log() { echo "[wmrl-slurm] $*"; }

require_root() {
    if [[ $EUID -ne 0 ]]; then
        echo "[wmrl-slurm] $(basename "$0"): must run as root (the local cluster runs its daemons as root)" >&2
        exit 1
    fi
}

# pid_alive PIDFILE EXE: true if PIDFILE names a live process running EXE (a stale file left by a
# crash, or a pid reused by another program, counts as dead).
pid_alive() {
    local pidfile=$1 exe=$2 pid
    [[ -s $pidfile ]] || return 1
    pid=$(<"$pidfile")
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    [[ -r /proc/$pid/comm ]] || return 1
    [[ $(</proc/"$pid"/comm) == "$exe"* ]]
}

# stop_pidfile PIDFILE EXE: TERM, wait up to 20 s, then KILL; removes the pid file.
stop_pidfile() {
    local pidfile=$1 exe=$2 pid i
    if pid_alive "$pidfile" "$exe"; then
        pid=$(<"$pidfile")
        log "stopping $exe (pid $pid)"
        kill -TERM "$pid" 2>/dev/null || true
        for ((i = 0; i < 100; i++)); do
            [[ -d /proc/$pid ]] || break
            sleep 0.2
        done
        if [[ -d /proc/$pid ]]; then
            log "$exe did not exit after TERM; sending KILL"
            kill -KILL "$pid" 2>/dev/null || true
        fi
    fi
    rm -f "$pidfile"
}

# render SRC DEST [MODE]: fill @NAME@ placeholders; prints "changed" if DEST's content changed.
render() {
    local src=$1 dest=$2 mode=${3:-644} tmp
    tmp=$(mktemp "$dest.XXXXXX")
    sed -e "s|@HOST@|$NODE_NAME|g" \
        -e "s|@STATE@|$WMRL_SLURM_STATE|g" \
        -e "s|@CLUSTER@|$WMRL_SLURM_CLUSTER|g" \
        -e "s|@PARTITION@|$WMRL_SLURM_PARTITION|g" \
        -e "s|@CPUS@|$WMRL_SLURM_CPUS|g" \
        -e "s|@GPUS@|$WMRL_SLURM_GPUS|g" \
        -e "s|@LAST_GPU@|$((WMRL_SLURM_GPUS - 1))|g" \
        -e "s|@MEM_MB@|$(node_mem_mb)|g" \
        -e "s|@CRED_EXPIRE@|$WMRL_SLURM_CRED_EXPIRE|g" \
        -e "s|@CTLD_PORT@|$WMRL_SLURM_CTLD_PORT|g" \
        -e "s|@SLURMD_PORT@|$WMRL_SLURM_SLURMD_PORT|g" \
        -e "s|@DBD_PORT@|$WMRL_SLURM_DBD_PORT|g" \
        -e "s|@DB_PORT@|$WMRL_SLURM_DB_PORT|g" \
        -e "s|@DB_NAME@|$WMRL_SLURM_DB_NAME|g" \
        -e "s|@DB_USER@|$WMRL_SLURM_DB_USER|g" \
        -e "s|@DB_PASS@|$(db_password)|g" \
        "$src" >"$tmp"
    chmod "$mode" "$tmp"
    if [[ -f $dest ]] && cmp -s "$tmp" "$dest"; then
        rm -f "$tmp"
    else
        mv -f "$tmp" "$dest"
        echo changed
    fi
}

# Three quarters of the VM's memory: jobs may ask for --mem up to this, the rest stays for the OS.
node_mem_mb() {
    local kb
    kb=$(awk '/^MemTotal:/ {print $2}' /proc/meminfo)
    echo $((kb / 1024 * 3 / 4))
}

# The slurmdbd database password: random, made once, kept in the state directory (root only).
db_password() {
    if [[ ! -s $DB_PASS_FILE ]]; then
        (umask 077 && head -c 18 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' >"$DB_PASS_FILE")
    fi
    cat "$DB_PASS_FILE"
}

# Print where every log is and the tail of each, for a failed start or a test's failure message.
show_logs() {
    local f
    echo "[wmrl-slurm] logs are in $LOG_DIR:" >&2
    for f in $(find "$LOG_DIR" -name '*.log' 2>/dev/null | sort); do
        echo "----- tail -n 25 $f -----" >&2
        tail -n 25 "$f" >&2
    done
}
