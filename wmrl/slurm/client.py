"""The Slurm client side of a run: job records, submitit executors, the worker array, job states and
the end of the current allocation.

Both the coordinator (it resubmits workers and watches its own allocation) and ``launch.py`` (it
submits the run) stand on this module; it imports neither. Every submission goes through
:func:`clean_slurm_environment`: a job submitted from inside a job would otherwise inherit the
parent's ``SLURM_*``/``SBATCH_*`` variables (``SBATCH_*`` are read by sbatch as defaults; ``SLURM_MEM_*``,
``SLURM_CPUS_*`` and gres variables make the child ask for the parent's resources or fail with gres
errors). submitit ships exactly this scrub as ``submitit.helpers.clean_env``.

The job ids of a run are recorded one file per job under ``RUN_DIR/jobs/`` (written atomically, so
the coordinator and ``wmrl launch`` never rewrite each other's records); ``wmrl status`` and
``wmrl cancel`` read them back.
"""

from __future__ import annotations

import contextlib
import importlib.resources
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from wmrl.config import WMRLConfig, load_config
from wmrl.config_checks import ConfigError
from wmrl.execution.gpu_share import array_tasks, slots_per_task, visible_gpus
from wmrl.execution.service import LocalExecutor
from wmrl.execution.work import load_work
from wmrl.execution.worker import Worker, default_worker_id, worker_log_handler
from wmrl.io import atomic_write_json, read_json
from wmrl.storage.rundir import RunDir

log = logging.getLogger(__name__)

COORDINATOR = "coordinator"
WORKERS = "workers"
# Slurm states after which a job will not run again (squeue stops listing them after MinJobAge).
ACTIVE_STATES = ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "RESIZING",
                 "SUSPENDED", "REQUEUE_HOLD", "REQUEUE_FED", "SIGNALING", "STAGE_OUT")


@dataclass(frozen=True)
class JobRecord:
    """One Slurm job of a run (``job_id`` of an array is the array's id, without ``_N``)."""

    kind: str  # COORDINATOR or WORKERS
    job_id: str
    n_tasks: int
    submitted_at: float
    submitted_from: str | None  # SLURM_JOB_ID of the submitting job (a coordinator topping up)


# --------------------------------------------------------------------------- environment


@contextlib.contextmanager
def clean_slurm_environment() -> Iterator[None]:
    """Hide the current job's Slurm/submitit variables while submitting (restored afterwards)."""
    import submitit

    with submitit.helpers.clean_env():
        yield


def task_rank() -> int:
    """This process's rank among the tasks of its Slurm job step (0 outside Slurm or in a one-task step)."""
    if int(os.environ.get("SLURM_NTASKS", "1")) > 1:
        return int(os.environ.get("SLURM_PROCID", "0"))
    return 0


# --------------------------------------------------------------------------- plain-sbatch templates


def template_path(name: str) -> Path:
    """The absolute path of a plain-sbatch template (``coordinator.sbatch``, ``workers.sbatch``,
    ``vllm-serve.sbatch``, ``mlflow-server.sbatch``). They ship inside the package
    (wmrl/slurm/templates/, package data; slurm/templates links there in a checkout), so the
    printed sbatch lines work from any directory and from a pip install."""
    found = importlib.resources.files("wmrl.slurm") / "templates" / name
    if not isinstance(found, Path) or not found.is_file():  # e.g. a zipped install: sbatch needs a real file
        raise FileNotFoundError(f"sbatch template {name!r} is not a file of the installed wmrl package ({found}); "
                                "install wmrl from a directory or a wheel (pip install wmrl), not a zip")
    return found.resolve()


# --------------------------------------------------------------------------- executors


def sbatch_options(lines: Sequence[str]) -> dict[str, Any]:
    """``["--constraint=a100", "#SBATCH --exclusive"]`` -> ``{"constraint": "a100", "exclusive": True}``
    (submitit's ``additional_parameters``, written back as ``#SBATCH --key=value`` lines)."""
    options: dict[str, Any] = {}
    for line in lines:
        option = str(line).removeprefix("#SBATCH").strip()
        if not option.startswith("--"):
            raise ConfigError(f"launch.extra_sbatch: {line!r} is not a long sbatch option (--name[=value])")
        key, sep, value = option[2:].partition("=")
        options[key.strip()] = value.strip() if sep else True
    return options


