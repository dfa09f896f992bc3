"""Config section ``launch``: where the coordinator and the anchor workers run, and its ``launch.timing``:
every duration of a run (the shared-storage exchange between them: leases, heartbeats, polling, see
``docs/run-directory.md``; the Slurm jobs' time limits, signal and checkpoint times)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import ClassVar

from wmrl.config_checks import ConfigError, Section, checked_by, choice, each, in_range

EXECUTORS = ("local", "slurm")
MPS_MODES = ("off", "own", "site")
# A job's shape has its own keys; an sbatch line setting it would contradict them.
SHAPE_OPTIONS = ("nodes", "ntasks", "ntasks-per-node", "array")
SHAPE_KEYS = ("launch.coordinator_nodes and launch.coordinator_tasks_per_node (the coordinator), "
              "launch.workers and launch.array_parallelism (the worker array)")


def _sbatch_mem_mb(lines: list[str]) -> tuple[str, int] | None:
    """The last ``--mem=SIZE`` among sbatch lines, as (line, MB); sbatch reads SIZE in MB unless it ends in
    K, M, G or T. ``--mem=0`` (the node's whole memory) is None: nothing to compare."""
    found = None
    for line in lines:
        name, _, value = line.removeprefix("#SBATCH").strip()[2:].partition("=")
        match = re.fullmatch(r"(\d+)([KMGT]?)B?", value.strip().upper()) if name.strip() == "mem" else None
        if match:
            size = int(match.group(1)) * {"K": 1 / 1024, "": 1, "M": 1, "G": 1024, "T": 1024 ** 2}[match.group(2)]
            found = (line, int(size)) if size else None
    return found


def _check_sbatch_line(key: str, line: str) -> None:
    line = str(line)
    option = line.removeprefix("#SBATCH").strip()
    if not option.startswith("--") or len(option) < 3 or "\n" in option:
        raise ConfigError(
            f"{key}={line!r} is not allowed; use a long sbatch option such as '--constraint=a100' or "
            "'#SBATCH --exclusive'"
        )
    name = option[2:].partition("=")[0].strip()
    if name in SHAPE_OPTIONS:
        raise ConfigError(f"{key}={line!r} is not allowed: a job's shape comes from {SHAPE_KEYS}")


def _check_nccl_env(key: str, env: dict[str, str]) -> None:
    for name, value in env.items():
        if not re.fullmatch(r"(NCCL|TORCH_NCCL|GLOO)_[A-Z0-9_]+", str(name)) or "\n" in str(value):
            raise ConfigError(
                f"{key}.{name}={value!r} is not allowed; names are NCCL_*, TORCH_NCCL_* or GLOO_* "
                "environment variables (e.g. NCCL_SOCKET_IFNAME: ib0), values one line"
            )


def _check_work(key: str, work: str) -> None:
    module, _, attr = work.partition(":")
    if not module or not attr:
        raise ConfigError(f"{key}={work!r} must be 'module:factory', e.g. wmrl.orchestration.anchors:real_work")


@dataclass
class LaunchTiming(Section):
    """Every duration of a run's launch (``launch.timing``), in seconds unless the name says minutes."""

    KEY: ClassVar[str] = "launch.timing"
    # A claimed request whose lease is not renewed for this long is returned to the queue. Must exceed
    # the NFS attribute-cache time (acregmax, 60 s by default) plus a few heartbeats.
    lease_s: float = field(default=120.0, metadata=in_range(0.0, low_open=True))
    # Workers renew their lease and their heartbeat file this often.
    heartbeat_s: float = field(default=10.0, metadata=in_range(0.0, low_open=True))
    # A worker with nothing to do for this long exits (the array task ends and frees its GPU).
    idle_timeout_s: float = field(default=600.0, metadata=in_range(0.0, low_open=True))
    # Directory scans back off from poll_min_s to poll_max_s while nothing changes (no hot polling).
    poll_min_s: float = field(default=0.05, metadata=in_range(0.0, low_open=True))
    poll_max_s: float = field(default=1.0, metadata=in_range(0.0, low_open=True))
    # The coordinator's run lock is renewed this often and is stale after lock_stale_s without renewal.
    lock_heartbeat_s: float = field(default=10.0, metadata=in_range(0.0, low_open=True))
    lock_stale_s: float = field(default=120.0, metadata=in_range(0.0, low_open=True))
    # Leftover temp files of crashed writers older than this are removed by the sweeper.
    tmp_max_age_s: float = field(default=3600.0, metadata=in_range(0.0, low_open=True))
    # Slurm wall-time limits in minutes (launch.executor=slurm): the coordinator is requeued (and
    # resumes) when it hits its limit.
    coordinator_time_min: int = field(default=1440, metadata=in_range(1))
    worker_time_min: int = field(default=240, metadata=in_range(1))
    # Slurm sends SIGUSR2 this many seconds before the time limit; the coordinator checkpoints then.
    signal_delay_s: int = field(default=120, metadata=in_range(0))
    # The coordinator also saves on its own once less than this remains of its allocation (counted from
    # the job's real start time), so a signal that comes late or never still finds a fresh checkpoint.
    checkpoint_margin_s: float = field(default=300.0, metadata=in_range(0.0, low_open=True))
    # ... and at least this often.
    checkpoint_every_s: float = field(default=1800.0, metadata=in_range(0.0, low_open=True))

    def check_together(self, prefix: str) -> None:
        # Two missed renewals must not expire a live claim or lock.
        if self.heartbeat_s * 2 > self.lease_s:
            raise ConfigError(
                f"{prefix}.heartbeat_s={self.heartbeat_s} must be at most half of "
                f"{prefix}.lease_s={self.lease_s}"
            )
        if self.lock_heartbeat_s * 2 > self.lock_stale_s:
            raise ConfigError(
                f"{prefix}.lock_heartbeat_s={self.lock_heartbeat_s} must be at most half of "
                f"{prefix}.lock_stale_s={self.lock_stale_s}"
            )
        if self.poll_min_s > self.poll_max_s:
            raise ConfigError(
                f"{prefix}.poll_min_s={self.poll_min_s} exceeds {prefix}.poll_max_s={self.poll_max_s}"
            )
        if self.signal_delay_s >= self.coordinator_time_min * 60:
            raise ConfigError(
                f"{prefix}.signal_delay_s={self.signal_delay_s} must be shorter than "
                f"{prefix}.coordinator_time_min={self.coordinator_time_min} minutes"
            )


@dataclass
class LaunchConfig(Section):
    KEY: ClassVar[str] = "launch"
    executor: str = field(default="local", metadata=choice(EXECUTORS))
    workers: int = field(default=2, metadata=in_range(1))
    # Leases, heartbeats, polling, the run lock, temp files, the jobs' time limits and checkpoint times.
    timing: LaunchTiming = field(default_factory=LaunchTiming)
    # A request is tried this many times (lease expiries, worker errors, quarantined results), then
    # recorded as failed.
    max_attempts: int = field(default=3, metadata=in_range(1))
    # Unix group that shares the run directory ("" = the user's default group): the directory gets it
    # with the setgid bit, so every file inside belongs to it; group rights follow the umask (0002).
    group: str = ""
    # When checkpoints exist but none verifies, restart from step 0 (loudly: console, event log,
    # `wmrl status`) or, with false, refuse to start.
    restart_without_checkpoint: bool = True
    # A code the run already executed for the same task is not executed again: its outcome is reused
    # (wmrl/execution/executed.py). Right only where a program's outcome is a function of its code.
    reuse_executions: bool = False

    # ---- Slurm submission (launch.executor=slurm; see docs/orchestration.md). "" / 0 = not requested.
    # Wall-time limits: launch.timing.coordinator_time_min, worker_time_min.
    partition: str = ""
    account: str = ""
    qos: str = ""
    # The coordinator's allocation: coordinator_nodes x coordinator_tasks_per_node tasks, one learner rank
    # each (rank 0 is the coordinator proper); coordinator_gpus and coordinator_cpus are per node and
    # per task. learner ranks = coordinator_nodes * coordinator_tasks_per_node.
    coordinator_nodes: int = field(default=1, metadata=in_range(1))
    coordinator_tasks_per_node: int = field(default=1, metadata=in_range(1))
    coordinator_gpus: int = field(default=0, metadata=in_range(0))  # GPUs per node
    coordinator_cpus: int = field(default=2, metadata=in_range(1))  # CPUs per task
    # Memory of one of the coordinator's GPUs, for `wmrl plan` (80 = A100-80GB / H100-80GB; 141 = H200).
    coordinator_gpu_memory_gb: float = field(default=80.0, metadata=in_range(0.0, low_open=True))
    coordinator_mem_gb: float = field(default=0.0, metadata=in_range(0))
    # Per array task (one worker = one anchor execution at a time).
    worker_gpus: int = field(default=0, metadata=in_range(0))
    # Anchor executions sharing one GPU (each a worker slot told its 1/N share: CUDA_VISIBLE_DEVICES,
    # WMRL_GPU_FRACTION, WMRL_GPU_MEMORY_MB; see wmrl/execution/gpu_share.py). An array task runs
    # executions_per_gpu * worker_gpus slots, so the array has ceil(workers / that) tasks; each
    # execution is counted as 1/executions_per_gpu of a GPU in the cost accounting.
    executions_per_gpu: int = field(default=1, metadata=in_range(1))
    # NVIDIA MPS for the executions sharing a GPU: "off" (the shares are advisory); "own": each worker
    # array task starts its own MPS control daemon (nvidia-cuda-mps-control -d, pipe and log directories
    # private to the task) and stops it at the end; "site": the site runs MPS (Slurm's gres/mps, or a
    # daemon per node; CUDA_MPS_PIPE_DIRECTORY comes from the job's environment). With either, each
    # execution's client limits enforce its share (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT,
    # CUDA_MPS_ACTIVE_THREAD_PERCENTAGE) and its sandbox shares the host's IPC namespace and sees the
    # pipe directory, which MPS clients need (docs/sandbox.md, "Sharing a GPU").
    mps: str = field(default="off", metadata=choice(MPS_MODES))
    # What one array task asks for: CPUs per task and memory (GB). 0 = derived from what the task runs:
    # each of its slots holds one execution at a time (sandbox.threads CPUs; sandbox.memory_mb plus
    # worker_own_mem_mb). A value set here must hold that much; the config check says what fits.
    worker_cpus: int = field(default=0, metadata=in_range(0))
    worker_mem_gb: float = field(default=0.0, metadata=in_range(0))
    # One slot's memory besides its execution: the `wmrl worker` process (~0.2 GB measured) and the
    # grader, which loads the submission and the hidden answers after the execution ends.
    worker_own_mem_mb: int = field(default=2048, metadata=in_range(0))
    # The array's "%" throttle: at most this many worker tasks run at once (0 = all of them).
    array_parallelism: int = field(default=0, metadata=in_range(0))
    # Extra sbatch options for both jobs, one per item: "--constraint=a100" or "#SBATCH --exclusive".
    extra_sbatch: list[str] = field(default_factory=list, metadata=each(checked_by(_check_sbatch_line)))
    # ... for the coordinator job only (e.g. "--exclusive"), and for the worker array only; an option
    # named in both a job's list and extra_sbatch takes the job's value.
    coordinator_sbatch: list[str] = field(default_factory=list, metadata=each(checked_by(_check_sbatch_line)))
    worker_sbatch: list[str] = field(default_factory=list, metadata=each(checked_by(_check_sbatch_line)))
    # Environment of the coordinator's ranks for their collectives, set before the process group starts
    # (e.g. {NCCL_SOCKET_IFNAME: ib0, NCCL_IB_HCA: mlx5}); names start with NCCL_, TORCH_NCCL_ or GLOO_.
    nccl_env: dict[str, str] = field(default_factory=dict, metadata=checked_by(_check_nccl_env))
    # Shell lines run in the job before the Python command (module load ..., source venv/bin/activate).
    setup: list[str] = field(default_factory=list)
    # Interpreter the jobs run ("" = the one that runs `wmrl launch`).
    python: str = ""
    # Times the coordinator may be requeued after a time-out before giving up (preemptions are free).
    max_requeues: int = field(default=50, metadata=in_range(0))
    # The coordinator resubmits the worker array when work is queued and no worker task is alive.
    resubmit_workers: bool = True
    # What workers do with a request ("module:factory", wmrl.execution.work): the sandbox + grader,
    # or e.g. wmrl.execution.work:python_work for a dry run of the plumbing.
    work: str = field(default="wmrl.orchestration.anchors:real_work", metadata=checked_by(_check_work))

    def worker_slots(self) -> int:
        """Worker slots one Slurm array task runs: ``executions_per_gpu`` on each of its GPUs (1 without GPUs)."""
        return self.executions_per_gpu * self.worker_gpus if self.worker_gpus > 0 else 1

    def worker_task_needs(self, execution_mb: int, execution_threads: int) -> tuple[int, int]:
        """(MB, CPUs) one array task needs: per slot one execution and the slot's own worker and grader.
        The grader runs after its execution, and the worker process mostly sleeps, so a slot needs no
        CPU beyond its execution's threads."""
        slots = self.worker_slots()
        return slots * (execution_mb + self.worker_own_mem_mb), slots * execution_threads

    def worker_task_request(self, execution_mb: int, execution_threads: int) -> tuple[int, int]:
        """(MB, CPUs) one array task asks Slurm for: ``worker_mem_gb`` / ``worker_cpus`` where set, else its needs."""
        mb, cpus = self.worker_task_needs(execution_mb, execution_threads)
        return (int(self.worker_mem_gb * 1024) if self.worker_mem_gb else mb), (self.worker_cpus or cpus)

    def check_worker_fit(self, execution_mb: int, execution_threads: int, prefix: str = "launch",
                         sandbox: str = "sandbox") -> None:
        """Refuse a worker array task whose memory or CPUs cannot hold its slots' executions (checked at
        load, with the sandbox section's memory_mb and threads): the job would be OOM-killed, or its
        executions would share CPUs they were each told are theirs."""
        need_mb, need_cpus = self.worker_task_needs(execution_mb, execution_threads)
        slots = (f"{self.worker_slots()} slots ({prefix}.executions_per_gpu={self.executions_per_gpu} x "
                 f"{prefix}.worker_gpus={self.worker_gpus})" if self.worker_gpus else "1 slot")
        holds = (f"cannot hold one worker array task: {slots} x ({sandbox}.memory_mb={execution_mb} + "
                 f"{prefix}.worker_own_mem_mb={self.worker_own_mem_mb}) = {need_mb} MB")
        lowers = f"or lower {sandbox}.memory_mb" + (f" or {prefix}.executions_per_gpu" if self.worker_slots() > 1 else "")
        if self.worker_mem_gb and self.worker_mem_gb * 1024 < need_mb:
            raise ConfigError(f"{prefix}.worker_mem_gb={self.worker_mem_gb:g} {holds}; set {prefix}.worker_mem_gb to at "
                              f"least {math.ceil(need_mb / 1024)} (or 0: derived), {lowers}")
        if self.worker_cpus and self.worker_cpus < need_cpus:
            raise ConfigError(
                f"{prefix}.worker_cpus={self.worker_cpus} cannot run one worker array task: {slots} x "
                f"{sandbox}.threads={execution_threads} = {need_cpus} CPUs; set {prefix}.worker_cpus to at least "
                f"{need_cpus} (or 0: derived), or lower {sandbox}.threads")
        line = _sbatch_mem_mb([*self.extra_sbatch, *self.worker_sbatch])  # the job's own list comes last: it wins
        if line is not None and line[1] < need_mb:
            raise ConfigError(f"{prefix}.worker_sbatch / extra_sbatch {line[0]!r} {holds}; remove the line (the "
                              f"request is derived) or raise it, {lowers}")
