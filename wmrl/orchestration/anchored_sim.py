"""The end-to-end run before the LLM trainer exists: the simulator's policy over REAL solutions.

Each task of the built-in pool offers its reference solutions (standalone scripts of different
strength) as the candidates a trajectory can pick; the softmax policy of ``wmrl simulate`` learns which
to pick. World-model groups are scored by the synthetic world model ``r_hat = phi(r) + noise`` over the
solution's score known from the pool build; anchor groups are really executed: the request goes
through the execution service to the workers, the sandbox runs the script, the grader scores its
submission, and the pair (r_hat, r) enters the Calibrator. The step is the one of ``wmrl simulate``
(``wmrl.simulate.step.wmrl_step``); this module supplies its :class:`ExecutedScores` (known build
scores, anchors through ``runner.execute``; a group with a failed execution is no anchor that step)
and the coordinator protocol (metrics, state, checkpoints).

Sizes: ``simulator.tasks`` caps the tasks used, ``simulator.candidates`` the candidates per task.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from wmrl.algorithm import get_variant
from wmrl.calibration.calibrator import STATE_NAME, Calibrator, read_audit
from wmrl.config import WMRLConfig
from wmrl.orchestration.coordinator import AnchorRunner
from wmrl.orchestration.records import ExecutionRequest
from wmrl.orchestration.rundir import RunDir
from wmrl.simulate.cost import CostMeter
from wmrl.simulate.policy import SoftmaxPolicy
from wmrl.simulate.step import wmrl_step
from wmrl.simulate.world_model import SyntheticWorldModel


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
    from wmrl.tasks.layouts import LoadOptions
    from wmrl.tasks.pool import ensure_builtin_pool, load_pool

    root = Path(cfg.tasks.root).expanduser() if cfg.tasks.root else ensure_builtin_pool(None, progress=False)
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


@dataclass
class ExecutedScores:
    """``ScoreSource`` of one step of the end-to-end run: the build's known scores, real executions."""

    table: CandidateTable
    cfg: WMRLConfig
    run_id: str
    step: int
    runner: AnchorRunner
    failed: int = 0  # executions the workers gave up on this step

    @property
    def n_tasks(self) -> int:
        return self.table.shape[0]

    def task_id(self, task: int) -> str:
        return self.table.task_ids[task]

    def rollout(self, tasks: np.ndarray, actions: np.ndarray) -> np.ndarray:
        return self.table.known[tasks[:, None], actions]

    def execute(
        self, tasks: np.ndarray, actions: np.ndarray, scores: np.ndarray, anchor: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """True scores of the anchor groups; a group with an execution the workers gave up on
        (``failed``) is no anchor this step (its infrastructure failure is no score)."""
        executed = np.full(actions.shape, np.nan)
        if not anchor.any():
            return executed, anchor
        requests: dict[tuple[int, int], ExecutionRequest] = {}
        timeout = self.cfg.sandbox.timeout_s
        for g in np.flatnonzero(anchor):
            t = int(tasks[g])
            for i in range(actions.shape[1]):
                requests[(g, i)] = ExecutionRequest.create(
                    self.run_id, self.step, self.table.task_ids[t], int(g), i,
                    self.table.codes[t][int(actions[g, i])], timeout)
        launch = self.cfg.launch
        rounds = math.ceil(len(requests) / max(1, launch.workers))
        deadline = rounds * launch.max_attempts * (timeout + launch.lease_s) + 60.0
        done = self.runner.execute(list(requests.values()), deadline)
        anchor = anchor.copy()
        for (g, i), request in requests.items():
            record = done.get(request.request_id)
            if record is None or record.status != "done" or record.score is None:
                anchor[g] = False
                self.failed += 1
            else:
                executed[g, i] = record.score
        executed[~anchor] = np.nan
        return executed, anchor


class AnchoredSimTrainer:
    def __init__(self, cfg: WMRLConfig, run: RunDir, runner: AnchorRunner, resume: bool,
                 table: CandidateTable | None = None) -> None:
        self.cfg, self.run_dir, self.runner = cfg, run, runner
        self.table = table or load_candidates(cfg)
        self.variant = get_variant(cfg.algorithm.variant)
        self.total_steps = cfg.simulator.steps
        self.step = 0
        self.rng = np.random.default_rng(cfg.algorithm.seed)
        self.wm = SyntheticWorldModel(cfg.simulator)
        t, k = self.table.shape
        self.policy = SoftmaxPolicy(t, k)
        self.policy.logits[np.isnan(self.table.known)] = -np.inf  # tasks with fewer candidates
        self.meter = CostMeter(cfg.simulator.cost)
        self.failed_executions = 0
        self.last_refit_step: int | None = None
        self.cal_dir = run.path / "calibration"
        self.calibrator: Calibrator | None = None
        if self.variant.trains_on_wm and self.variant.needs_anchors:
            alg = cfg.algorithm
            if resume and (self.cal_dir / STATE_NAME).exists():
                self.calibrator = Calibrator.load(alg, self.cal_dir)
            else:
                shutil.rmtree(self.cal_dir, ignore_errors=True)  # partial state of a run never checkpointed
                self.calibrator = Calibrator(alg, self.cal_dir, debias=self.variant.debias,
                                             denoise=self.variant.denoise)

    # ------------------------------------------------------------------ one step
    def run_step(self) -> dict[str, float]:
        source = ExecutedScores(self.table, self.cfg, self.run_dir.run_id, self.step, self.runner)
        # The world model scores every group, also for variants that do not train on it (it only costs).
        done = wmrl_step(
            self.step, variant=self.variant, alg=self.cfg.algorithm, source=source, policy=self.policy,
            world_model=self.wm if self.variant.trains_on_wm else None, calibrator=self.calibrator,
            meter=self.meter, rng=self.rng, lr=self.cfg.simulator.lr,
            entropy_coef=self.cfg.simulator.entropy_coef,
        )
        self.failed_executions += source.failed
        audit = {}
        if done.refitted:
            self.last_refit_step = self.step
            # Assumption 6 (monotone, stationary bias) is checked whenever the map changes; the
            # report lands in calibration/audit.json, the log, `wmrl status` and MLflow.
            report = self.calibrator.audit()
            audit = {"audit_ok": float(report.ok), "audit_monotonicity_gain": report.monotonicity_gain,
                     "audit_stationarity_gap": report.stationarity_gap}
        self.step += 1
        metrics = self._metrics(done.anchor, done.executed, done.scores)
        metrics.update({k: (v if math.isfinite(v) else None) for k, v in audit.items()})  # type: ignore[misc]
        return metrics

    def _metrics(self, anchor: np.ndarray, executed: np.ndarray, known: np.ndarray) -> dict[str, float]:
        probs = self.policy.probs()
        expected = float(np.nansum(np.where(np.isnan(self.table.known), 0.0, self.table.known) * probs, axis=1).mean())
        snap = self.calibrator.snapshot() if self.calibrator is not None else {}
        out = {
            "expected_known_score": expected,
            "anchor_groups": float(anchor.sum()),
            "anchor_true_mean": float(np.nanmean(executed)) if anchor.any() else float("nan"),
            "rollout_known_mean": float(known.mean()),
            "executions": float(self.meter.executions),
            "gpu_hours": self.meter.gpu_hours,
            "failed_executions": float(self.failed_executions),
            **{k: float(v) for k, v in snap.items()},
        }
        return {k: (v if math.isfinite(v) else None) for k, v in out.items()}  # type: ignore[misc]

    # ------------------------------------------------------------------ state (coordinator protocol)
    def state_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "logits": self.policy.logits.copy(),
            "rng": self.rng.bit_generator.state,
            "meter": {k: v for k, v in asdict(self.meter).items() if k != "cfg"},
            "failed_executions": self.failed_executions,
            "last_refit_step": self.last_refit_step,
            "task_ids": list(self.table.task_ids),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["task_ids"] != self.table.task_ids:
            raise ValueError("checkpoint was written for other tasks than the run's pool now offers")
        self.step = int(state["step"])
        self.policy.logits = np.array(state["logits"], dtype=np.float64)
        self.rng.bit_generator.state = state["rng"]
        self.meter = replace(self.meter, **state["meter"])
        self.failed_executions = int(state["failed_executions"])
        self.last_refit_step = state["last_refit_step"]

    def state_digest(self) -> str:
        """sha256 of the policy, RNG, counters, and the calibration state as it would be saved now
        (calibrator.json re-serialised from memory + every pool pair): equal digests = bit-identical."""
        h = hashlib.sha256()
        state = self.state_dict()
        h.update(np.ascontiguousarray(state.pop("logits")).tobytes())
        h.update(json.dumps(state, sort_keys=True, default=str).encode())
        if self.calibrator is not None:
            self.calibrator.save()
            h.update((self.cal_dir / STATE_NAME).read_bytes())
            pool = self.calibrator.pool
            h.update(json.dumps([p.to_row() for p in pool.recent(len(pool))]).encode())
        return h.hexdigest()

    def snapshot_dirs(self) -> dict[str, Path]:
        if self.calibrator is None:
            return {}
        self.calibrator.save()  # record_chased() updates the audit's coverage data without saving
        return {"calibration": self.cal_dir}

    def progress(self) -> dict[str, Any]:
        snap = {k: (v if math.isfinite(v) else None)
                for k, v in (self.calibrator.snapshot() if self.calibrator is not None else {}).items()}
        audit = read_audit(self.cal_dir)
        return {
            "rho": snap.get("rho"), "n_pairs": snap.get("n_pairs"), "n_refits": snap.get("n_refits"),
            "eta2": snap.get("eta2"), "last_refit_step": self.last_refit_step,
            "executions": self.meter.executions, "failed_executions": self.failed_executions,
            "audit_ok": None if audit is None else audit["ok"],
            "audit_warnings": [] if audit is None else audit["warnings"],
            "audit_skipped": [] if audit is None else audit["skipped"],
        }


    def write_plots(self, directory: Path, metrics: list[dict[str, Any]]) -> list[Path]:
        """calibration.png (anchor pairs and f_hat) and curves.png (score, rho, eta2 per step)."""
        from wmrl.tracking.plots import plot_calibration, plot_curves

        written = []
        cal = self.calibrator
        if cal is not None and len(cal.pool):
            grid = np.linspace(0.0, 1.0, 101)
            fitted = cal.calibrate(grid)
            predicted, true = cal.pool.arrays()
            plot_calibration(predicted, true, grid, fitted, directory / "calibration.png",
                             title=f"{self.cfg.run_name}: f_hat over {len(predicted)} anchor pairs")
            written.append(directory / "calibration.png")
        if metrics:
            curves = {"expected score": [m.get("expected_known_score") for m in metrics],
                      "rho": [m.get("rho") for m in metrics], "eta2": [m.get("eta2") for m in metrics]}
            plot_curves([m["step"] for m in metrics], curves, directory / "curves.png",
                        hlines={"rho": ("w_max", self.cfg.algorithm.w_max)}, title=self.cfg.run_name)
            written.append(directory / "curves.png")
        return written


def make_trainer(cfg: WMRLConfig, run: RunDir, runner: AnchorRunner, resume: bool) -> AnchoredSimTrainer:
    return AnchoredSimTrainer(cfg, run, runner, resume)


def dry_candidates(n_tasks: int = 3, n_candidates: int = 4, sleep_s: float = 0.2) -> CandidateTable:
    """Plumbing dry run (with ``launch.work=wmrl.orchestration.work:python_work``): each candidate is a
    tiny script that sleeps and prints its known score, so the executed score equals the known one."""
    known = np.array([[round((k + 1 + t) / (n_candidates + n_tasks), 4) for k in range(n_candidates)]
                      for t in range(n_tasks)])
    codes = [[f"import time\ntime.sleep({sleep_s})\nprint({float(known[t, k])!r})\n" for k in range(n_candidates)]
             for t in range(n_tasks)]
    names = [[f"c{k}" for k in range(n_candidates)] for _ in range(n_tasks)]
    return CandidateTable([f"dry-{t}" for t in range(n_tasks)], names, codes, known)


def make_dry_trainer(cfg: WMRLConfig, run: RunDir, runner: AnchorRunner, resume: bool) -> AnchoredSimTrainer:
    return AnchoredSimTrainer(cfg, run, runner, resume, dry_candidates(cfg.simulator.tasks, cfg.simulator.candidates))
