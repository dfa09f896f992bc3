"""The anchored end-to-end trainer (before the LLM trainer): the simulator's policy over REAL solutions.

Each task of the pool offers its reference solutions (standalone scripts of different strength) as the
candidates a trajectory can pick; the softmax policy of ``wmrl simulate`` learns which to pick. Anchor
groups are really executed (:class:`~wmrl.execution.executed.ExecutedEnvironment`: the request goes
through the execution service to the workers, the sandbox runs the script, the grader scores its
submission); world-model groups, and the anchor pairs, are scored by the synthetic world model
``r_hat = phi(r) + noise`` over the solution's score known from the pool build. The step is the one
every trainer runs (:func:`wmrl.step.wmrl_step`); this module adds the coordinator protocol (metrics,
state, checkpoints, plots).

Accounting is **measured** (``cost_source: measured``): the seconds each execution's worker recorded,
the world model's and the policy's measured seconds (and tokens, none here), and the learner's update,
summed per phase over the run; ``simulator.cost`` (the simulator's price list) is not used.

Sizes: ``simulator.tasks`` caps the tasks used, ``simulator.candidates`` the candidates per task.
``trainer=dry`` swaps the pool for tiny scripts that print their known score (plumbing tests).
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from wmrl.calibration.calibrator import STATE_NAME, Calibrator
from wmrl.config import WMRLConfig
from wmrl.execution.executed import ExecutedEnvironment, Runner
from wmrl.loop import LoopShell
from wmrl.rollout import Submission
from wmrl.simulate.policy import SoftmaxPolicy
from wmrl.simulate.softmax import SoftmaxAgent, SoftmaxLearner, SyntheticWorldModelEnv
from wmrl.simulate.world_model import SyntheticWorldModel
from wmrl.step import StepResult
from wmrl.storage.rundir import RunDir
from wmrl.tasks.layouts import LoadOptions
from wmrl.tasks.pool import load_pool, resolve_pool_root
from wmrl.trainers.common import RunTotals, audit_metrics, write_run_plots

COST_SOURCE = "measured"  # seconds recorded by the workers, the world model, the policy and the learner
@dataclass(frozen=True)
class CandidateTable:
    """Candidates of each task: code and the score known from the pool build (padded with -inf logits)."""

    task_ids: list[str]
    names: list[list[str]]
    codes: list[list[str]]
    known: np.ndarray  # (T, K) position score from the build; NaN where a task has fewer candidates

    @property
    def shape(self) -> tuple[int, int]:
        return self.known.shape  # type: ignore[return-value]


def spread(items: list, k: int) -> list:
    """At most ``k`` of ``items`` (sorted weakest first), evenly spaced: weak to strong are all there."""
    if len(items) <= k:
        return list(items)
    return [items[i] for i in sorted(set(np.linspace(0, len(items) - 1, k).round().astype(int).tolist()))]


def load_candidates(cfg: WMRLConfig) -> CandidateTable:
    """The first ``simulator.tasks`` tasks of ``tasks.split`` that have >= 2 reference solutions
    (the built-in pool is built on first use when ``tasks.root`` is empty)."""
    root = resolve_pool_root(cfg.tasks)
    tasks = [t for t in load_pool(root, cfg.tasks.split, LoadOptions.from_config(cfg.tasks)) if len(t.reference_solutions()) >= 2]
    tasks = tasks[: cfg.simulator.tasks]
    if not tasks:
        raise ValueError(f"no task with >= 2 reference solutions in the pool at {root} (tasks.split={cfg.tasks.split})")
    refs = [spread(t.reference_solutions(), cfg.simulator.candidates) for t in tasks]
    k = max(len(r) for r in refs)
    known = np.full((len(tasks), k), np.nan)
    for i, r in enumerate(refs):
        known[i, : len(r)] = [s.position_score for s in r]
    return CandidateTable([t.task_id for t in tasks], [[s.name for s in r] for r in refs],
                          [[s.code for s in r] for r in refs], known)


class AnchoredSimTrainer:
    def __init__(self, cfg: WMRLConfig, run: RunDir, runner: Runner, resume: bool,
                 table: CandidateTable | None = None) -> None:
        self.cfg, self.run_dir, self.runner = cfg, run, runner
        self.table = table or load_candidates(cfg)
        self.total_steps = cfg.train.steps
        self.step = 0
        self.rng = np.random.default_rng(cfg.algorithm.seed)
        t, k = self.table.shape
        self.policy = SoftmaxPolicy(t, k)
        self.policy.logits[np.isnan(self.table.known)] = -np.inf  # tasks with fewer candidates
        index = {task: i for i, task in enumerate(self.table.task_ids)}
        known = {(task, code): float(self.table.known[i, j]) for task, i in index.items()
                 for j, code in enumerate(self.table.codes[i])}
        codes = self.table.codes
        self.agent = SoftmaxAgent(self.policy, index, lambda tasks, actions, rng: [
            [codes[int(ti)][int(a)] for a in row] for ti, row in zip(tasks, actions, strict=True)])
        self.learner = SoftmaxLearner(self.policy, index, cfg.simulator.lr, cfg.simulator.entropy_coef)
        self.executed_env = ExecutedEnvironment(runner, run.run_id, cfg.sandbox.timeout_s, cfg.launch,
                                                cfg.sandbox.max_wall_factor)

        def truth(sub: Submission) -> float:
            return known[(sub.task_id, sub.code)]

        self.world_model = SyntheticWorldModelEnv(SyntheticWorldModel(cfg.simulator), truth, self.rng, index)
        self.totals = RunTotals()
        self.shell = LoopShell(cfg.algorithm, run.path / "calibration", resume=resume)
        self.cal_dir = self.shell.directory

    @property
    def calibrator(self) -> Calibrator | None:
        return self.shell.calibrator

    # ------------------------------------------------------------------ one step
    def run_step(self) -> dict[str, float]:
        self.world_model.step = self.step
        cpu_started = time.process_time()
        done, report = self.shell.step(
            self.step, task_pool=self.table.task_ids, policy=self.agent, executed_env=self.executed_env,
            world_model_env=self.world_model, learner=self.learner, rng=self.rng,
        )
        self.totals.charge(done, learner_cpu_seconds=time.process_time() - cpu_started)
        self.step += 1
        metrics = self._metrics(done)
        metrics.update(audit_metrics(report))
        return metrics

    def _metrics(self, done: StepResult) -> dict[str, float]:
        probs = self.policy.probs()
        known = np.where(np.isnan(self.table.known), 0.0, self.table.known)
        expected = float(np.nansum(known * probs, axis=1).mean())
        rows = [[known[self.agent.task_index[t.task_id], t.payload] for t in group] for group in done.groups]
        anchors = done.anchor & ~done.dropped
        snap = self.calibrator.snapshot() if self.calibrator is not None else {}
        out = {
            "expected_known_score": expected,
            "anchor_groups": float(anchors.sum()),
            "dropped_groups": float(done.dropped.sum()),
            "anchor_true_mean": float(np.nanmean(done.r[anchors])) if anchors.any() else float("nan"),
            "rollout_known_mean": float(np.mean(rows)),
            **self.totals.as_metrics(),
            **{k: float(v) for k, v in snap.items()},
        }
        return {k: (v if math.isfinite(v) else None) for k, v in out.items()}  # type: ignore[misc]

    # ------------------------------------------------------------------ state (coordinator protocol)
    def state_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "logits": self.policy.logits.copy(),
            "rng": self.rng.bit_generator.state,
            "totals": self.totals.to_dict(),
            "last_refit_step": self.shell.last_refit_step,
            "task_ids": list(self.table.task_ids),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["task_ids"] != self.table.task_ids:
            raise ValueError("checkpoint was written for other tasks than the run's pool now offers")
        self.step = int(state["step"])
        self.policy.logits[...] = np.array(state["logits"], dtype=np.float64)  # shared with agent and learner
        self.rng.bit_generator.state = state["rng"]
        self.totals = RunTotals.from_dict(state["totals"])
        self.shell.last_refit_step = state["last_refit_step"]

    def state_digest(self) -> str:
        """sha256 of the policy, RNG, counters, and the calibration state as it would be saved now
        (calibrator.json re-serialised from memory + every pool pair): equal digests = bit-identical.
        Measured seconds are left out: they are accounting, and differ between two runs of one config."""
        h = hashlib.sha256()
        state = self.state_dict()
        state["totals"] = RunTotals.counted(state["totals"])
        h.update(np.ascontiguousarray(state.pop("logits")).tobytes())
        h.update(json.dumps(state, sort_keys=True, default=str).encode())
        if self.calibrator is not None:
            self.calibrator.save()
            h.update((self.cal_dir / STATE_NAME).read_bytes())
            pool = self.calibrator.pool
            h.update(json.dumps([p.to_row() for p in pool.recent(len(pool))]).encode())
        return h.hexdigest()

    def snapshot_dirs(self) -> dict[str, Path]:
        return self.shell.snapshot_dirs()

    def progress(self) -> dict[str, Any]:
        return {**self.shell.progress(), "cost_source": COST_SOURCE, **self.totals.progress()}

    def write_plots(self, directory: Path, metrics: list[dict[str, Any]]) -> list[Path]:
        """calibration.png (anchor pairs and f_hat) and curves.png (score, rho, eta2 per step)."""
        return write_run_plots(self.cfg, self.calibrator, directory, metrics,
                               {"expected score": "expected_known_score"})


def make_trainer(cfg: WMRLConfig, run: RunDir, runner: Runner, resume: bool) -> AnchoredSimTrainer:
    return AnchoredSimTrainer(cfg, run, runner, resume)


def dry_candidates(n_tasks: int = 3, n_candidates: int = 4, sleep_s: float = 0.2) -> CandidateTable:
    """Plumbing dry run (``trainer=dry`` with ``launch.work=wmrl.execution.work:python_work``): each candidate is a
    tiny script that sleeps and prints its known score, so the executed score equals the known one."""
    known = np.array([[round((k + 1 + t) / (n_candidates + n_tasks), 4) for k in range(n_candidates)]
                      for t in range(n_tasks)])
    codes = [[f"import time\ntime.sleep({sleep_s})\nprint({float(known[t, k])!r})\n" for k in range(n_candidates)]
             for t in range(n_tasks)]
    names = [[f"c{k}" for k in range(n_candidates)] for _ in range(n_tasks)]
    return CandidateTable([f"dry-{t}" for t in range(n_tasks)], names, codes, known)


def make_dry_trainer(cfg: WMRLConfig, run: RunDir, runner: Runner, resume: bool) -> AnchoredSimTrainer:
    return AnchoredSimTrainer(cfg, run, runner, resume, dry_candidates(cfg.simulator.tasks, cfg.simulator.candidates))
