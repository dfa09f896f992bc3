"""Where MLflow writes: a SQLite file on a shared (network) filesystem with several writers corrupts or
locks; say so before a sweep starts, and say what to use instead."""

from __future__ import annotations

import subprocess
from pathlib import Path

# `stat -f -c %T` names of filesystems shared between nodes (SQLite's locking is unreliable on them).
SHARED_FILESYSTEMS = ("nfs", "nfs4", "lustre", "gpfs", "cifs", "smb2", "smbfs", "beegfs", "fuse.glusterfs",
                      "ceph", "fuse.ceph", "panfs", "wekafs", "fuse.sshfs", "9p", "afs")


def filesystem_type(path: Path) -> str | None:
    """The filesystem type of ``path``'s nearest existing ancestor (``stat -f``), None if unknown."""
    probe = path.absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        out = subprocess.run(["stat", "-f", "-c", "%T", str(probe)], capture_output=True, text=True,
                             timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def sqlite_path(uri: str) -> Path | None:
    return Path(uri[len("sqlite:///"):]) if uri.startswith("sqlite:///") else None


def tracking_warning(uri: str, writers: int) -> str | None:
    """Why this tracking URI is unsafe for ``writers`` processes logging at once (None: it is fine)."""
    db = sqlite_path(uri)
    if db is None:
        return None
    fs = filesystem_type(db.parent)
    server = "run a tracking server (bash slurm/mlflow-server.sh, or sbatch slurm/templates/mlflow-server.sbatch) " \
             "and pass tracking.uri=http://HOST:PORT"
    if fs in SHARED_FILESYSTEMS:
        return f"the MLflow store {db} is on a shared {fs} filesystem, where SQLite is unsafe; {server}"
    if writers > 1:
        return f"{writers} coordinators will write to one SQLite store {db} (SQLite serialises them, slowly); {server}"
    return None