def job_sbatch_options(cfg: WMRLConfig, role: str) -> dict[str, Any]:
    """``launch.extra_sbatch`` (both jobs) overlaid with the job's own list (``coordinator_sbatch`` or
    ``worker_sbatch``): options meant for one job never reach the other."""
    own = cfg.launch.coordinator_sbatch if role == COORDINATOR else cfg.launch.worker_sbatch
    return {**sbatch_options(cfg.launch.extra_sbatch), **sbatch_options(own)}


def job_resources(cfg: WMRLConfig, role: str) -> dict[str, Any]:
    """What one job asks Slurm for, in submitit's parameter names (sbatch's, with ``_`` for ``-``): the
    coordinator its nodes, tasks, GPUs per node, CPUs per task, memory and time; the worker array (per
    task) its own GPUs, CPUs, memory (both derived from its executions unless set) and time. ``wmrl launch`` submits exactly these, and
    ``wmrl launch --no-submit`` prints them as sbatch options."""
    launch = cfg.launch
    coordinator = role == COORDINATOR
    resources: dict[str, Any] = {}
    if coordinator:  # one learner rank per task; submitit's srun starts every task
        resources.update(nodes=launch.coordinator_nodes, ntasks_per_node=launch.coordinator_tasks_per_node)
    gpus = launch.coordinator_gpus if coordinator else launch.worker_gpus
    if gpus:
        resources["gpus_per_node"] = gpus
    if coordinator:
        resources["cpus_per_task"] = launch.coordinator_cpus
        if launch.coordinator_mem_gb:
            resources["mem"] = f"{int(launch.coordinator_mem_gb * 1024)}MB"
    else:  # derived from the executions its slots hold unless set (LaunchConfig.worker_task_request)
        mem_mb, resources["cpus_per_task"] = launch.worker_task_request(cfg.sandbox.memory_mb, cfg.sandbox.threads)
        resources["mem"] = f"{mem_mb}MB"
    resources["time"] = launch.timing.coordinator_time_min if coordinator else launch.timing.worker_time_min
    for key, value in (("partition", launch.partition), ("account", launch.account), ("qos", launch.qos)):
        if value:
            resources[key] = value
    return resources


def sbatch_command_options(cfg: WMRLConfig, role: str) -> list[str]:
    """The options a plain ``sbatch`` of the templates (:func:`template_path`) needs to ask for what ``wmrl launch`` asks
    for (``wmrl launch --no-submit`` prints them): the job's resources, then its sbatch lines (which win,
    as in the submitted job), and for the workers the array's size and throttle."""
    options = {key.replace("_", "-"): value for key, value in job_resources(cfg, role).items()}
    options.update(job_sbatch_options(cfg, role))
    if role == WORKERS:
        n = array_tasks(cfg.launch)
        throttle = f"%{min(cfg.launch.array_parallelism, n)}" if cfg.launch.array_parallelism else ""  # as submitit
        options = {"array": f"0-{n - 1}{throttle}", **options}
    return [f"--{key}" if value is True else f"--{key}={value}" for key, value in options.items()]


def slurm_executor(cfg: WMRLConfig, run: RunDir, role: str) -> Any:
    """A ``submitit.SlurmExecutor`` for the coordinator or the workers of ``run``."""
    import submitit

    launch = cfg.launch
    folder = run.logs / "submitit" / "%j"
    executor = submitit.SlurmExecutor(
        folder=folder,
        max_num_timeout=launch.max_requeues,
        python=launch.python or None,
    )
    coordinator = role == COORDINATOR
    params: dict[str, Any] = {
        "job_name": f"wmrl-{'coord' if coordinator else 'work'}-{run.run_id}",
        "signal_delay_s": launch.timing.signal_delay_s,
        "setup": list(launch.setup),
        "additional_parameters": job_sbatch_options(cfg, role),
        **job_resources(cfg, role),
    }
    if coordinator:
        # submitit requeues the coordinator with `scontrol requeue`, which a cluster with
        # JobRequeue=0 refuses for jobs that did not ask for it.
        params["additional_parameters"].setdefault("requeue", True)
    else:
        # Workers stop on SIGUSR1 (release the claim, exit 0): ask Slurm for that one before the time
        # limit instead of submitit's SIGUSR2, which would requeue a non-checkpointable task.
        params["additional_parameters"]["signal"] = f"USR1@{launch.timing.signal_delay_s}"
        if launch.array_parallelism:
            params["array_parallelism"] = launch.array_parallelism
    executor.update_parameters(**params)
    return executor


# --------------------------------------------------------------------------- job records


def jobs_dir(run: RunDir) -> Path:
    return run.path / "jobs"


def record_job(run: RunDir, record: JobRecord) -> None:
    atomic_write_json(jobs_dir(run) / f"{record.kind}-{record.job_id}.json", asdict(record))


