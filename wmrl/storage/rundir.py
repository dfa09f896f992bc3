"""The run directory on shared storage: one place every job of a run reads and writes.

::

    runs/<run_id>/
      config.yaml            the resolved config (workers read their timings from it)
      manifest.json          versions, git commit, host, start time; one entry per coordinator start
      RUN_LOCK               the coordinator's lock (wmrl.storage.lock)
      ENDED                  present once the run is over: workers exit
      rollouts/  calibration/  checkpoints/  logs/
      workers/<worker_id>.json       worker heartbeats
      anchors/queue/<request_id>.json                  waiting requests
      anchors/claims/<request_id>.<worker_id>.json     claimed (the file's mtime is the lease)
      anchors/results/<request_id>.json                outcomes, first one wins
      anchors/quarantine/<name> + <name>.reason        corrupt results, with why
      anchors/cancelled/<request_id>                   cancel markers

Every file another process reads is written with ``wmrl.io`` (temp + fsync + rename).
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wmrl.io import atomic_write_json, atomic_write_text, read_json, share_with_group

LAYOUT = (
    "rollouts", "calibration", "checkpoints", "logs", "workers",
    "anchors/queue", "anchors/claims", "anchors/results", "anchors/quarantine", "anchors/cancelled",
)
VERSIONED = ("wmrl", "numpy", "scipy", "scikit-learn", "pandas", "omegaconf", "submitit", "mlflow",
             "torch", "transformers", "deepspeed", "vllm")


@dataclass(frozen=True)
class RunDir:
    path: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path).absolute())

    @property
    def run_id(self) -> str:
        return self.path.name

    def sub(self, name: str) -> Path:
        return self.path / name

    config_path = property(lambda self: self.path / "config.yaml")
    manifest_path = property(lambda self: self.path / "manifest.json")
    lock_path = property(lambda self: self.path / "RUN_LOCK")
    ended_path = property(lambda self: self.path / "ENDED")
    logs = property(lambda self: self.path / "logs")
    workers = property(lambda self: self.path / "workers")
    queue = property(lambda self: self.path / "anchors" / "queue")
    claims = property(lambda self: self.path / "anchors" / "claims")
    results = property(lambda self: self.path / "anchors" / "results")
    quarantine = property(lambda self: self.path / "anchors" / "quarantine")
    cancelled = property(lambda self: self.path / "anchors" / "cancelled")

    def ensure_layout(self) -> None:
        for name in LAYOUT:
            (self.path / name).mkdir(parents=True, exist_ok=True)

    @classmethod
    def open(cls, path: str | Path) -> RunDir:
        """An existing run directory (what ``wmrl worker RUN_DIR`` gets); clear error otherwise."""
        run = cls(Path(path))
        if not run.config_path.is_file():
            raise FileNotFoundError(
                f"{run.path} is not a wmrl run directory (no config.yaml); create it with "
                "create_run_dir() / `wmrl launch`"
            )
        run.ensure_layout()
        return run

    # ------------------------------------------------------------------ end of run
    def mark_ended(self, reason: str) -> None:
        if not self.ended_path.exists():
            atomic_write_json(self.ended_path, {"reason": reason, "at": time.time(), "host": host_name()})

    def reopen(self) -> None:
        """Continue an ended run (``wmrl launch --resume``): the ENDED marker moves to logs/ as history."""
        try:
            os.replace(self.ended_path, self.logs / f"ended-{time.time():.0f}.json")
        except FileNotFoundError:
            pass

    def is_ended(self) -> bool:
        return self.ended_path.exists()

    def ended_reason(self) -> str | None:
        try:
            return str(read_json(self.ended_path).get("reason"))
        except (OSError, ValueError):
            return None


def host_name() -> str:
    return socket.gethostname()


def slurm_identity() -> dict[str, str | None]:
    env = os.environ
    return {
        "job_id": env.get("SLURM_JOB_ID"),
        "array_job_id": env.get("SLURM_ARRAY_JOB_ID"),
        "array_task_id": env.get("SLURM_ARRAY_TASK_ID"),
        "restart_count": env.get("SLURM_RESTART_COUNT"),
        "node": env.get("SLURMD_NODENAME"),
    }


def package_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in VERSIONED:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def git_state(repo: Path | None = None) -> dict[str, Any]:
    """Commit of the wmrl source tree (None when not a git checkout) and whether it has local edits."""
    repo = repo or Path(__file__).resolve().parents[2]

    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                                 timeout=10, check=True)
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip()

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no") if commit else None
    return {"commit": commit, "dirty": bool(status) if status is not None else None}


def config_diff(stored_yaml: str, new_yaml: str) -> str:
    """``"algorithm.w_max: 4.0 in the run, 2.0 now; tracking.uri: ..."``: every key that differs."""
    import yaml

    def flat(node: Any, prefix: str = "") -> dict[str, Any]:
        if isinstance(node, dict):
            out: dict[str, Any] = {}
            for key, value in node.items():
                out.update(flat(value, f"{prefix}.{key}" if prefix else str(key)))
            return out
        return {prefix: node}

    old, new = flat(yaml.safe_load(stored_yaml) or {}), flat(yaml.safe_load(new_yaml) or {})
    def show(values: dict[str, Any], key: str) -> str:
        return repr(values[key]) if key in values else "(absent)"

    parts = [f"{key}: {show(old, key)} in the run, {show(new, key)} now"
             for key in sorted(old.keys() | new.keys()) if show(old, key) != show(new, key)]
    return "; ".join(parts) or "same values, different text"


def stored_config_diff(path: Path, config_yaml: str, normalise: Callable[[str], str] | None = None) -> str | None:
    """The keys in which the config stored at ``path`` differs from ``config_yaml`` (:func:`config_diff`);
    None when nothing is stored there or it is the same config.

    ``normalise``: the stored text as this version writes it (loaded and written again), so that a config
    written before a key moved (``launch.lease_s`` -> ``launch.timing.lease_s``) or was added still counts
    as the same.
    """
    try:
        stored = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    if stored == config_yaml or (normalise is not None and normalise(stored) == config_yaml):
        return None
    return config_diff(stored, config_yaml)


def config_mismatch(run: RunDir, config_yaml: str, normalise: Callable[[str], str] | None = None) -> str | None:
    """Why ``config_yaml`` cannot (re)start the run at ``run`` (None: new run, or the same config);
    ``normalise`` as :func:`stored_config_diff` takes it."""
    diff = stored_config_diff(run.config_path, config_yaml, normalise)
    if diff is None:
        return None
    return (f"{run.config_path} exists with a different config ({diff}); a run's config "
            f"cannot change: relaunch with the same overrides (or `wmrl launch {run.path}`), or use a new run_name")


def create_run_dir(path: str | Path, config_yaml: str, group: str = "",
                   normalise: Callable[[str], str] | None = None) -> RunDir:
    """Create (or reopen, on a restart) a run directory; record this start in the manifest.

    ``config_yaml`` is the resolved config (``wmrl.config.to_yaml(cfg)``). On reopen it must match the
    stored one (as ``normalise`` rewrites it, see :func:`config_mismatch`): a run's config never changes
    under it; the stored file is never rewritten. ``group``: the Unix group that shares the
    run directory (setgid, see :func:`wmrl.io.share_with_group`).
    """
    run = RunDir(Path(path))
    mismatch = config_mismatch(run, config_yaml, normalise)
    if mismatch:
        raise ValueError(mismatch)
    run.ensure_layout()
    if group:
        share_with_group(run.path, group)
    if not run.config_path.exists():
        atomic_write_text(run.config_path, config_yaml)
    start = {"host": host_name(), "pid": os.getpid(), "started_at": time.time(),
             "argv": sys.argv, "slurm": slurm_identity()}
    if run.manifest_path.exists():
        manifest = read_json(run.manifest_path)
        manifest["starts"].append(start)
    else:
        manifest = {"run_id": run.run_id, "created_at": start["started_at"], "host": start["host"],
                    "versions": package_versions(), "git": git_state(), "starts": [start]}
    atomic_write_json(run.manifest_path, manifest)
    return run


class RunEnded(Exception):
    """``wmrl cancel`` (or another process) marked the run ended while a step waited."""
