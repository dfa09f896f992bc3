"""Checks ``wmrl launch`` runs in the login shell before anything is created or queued.

A bad ``runs_root``, ``tasks.root``, trainer or sandbox backend would otherwise surface only inside
the jobs once Slurm starts them (both FAILED, a half-made run directory left behind). Each check
raises :class:`PreflightError` with one sentence naming the key, the value and what to do.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from wmrl.config import ConfigError, WMRLConfig
from wmrl.planning.memory import model_config_source, plan_with_fixes
from wmrl.sandbox import SandboxError, make_backend
from wmrl.tasks.layouts import LoadOptions
from wmrl.tasks.pool import load_pool
from wmrl.tasks.task import TaskError
from wmrl.trainer_registry import TRAINERS, trainer_factory, trainer_spec

# Kernel filesystems: writable-looking, but nothing a run directory can live on.
VIRTUAL_ROOTS = (Path("/proc"), Path("/sys"), Path("/dev"))
SANDBOX_WORK = "wmrl.orchestration.anchors:real_work"


class PreflightError(ConfigError):
    """The run cannot start as configured (reported before anything is submitted)."""


def check_runs_root(runs_root: str | Path, run_dir: Path) -> None:
    """``runs_root`` is (or can become) a writable directory on a real filesystem."""
    path = Path(runs_root).expanduser().absolute()
    for virtual in VIRTUAL_ROOTS:
        if path == virtual or virtual in path.parents:
            raise PreflightError(f"runs_root={str(runs_root)!r} is under {virtual}, a kernel filesystem; use a "
                                 "directory on shared storage, e.g. runs_root=/shared/wmrl/runs")
    for candidate in (run_dir.absolute(), *run_dir.absolute().parents):
        if candidate.exists():
            if not candidate.is_dir():
                raise PreflightError(f"runs_root={str(runs_root)!r}: {candidate} is a file, not a directory; "
                                     "choose another runs_root")
            if not os.access(candidate, os.W_OK | os.X_OK):
                raise PreflightError(f"runs_root={str(runs_root)!r}: cannot create directories in {candidate} "
                                     "(permission denied); choose a runs_root you can write to")
            return


def check_trainer(name: str) -> None:
    """The trainer ``name`` (validated by the config) imports here, as it must in the job."""
    try:
        trainer_factory(name)
    except ImportError as err:
        raise PreflightError(f"trainer={name!r}: cannot import it ({err}); install what it needs "
                             "or choose another trainer") from None


def check_tasks_root(cfg: WMRLConfig) -> None:
    """A configured ``tasks.root`` loads as a task pool (the built-in default is built on first use)."""
    if not cfg.tasks.root:
        return

    try:  # as the coordinator and workers will load it: MLE-bench/MLE-Dojo pools need competitions_dir
        load_pool(Path(cfg.tasks.root).expanduser(), cfg.tasks.split, LoadOptions.from_config(cfg.tasks))
    except TaskError as err:
        raise PreflightError(f"tasks.root={cfg.tasks.root!r}: {err}") from None


def check_sandbox(cfg: WMRLConfig) -> None:
    """The sandbox the workers will use exists (only when they run the sandbox: ``launch.work``)."""
    if cfg.launch.work != SANDBOX_WORK:
        return

    if cfg.sandbox.backend == "apptainer":
        # The image lives on shared storage the login node sees; the apptainer binary may exist on
        # the compute nodes only (a module loaded by launch.setup), so it is not required here.
        if not Path(cfg.sandbox.apptainer_image).expanduser().is_file():
            raise PreflightError(f"sandbox.apptainer_image={cfg.sandbox.apptainer_image!r} does not exist; "
                                 "build it from containers/sandbox.def (containers/README.md)")
        return
    if cfg.launch.executor == "slurm" and cfg.sandbox.backend == "bwrap":
        return  # installed on the compute nodes, not necessarily on the login node
    try:
        make_backend(cfg.sandbox)
    except SandboxError as err:
        raise PreflightError(f"sandbox.backend={cfg.sandbox.backend!r}: {err}") from None


def check_learner_ranks(cfg: WMRLConfig, ranks: int | None = None) -> None:
    """Several coordinator tasks are learner ranks: only the LLM trainer has a learner for ranks 1.. to
    follow (``ranks``: the tasks really started; by default the config's)."""
    launch = cfg.launch
    ranks = launch.coordinator_nodes * launch.coordinator_tasks_per_node if ranks is None else ranks
    if ranks > 1 and not trainer_spec(cfg.trainer).learner_ranks:
        raise PreflightError(
            f"launch.coordinator_nodes={launch.coordinator_nodes} x launch.coordinator_tasks_per_node="
            f"{launch.coordinator_tasks_per_node} ({ranks} tasks) are learner ranks, but trainer={cfg.trainer!r} "
            "has no learner for them to join; set both to 1, or a trainer with learner ranks ("
            f"{', '.join(name for name, spec in TRAINERS.items() if spec.learner_ranks)})"
        )
    vllm = cfg.generation.vllm
    if cfg.generation.data_parallel_over(ranks) and cfg.generation.backend == "vllm" and vllm.tensor_parallel_size > 1:
        # One engine per learner rank, each on its rank's GPU (wmrl/generation/data_parallel.py).
        raise PreflightError(
            f"generation.vllm.placement=colocated with {ranks} learner ranks runs one engine beside each rank, "
            f"on its one GPU: generation.vllm.tensor_parallel_size={vllm.tensor_parallel_size} needs "
            "tensor_parallel_size=1 there, or placement=dedicated for tensor-parallel engines"
        )


def check_memory_plan(cfg: WMRLConfig) -> None:
    """The coordinator's GPUs and node hold the learner and the generator (``wmrl plan``); only for an
    allocation with GPUs, and only when the model's dimensions are readable here (model.architecture,
    or model.path's config.json on this machine)."""
    if cfg.launch.coordinator_gpus == 0 or not trainer_spec(cfg.trainer).gpu_memory_plan:
        return

    try:
        model_config_source(cfg)
    except ConfigError as err:
        print(f"wmrl launch: memory not planned: {err}", file=sys.stderr)
        return
    result = plan_with_fixes(cfg)
    if not result.fits:
        fixes = f"; it would fit with: {' '.join(result.fixes)}" if result.fixes else ""
        raise PreflightError(f"the config does not fit its allocation (`wmrl plan CONFIG` shows each phase by "
                             f"component): {'; '.join(result.problems)}{fixes}")


def preflight(cfg: WMRLConfig) -> None:
    """Everything that can be checked before a run directory is created or a job is queued."""
    check_runs_root(cfg.runs_root, cfg.run_dir)
    check_trainer(cfg.trainer)
    check_tasks_root(cfg)
    check_sandbox(cfg)
    check_learner_ranks(cfg)
    check_memory_plan(cfg)