def load_jobs(run: RunDir) -> list[JobRecord]:
    records = []
    for path in sorted(jobs_dir(run).glob("*.json")):
        try:
            records.append(JobRecord(**read_json(path)))
        except (OSError, ValueError, TypeError) as err:
            log.warning("ignoring unreadable job record %s: %s", path, err)
    return sorted(records, key=lambda r: r.submitted_at)


# --------------------------------------------------------------------------- the worker array


def submit_workers(cfg: WMRLConfig, run: RunDir, n_tasks: int | None = None) -> str:
    """Submit one array job of ``n_tasks`` long-lived worker tasks (default: enough for ``launch.workers``
    executions at once, ``launch.executions_per_gpu`` of them on each GPU of a task)."""
    n = array_tasks(cfg.launch) if n_tasks is None else n_tasks
    executor = slurm_executor(cfg, run, WORKERS)
    with clean_slurm_environment():
        jobs = executor.map_array(run_worker_task, [str(run.path)] * n, [cfg.launch.work] * n)
    array_id = str(jobs[0].job_id).split("_")[0]
    record_job(run, JobRecord(WORKERS, array_id, n, time.time(), os.environ.get("SLURM_JOB_ID")))
    return array_id


def run_worker_task(run_dir: str, work: str) -> dict[str, Any]:
    """Body of one array task: the spool worker loop (``wmrl worker RUN_DIR --work WORK``)."""
    run = RunDir.open(run_dir)
    cfg = load_config(run.config_path)
    worker_id = default_worker_id()
    if slots_per_task(cfg.launch) > 1 and visible_gpus():
        return run_worker_slots(run, cfg, work, worker_id)
    root = logging.getLogger("wmrl")
    root.setLevel(logging.INFO)
    root.addHandler(worker_log_handler(run, worker_id))
    worker = Worker(run, load_work(work, run), cfg.launch, worker_id)
    worker.run()
    return {"worker_id": worker_id, "exit_reason": worker.exit_reason, **worker.counts}


def run_worker_slots(run: RunDir, cfg: WMRLConfig, work: str, task_id: str) -> dict[str, Any]:
    """An array task whose GPUs several executions share: one ``wmrl worker`` process per slot, each on
    its GPU and told its share; Slurm's stop signals are passed on, so each slot releases its claim."""
    slots = LocalExecutor(run, slots_per_task(cfg.launch), work=work, executions_per_gpu=cfg.launch.executions_per_gpu,
                          worker_id_prefix=task_id, mps=cfg.launch.mps)
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGUSR1)}
    slots.start()
    try:
        while slots.alive() and not stop.wait(1.0):
            pass
    finally:
        slots.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return {"worker_id": task_id, "slots": slots.n, "exit_reason": "stopped" if stop.is_set() else "slots exited"}


# --------------------------------------------------------------------------- querying / cancelling


def check_slurm_available() -> None:
    for exe in ("sbatch", "squeue", "scancel", "scontrol"):
        if not _which(exe):
            raise ConfigError(
                f"launch.executor=slurm but '{exe}' is not on PATH; run on a Slurm login node, "
                "start the local cluster (sudo bash slurm/start-local.sh) or use launch.executor=local"
            )


class SlurmClientError(RuntimeError):
    """The Slurm client does not work where the coordinator runs (e.g. a container without it)."""


SLURM_BIND_HINT = (
    "bind the host's Slurm client into the container: sbatch, squeue, sacct, scontrol, scancel, libslurm and the "
    "PluginDir, libmunge, the config directory (/etc/slurm) and munge's socket directory (/run/munge); "
    "coordinator.sbatch binds them (WMRL_SLURM_BINDS=auto; `bash coordinator.sbatch --slurm-binds` on a compute "
    "node lists them), or run the coordinator outside the image (docs/cluster.md, 'The coordinator in a container')")
CONTAINER_VARS = ("APPTAINER_CONTAINER", "SINGULARITY_CONTAINER")


