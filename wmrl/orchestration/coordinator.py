"""The coordinator: the one process of a run that trains, as a requeue-safe submitit job.

``Coordinator(run_dir)`` is a ``submitit.helpers.Checkpointable``: ``__call__`` runs the training loop
of the trainer the run's config names (``trainer``, see :mod:`wmrl.trainers`) and ``checkpoint()`` is what submitit calls on SIGUSR2 (time limit or
preemption): it writes the state of the last finished step and returns the requeue submission.

State is saved

- at the start (step 0) and every ``launch.timing.checkpoint_every_s``;
- after every step once less than ``launch.timing.checkpoint_margin_s`` remains of the allocation, counted
  from the job's real start time (``scontrol show job``): a signal that comes late or never still
  finds a fresh checkpoint;
- on SIGUSR2 (submitit) and on SIGTERM (``scontrol requeue``, ``scancel``, preemption; submitit
  itself ignores SIGTERM), from the in-memory snapshot of the last step boundary;
- at the end of the run.

Every start restores the newest checkpoint (calibration directory included) before training, so a
requeued job resumes at the same step with bit-identical state; ``logs/coordinator-events.jsonl``
records the digests that prove it.
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType
from typing import Any

import submitit

from wmrl.config import WMRLConfig, load_config, to_flat_dict
from wmrl.execution.service import LocalExecutor, SpoolExecutionService
from wmrl.io import atomic_write_json
from wmrl.orchestration.anchors import AnchorRunner, WorkerSupervisor
from wmrl.orchestration.trainer import Trainer
from wmrl.progress import progress_display
from wmrl.resources import peak_rss_mb
from wmrl.sft.pipeline import initial_policy_label
from wmrl.slurm.client import allocation_end, check_slurm_client, task_rank
from wmrl.slurm.preflight import check_learner_ranks
from wmrl.step import step_seconds_key
from wmrl.storage.checkpoint import CheckpointStore, Snapshot, read_tree, restore_tree
from wmrl.storage.health import record_event
from wmrl.storage.lock import RunLock
from wmrl.storage.metrics_log import MetricsLog
from wmrl.storage.rundir import RunDir, RunEnded
from wmrl.tracking.run_tracker import COMPUTE_UNIT_TAG, INITIAL_POLICY_TAG, RunTracker, compute_unit
from wmrl.trainer_registry import prepare_run, trainer_factory

log = logging.getLogger(__name__)
PROGRESS = "progress.json"


# What the terminal progress line shows when a trainer reports it (label -> metric key).
POSTFIX = {"anchor r": "anchor_true_mean", "r_hat": "wm_r_hat_mean", "f(r_hat)": "wm_calibrated_mean",
           "rho": "rho", "eta2": "eta2", "pairs": "n_pairs", "exec": "executions", "eval": "eval/train/score",
           **{f"{short} s": step_seconds_key(phase) for short, phase in
              (("gen", "generation"), ("wm", "world_model"), ("exec", "execution"), ("update", "update"))}}


def progress_postfix(metrics: dict[str, Any]) -> dict[str, str]:
    """The step's headline numbers for the tqdm line (step and ETA come from tqdm itself)."""
    out = {}
    for label, key in POSTFIX.items():
        value = metrics.get(key)
        if isinstance(value, (int, float)):
            out[label] = f"{value:.0f}" if key in ("executions", "n_pairs") or label.endswith(" s") else f"{value:.3g}"
    return out


class SaveSchedule:
    """When to write a checkpoint besides the signals: periodically, and every step near the end of
    the allocation (``end`` from the job's real start time + time limit; None outside Slurm)."""

    def __init__(self, every_s: float, margin_s: float, end: float | None) -> None:
        self.every_s, self.margin_s, self.end = every_s, margin_s, end
        self.last = time.time()

    def due(self, now: float | None = None) -> str | None:
        now = time.time() if now is None else now
        if self.end is not None and self.end - now <= self.margin_s:
            return "allocation-end"
        if now - self.last >= self.every_s:
            return "periodic"
        return None


@dataclass
class LiveRun:
    """What a started coordinator holds while it trains (never pickled: a requeue starts from the run
    directory alone)."""

    run: RunDir
    store: CheckpointStore
    snapshot: Snapshot | None = None  # the last step boundary, in memory (what a signal saves)
    saved_step: int | None = None  # the step of the newest checkpoint written
    finishing: bool = False  # past the last step: a signal no longer stops the run
    resume_warning: str | None = None  # no checkpoint verified and the run restarted from step 0
    anchors: AnchorRunner | None = None  # the trainer's handle on executions (a signal ends its waits)

    def snapshot_digest(self) -> str | None:
        return None if self.snapshot is None else self.snapshot.digest