def check_slurm_client(python: str) -> None:
    """Fail at the coordinator's start, in one line, where it could not submit or watch its worker arrays:
    ``sbatch --version`` (the client and its libraries) and ``squeue --me`` (its config, munge's socket, the
    controller) must work from where it runs. ``python`` is ``launch.python``: in a container the worker
    jobs, which run on the host, cannot use this process's interpreter."""
    container = next((os.environ[v] for v in CONTAINER_VARS if os.environ.get(v)), None)
    where = f"{os.uname().nodename}" + (f", in container {container}" if container else "")
    for argv in (["sbatch", "--version"], ["squeue", "--noheader", "--format=%i", "--me"]):
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
            problem = None if done.returncode == 0 else (done.stderr.strip().splitlines() or [f"rc {done.returncode}"])[-1]
        except (OSError, subprocess.SubprocessError) as err:
            problem = str(err)
        if problem is not None:
            raise SlurmClientError(f"`{' '.join(argv)}` fails where the coordinator runs ({where}): {problem}; "
                                   + (SLURM_BIND_HINT if container else "run it where the Slurm client works"))
    if container and not python:
        raise SlurmClientError(
            f"launch.python is empty, so the worker jobs would run this container's interpreter ({sys.executable}) "
            "on the host; set launch.python to a command that exists there, e.g. "
            f"'apptainer exec --nv IMAGE python' or /shared/wmrl/venv/bin/python")


def _which(exe: str) -> bool:
    return any(os.access(Path(d) / exe, os.X_OK) for d in os.environ.get("PATH", "").split(os.pathsep) if d)


def job_states(job_ids: Sequence[str]) -> dict[str, list[str]]:
    """``{job_id: [state of each task]}`` from squeue; jobs squeue no longer lists map to ``[]``."""
    states: dict[str, list[str]] = {str(j): [] for j in job_ids}
    if not job_ids:
        return states
    out = subprocess.run(
        ["squeue", "-h", "-r", "-j", ",".join(states), "-o", "%i %T"],
        capture_output=True, text=True, timeout=30, check=False,
    )
    if out.returncode != 0 and "Invalid job id" not in out.stderr:
        raise RuntimeError(f"squeue failed: {out.stderr.strip()}")
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) != 2:
            continue
        base = parts[0].split("_")[0]
        if base in states:
            states[base].append(parts[1])
    return states


def active_tasks(job_ids: Sequence[str]) -> int:
    """Tasks of these jobs that are pending or running (a pending array counts its tasks once listed)."""
    return sum(sum(s in ACTIVE_STATES for s in v) for v in job_states(job_ids).values())


def live_jobs(run: RunDir, kind: str) -> list[str]:
    """Jobs of the run of this kind (COORDINATOR or WORKERS) that Slurm still holds: pending,
    running, requeued (oldest first)."""
    jobs = [r.job_id for r in load_jobs(run) if r.kind == kind]
    states = job_states(jobs) if jobs else {}
    return [j for j in jobs if any(s in ACTIVE_STATES for s in states.get(j, []))]


def cancel_jobs(job_ids: Sequence[str]) -> None:
    if job_ids:
        subprocess.run(["scancel", *map(str, job_ids)], check=False, timeout=60)


# --------------------------------------------------------------------------- allocation end


def _parse_slurm_time(text: str) -> float | None:
    if not text or text in ("Unknown", "None", "N/A"):
        return None
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S").timestamp()  # local time, as Slurm prints
    except ValueError:
        return None


def parse_duration(text: str) -> float | None:
    """Slurm durations ``[D-]HH:MM:SS``, ``MM:SS``, ``MM`` -> seconds; None for UNLIMITED/NOT_SET."""
    text = text.strip()
    if not text or not text[0].isdigit():
        return None
    days = 0
    if "-" in text:
        d, text = text.split("-", 1)
        days = int(d)
    parts = [int(p) for p in text.split(":")]
    if len(parts) == 1:
        seconds = parts[0] * 60
    elif len(parts) == 2:
        seconds = parts[0] * 60 + parts[1]
    else:
        seconds = parts[0] * 3600 + parts[1] * 60 + parts[2]
    return float(days * 86400 + seconds)


def allocation_end(job_id: str | None = None) -> float | None:
    """Epoch seconds at which the running job's allocation ends, counted from its real start time.

    ``SLURM_JOB_END_TIME`` (Slurm >= 23.02) when set; else ``scontrol show job``'s StartTime + TimeLimit
    (the StartTime of *this* run of the job: a requeued job gets a new one); None outside Slurm or for
    an unlimited job.
    """
    env_end = os.environ.get("SLURM_JOB_END_TIME")
    if env_end and env_end.isdigit():
        return float(env_end)
    job_id = job_id or os.environ.get("SLURM_JOB_ID")
    if not job_id:
        return None
    try:
        out = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True,
                             timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    fields = dict(tok.split("=", 1) for tok in out.stdout.split() if "=" in tok)
    start = _parse_slurm_time(fields.get("StartTime", ""))
    limit = parse_duration(fields.get("TimeLimit", ""))
    if start is None or limit is None:
        return None
    return start + limit