class Coordinator(submitit.helpers.Checkpointable):
    def __init__(self, run_dir: str) -> None:
        self.run_dir = str(run_dir)
        self._live: LiveRun | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"run_dir": self.run_dir}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._live = None

    @property
    def live(self) -> LiveRun:
        """The started run's state (only the methods that run after ``__call__`` started it use this)."""
        if self._live is None:
            raise RuntimeError("the coordinator has not started its run")
        return self._live

    # ------------------------------------------------------------------ submitit hooks
    def checkpoint(self, *args: Any, **kwargs: Any) -> submitit.helpers.DelayedSubmission:
        """SIGUSR2: save the last step boundary, then let submitit requeue this same callable."""
        self._stop_waiting()
        self._save_snapshot("signal-usr2")
        if self._live is not None:
            record_event(self._live.run, "requeue", step=self._live.saved_step)
        return submitit.helpers.DelayedSubmission(Coordinator(self.run_dir))

    def stop_on_signal(self, signum: int, frame: FrameType | None) -> None:
        """SIGTERM (scancel, scontrol requeue, preemption), or USR1 under ``wmrl coordinator``: save the
        last step boundary and exit with ``128 + signum``."""
        live = self._live
        if live is not None and live.run.is_ended() and not live.finishing:
            # `wmrl cancel` marked the run ended, then scancel: stop at once and end it as a local
            # cancel does (plots, KILLED in MLflow) within Slurm's KillWait.
            raise RunEnded(live.run.ended_reason() or "cancelled")
        self._stop_waiting()
        self._save_snapshot(f"signal-{signal.Signals(signum).name.removeprefix('SIG').lower()}")
        if live is not None:
            record_event(live.run, "terminated", step=live.saved_step, signal=signal.Signals(signum).name)
        raise SystemExit(128 + signum)

    def _stop_waiting(self) -> None:
        """Before the handler's exit: a wait on executions in another thread ends within seconds
        (:meth:`AnchorRunner.stop`), so the exit runs the cleanup within Slurm's KillWait."""
        if self._live is not None and self._live.anchors is not None:
            self._live.anchors.stop()

    # ------------------------------------------------------------------ the run
    def __call__(self, progress: bool | None = None) -> dict[str, Any]:
        """Train until the run's last step (or until it is marked ended). ``progress``: a tqdm bar (True),
        none (False), or by default a bar on a terminal and a line per step in a job's log."""
        run = RunDir.open(self.run_dir)
        cfg = load_config(run.config_path)
        os.environ.update(cfg.launch.nccl_env)  # before the learner's process group starts
        check_learner_ranks(cfg, int(os.environ.get("SLURM_NTASKS", "1")))  # e.g. a plain sbatch of N tasks
        if task_rank() > 0:  # a learner rank of a multi-task allocation: no coordinator of its own
            return self._follow(cfg)
        if int(os.environ.get("SLURM_NTASKS", "1")) > 1:
            # Rank 0 joins the learner group now, not when the trainer leads (after the pool, tracking and
            # the initial policy): the followers wait to join inside the group's rendezvous (its 30-minute
            # timeout), then on the call channel, which waits as long as a step takes (learner/channel.py).
            # torch, only on the ranks of a trainer with learner ranks
            from wmrl.learner.distributed import (
                init_distributed,  # torch + DeepSpeed: multi-rank runs only
            )

            init_distributed()
        handler = _file_log(run)
        lock = RunLock(run.lock_path, cfg.launch.timing.lock_stale_s, cfg.launch.timing.lock_heartbeat_s)
        lock.acquire()  # RunLockHeld: another live coordinator owns this run
        local: LocalExecutor | None = None
        try:
            store = CheckpointStore(run.path / "checkpoints")
            self._live = LiveRun(run, store)
            service = SpoolExecutionService(run, cfg.launch)
            tick: Callable[[], None] = lambda: None
            if cfg.launch.executor == "local":
                local = LocalExecutor(run, cfg.launch.workers, work=cfg.launch.work,
                                      executions_per_gpu=cfg.launch.executions_per_gpu, mps=cfg.launch.mps)
                local.start()
                tick = local.revive  # workers that left on their idle timeout come back when work waits
            elif cfg.launch.resubmit_workers:
                check_slurm_client(cfg.launch.python)  # before the model loads: e.g. a container without Slurm
                tick = WorkerSupervisor(run, cfg, service)
            self._live.anchors = AnchorRunner(run, cfg, service, tick)
            trainer = self._start_trainer(cfg, run, store, self._live.anchors)
            signal.signal(signal.SIGTERM, self.stop_on_signal)
            with open_tracker(cfg, run) as tracker:
                return self._loop(cfg, run, trainer, service, tracker, progress)
        except Exception as err:
            # What `wmrl status` shows as the dead coordinator's last error (the traceback is in
            # logs/coordinator.log).
            log.exception("coordinator crashed")
            record_event(run, "crashed", step=None if self._live is None else self._live.saved_step,
                         error=f"{type(err).__name__}: {' '.join(str(err).split())[:500]}")
            raise
        finally:
            if local is not None:
                local.stop()
            lock.release()
            logging.getLogger("wmrl").removeHandler(handler)

    @staticmethod
    def _follow(cfg: WMRLConfig) -> dict[str, Any]:
        """Ranks 1..N-1: repeat rank 0's learner calls until it releases them (wmrl/learner/follower.py),
        with an engine of their own when generation is data-parallel over the ranks."""
        # torch, only on the ranks of a trainer with learner ranks
        from wmrl.learner.follower import follow

        place_generator = None
        if cfg.generation.data_parallel_over(int(os.environ.get("SLURM_NTASKS", "1"))):
            # torch, only on the ranks of a trainer with learner ranks
            from wmrl.generation.data_parallel import place_on_rank

            place_generator = functools.partial(place_on_rank, cfg=cfg.generation, dtype=cfg.model.dtype)
        return {"follower_rank": task_rank(), "learner_calls": follow(cfg.learner, place_generator)}

    def _start_trainer(self, cfg: WMRLConfig, run: RunDir, store: CheckpointStore,
                       runner: AnchorRunner) -> Trainer:
        snap = store.latest()
        factory = trainer_factory(cfg.trainer)
        prepare_run(cfg.trainer, cfg, run.path)  # e.g. the LLM trainer pins its initial policy
        if snap is None and store.unreadable:
            self._no_checkpoint_verified(cfg, run, store)
        if snap is None:
            trainer = factory(cfg, run, runner, False)
            started = self._take_snapshot(trainer)
            self._save_snapshot("start")
            record_event(run, "started", step=trainer.step, digest=started.digest)
            return trainer
        for prefix in {key.split("/", 1)[0] for key in snap.files}:
            restore_tree(snap.files, prefix, run.path / prefix)
        trainer = factory(cfg, run, runner, True)
        trainer.load_state_dict(snap.trainer_state())
        resumed = self._take_snapshot(trainer)
        self.live.saved_step = snap.step
        record_event(run, "resumed", step=trainer.step, checkpoint_step=snap.step,
                     checkpoint_digest=snap.digest, digest=resumed.digest,
                     identical=resumed.digest == snap.digest)
        if resumed.digest != snap.digest:
            raise RuntimeError(f"restored state of step {snap.step} does not reproduce its checkpoint digest")
        return trainer

    def _no_checkpoint_verified(self, cfg: WMRLConfig, run: RunDir, store: CheckpointStore) -> None:
        """Checkpoints exist but none verifies: restart from step 0 loudly, or refuse (config flag)."""
        why = "; ".join(store.unreadable)
        message = (f"no checkpoint of {run.path} verifies ({why}); "
                   + ("restarting from step 0" if cfg.launch.restart_without_checkpoint else
                      "refusing to restart from step 0 (launch.restart_without_checkpoint=false)"))
        log.error(message)
        print(f"wmrl coordinator: {message}", file=sys.stderr, flush=True)
        record_event(run, "no_checkpoint", error=message)
        if not cfg.launch.restart_without_checkpoint:
            raise RuntimeError(message)
        self.live.resume_warning = message

    def _loop(self, cfg: WMRLConfig, run: RunDir, trainer: Trainer,
              service: SpoolExecutionService, tracker: RunTracker, progress: bool | None) -> dict[str, Any]:
        bar = progress_display(trainer.total_steps, "steps", "step", initial=trainer.step, show=progress)

        schedule = SaveSchedule(cfg.launch.timing.checkpoint_every_s, cfg.launch.timing.checkpoint_margin_s,
                                allocation_end() if os.environ.get("SLURM_JOB_ID") else None)
        started = time.time()
        first_step = trainer.step
        metrics_log = MetricsLog(run.path)
        # Before the first step (which may start with a long evaluation), so `wmrl status` already shows
        # the step count and the resume point instead of "0/?".
        self._write_progress(run, trainer, service, started, first_step, "running")
        try:
            while trainer.step < trainer.total_steps and not run.is_ended():
                t0 = time.time()
                metrics = trainer.run_step()
                self._take_snapshot(trainer)
                step_seconds = time.time() - t0
                self._log_step(run, metrics_log, tracker, trainer.step,
                               {"step_seconds": step_seconds, **metrics, **peak_rss_mb()})
                reason = schedule.due()
                if reason is not None:
                    self._save_snapshot(reason)
                    schedule.last = time.time()
                self._write_progress(run, trainer, service, started, first_step, "running")
                bar.update(1)
                bar.set_postfix(progress_postfix(metrics))
        except RunEnded:
            pass  # cancelled: end at the last finished step, as below
        self.live.finishing = True
        bar.close()
        self._save_snapshot("end")  # the last step boundary (a cancel may have stopped a step midway)
        for plot in trainer.write_plots(run.path / "plots", metrics_log.ordered()):
            tracker.log_artifact(plot, "plots")
        finished = trainer.step >= trainer.total_steps
        state = "finished" if finished else f"stopped ({run.ended_reason()})"
        tracker.final_status = "FINISHED" if finished else "KILLED"
        self._write_progress(run, trainer, service, started, first_step, state)
        if finished:
            run.mark_ended("finished")
        record_event(run, "ended", step=trainer.step, state=state, digest=self.live.snapshot_digest())
        return {"step": trainer.step, "state": state, **trainer.progress(), **peak_rss_mb()}

    def _log_step(self, run: RunDir, metrics_log: MetricsLog, tracker: RunTracker, step: int,
                  metrics: dict[str, Any]) -> None:
        """metrics.jsonl and MLflow, one row per step: a faithful replay of a logged step adds nothing."""
        what, timestamp_ms = metrics_log.record(step, metrics)
        if what == "replayed":
            return
        if what == "replaced":
            log.warning("replayed step %d differs from its first run; its row is replaced", step)
            record_event(run, "replay_differs", step=step)
        tracker.log_metrics(metrics, step=step, timestamp_ms=timestamp_ms)

    # ------------------------------------------------------------------ state
    def _take_snapshot(self, trainer: Trainer) -> Snapshot:
        import pickle

        files: dict[str, bytes] = {}
        for prefix, directory in trainer.snapshot_dirs().items():
            files.update(read_tree(directory, prefix))
        self.live.snapshot = Snapshot(trainer.step, pickle.dumps(trainer.state_dict()), files,
                                      trainer.state_digest())
        return self.live.snapshot

    def _save_snapshot(self, reason: str) -> None:
        live = self._live
        snap = None if live is None else live.snapshot
        if live is None or snap is None or live.saved_step == snap.step and reason.startswith("signal"):
            return  # not started, or nothing new since the last save
        live.store.write(snap, reason)
        live.saved_step = snap.step
        record_event(live.run, "checkpoint", step=snap.step, reason=reason, digest=snap.digest)

    def _write_progress(self, run: RunDir, trainer: Trainer, service: SpoolExecutionService,
                        started: float, first_step: int, state: str) -> None:
        elapsed = time.time() - started
        done_here = trainer.step - first_step
        per_step = elapsed / done_here if done_here else None
        progress = {
            "state": state, "step": trainer.step, "total_steps": trainer.total_steps,
            "updated_at": time.time(), "seconds_per_step": per_step,
            "eta_s": per_step * (trainer.total_steps - trainer.step) if per_step and state == "running" else None,
            "resume_warning": self.live.resume_warning,
            "checkpoint_step": self.live.saved_step, "service": service.stats().to_dict(),
            "slurm_job_id": os.environ.get("SLURM_JOB_ID"), **trainer.progress(), **peak_rss_mb(),
        }
        atomic_write_json(run.path / PROGRESS, progress)


@contextmanager
def open_tracker(cfg: WMRLConfig, run: RunDir) -> Iterator[RunTracker]:
    """The run's MLflow run, best-effort (:mod:`wmrl.tracking.run_tracker`): created on the first
    start (or when the store is first reachable), reattached after a requeue by the id saved in the
    run directory, so one wmrl run is one MLflow run however often it restarts."""
    tags = {"wmrl.run_dir": str(run.path), "wmrl.variant": cfg.algorithm.variant,
            "wmrl.executor": cfg.launch.executor, COMPUTE_UNIT_TAG: compute_unit()}
    policy = initial_policy_label(run.path)
    if policy is not None:
        tags[INITIAL_POLICY_TAG] = policy
    with RunTracker(cfg.tracking, run.path, cfg.run_name, params=to_flat_dict(cfg), tags=tags) as tracker:
        yield tracker


def _file_log(run: RunDir) -> logging.Handler:
    handler = logging.FileHandler(run.logs / "coordinator.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("wmrl")
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    return handler


def iter_metrics(run: RunDir) -> Iterable[dict[str, Any]]:
    """metrics.jsonl, one record per step (the last one, should an old file hold a step twice)."""
    return MetricsLog(run.path).ordered()
