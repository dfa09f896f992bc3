"""The LLM trainer's step loop (``trainer: llm``): one WMRL step in the loop shell, then weight sync,
rollout records, evaluation with the paper's metric, learner checkpoints, and the coordinator protocol
(state, progress, plots). Its parts are built by :func:`~wmrl.trainers.llm.assembly.assemble`; the
package docstring (:mod:`wmrl.trainers.llm`) describes the whole and its resume."""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from wmrl.agent.records import write_rollouts
from wmrl.calibration.calibrator import Calibrator
from wmrl.config import WMRLConfig
from wmrl.evaluation import EvalReport, evaluate_split
from wmrl.execution.executed import ExecutedEnvironment, Runner
from wmrl.io import append_line_durable
from wmrl.loop import LoopShell
from wmrl.models.cache import built_hash
from wmrl.step import PHASES, StepResult, step_seconds_key
from wmrl.storage.rundir import RunDir
from wmrl.tasks.pool import resolve_pool_root
from wmrl.trainers.common import RunTotals, audit_metrics, write_run_plots
from wmrl.trainers.llm.assembly import assemble
from wmrl.trainers.llm.names import COST_SOURCE, EVALS, LEARNER_DIR
from wmrl.trainers.llm.shared_eval import SHARED_EVALS, shared_evaluation
from wmrl.world_model.memory import ExecutedMemory, executed_solutions

log = logging.getLogger(__name__)


class LLMTrainer:
    def __init__(self, cfg: WMRLConfig, run: RunDir, runner: Runner, resume: bool) -> None:
        if cfg.train.threads:
            torch.set_num_threads(cfg.train.threads)
        self.cfg, self.run_dir, self.runner = cfg, run, runner
        self.total_steps = cfg.train.steps
        self.step = 0
        self.rng = np.random.default_rng(cfg.algorithm.seed)
        torch.manual_seed(cfg.algorithm.seed)
        self.shell = LoopShell(cfg.algorithm, run.path / "calibration", resume=resume)
        parts = assemble(cfg, run, runner, self.shell.calls_world_model)
        self.model_path = parts.model_path
        self.train_tasks, self.eval_tasks = parts.tasks.train, parts.tasks.evaluated
        self.learner, self.generator, self.policy = parts.learner, parts.generator, parts.policy
        self.executed_env, self.world_model = parts.executed_env, parts.world_model
        self._memory_offline, self._memory_log = parts.memory_offline, parts.memory_log
        self.totals = RunTotals()
        self.last_eval: dict[str, float] = {}
        self._saved: dict[str, Any] = {}
        if not resume:
            self._save_learner()  # step 0: what a run that never finished a step resumes from

    @property
    def calibrator(self) -> Calibrator | None:
        return self.shell.calibrator

    # ------------------------------------------------------------------ one step
    def run_step(self) -> dict[str, float]:
        metrics: dict[str, float] = {}
        eval_seconds = 0.0
        if self.step == 0 and self.cfg.train.eval_split != "none" and not self.last_eval:
            started = time.perf_counter()
            metrics.update(self.evaluate_now("before"))
            eval_seconds += time.perf_counter() - started
        cpu_started = time.process_time()  # the step's spans below (not the evaluations): RunTotals.cpu_seconds
        done, report = self.shell.step(
            self.step, task_pool=[t.task_id for t in self.train_tasks], policy=self.policy,
            executed_env=self.executed_env, world_model_env=self.world_model, learner=self.learner,
            rng=self.rng,
        )
        started = time.perf_counter()
        if done.updated:  # serve the new weights in place (weight sync, never a reload from disk)
            self.generator.update_weights(self.learner.named_parameters())
        sync_seconds = time.perf_counter() - started
        started = time.perf_counter()
        memory = self.world_model.memory if self.world_model is not None else None
        if memory is not None and self.cfg.world_model.memory_online:  # after the step: its r_hat never saw them
            anchors = executed_solutions(done.groups, (done.anchor & ~done.dropped).tolist())
            self._memory_log.append(self.step, anchors)
            memory.add(anchors)
        write_rollouts(self.run_dir.path, self.step, done.groups,
                       {"anchor": done.anchor.tolist(), "dropped": done.dropped.tolist(),
                        "weights": done.weights.tolist(), "rho": done.rho})
        io_seconds = time.perf_counter() - started
        self.totals.charge(done, {"weight_sync": sync_seconds, "io": io_seconds},
                           learner_cpu_seconds=time.process_time() - cpu_started)
        self.step += 1
        metrics.update(self._metrics(done, sync_seconds, io_seconds))
        metrics.update(audit_metrics(report))
        every = self.cfg.train.eval_every
        last = self.step >= self.total_steps
        started = time.perf_counter()
        if self.cfg.train.eval_split != "none" and (last or (every and self.step % every == 0)):
            metrics.update(self.evaluate_now("after" if last else f"step{self.step}"))
        metrics[step_seconds_key("evaluation")] = eval_seconds + time.perf_counter() - started
        started = time.perf_counter()
        if last or self.step % self.cfg.train.save_every == 0:
            self._save_learner()
        metrics[step_seconds_key("checkpoint")] = time.perf_counter() - started
        return {k: (v if v is None or math.isfinite(v) else None) for k, v in metrics.items()}  # type: ignore[misc]

    def evaluate_now(self, label: str) -> dict[str, float]:
        """The paper's metric on the configured split(s), really executed; appended to ``evals.jsonl``."""
        cfg = self.cfg.train
        splits = ("train", "heldout") if cfg.eval_split == "both" else (cfg.eval_split,)
        out: dict[str, float] = {}
        for split in splits:
            tasks = self.eval_tasks[split][: cfg.eval_tasks or None]
            if not tasks:
                continue
            report = self._evaluate_split(label, split, [(t.task_id, t.category) for t in tasks])
            out.update(report.metrics(f"eval/{split}"))
        self.last_eval = out
        return out

    def _evaluate_split(self, label: str, split: str, listed: list[tuple[str, str]]) -> EvalReport:
        """One split's evaluation, recorded; before the first step the shared one of the initial policy
        when ``train.share_initial_eval`` allows it (read back if another run measured it)."""
        # Its own request namespace, so evaluation never collides with a training step's requests.
        env = ExecutedEnvironment(self.runner, f"{self.run_dir.run_id}-eval-{label}-{split}",
                                  self.cfg.sandbox.timeout_s, self.cfg.launch, self.cfg.sandbox.max_wall_factor)

        def measure() -> EvalReport:
            return evaluate_split(self.policy, env, listed, self.cfg.train.eval_k, self.cfg.algorithm.seed,
                                  self.step, split,
                                  progress=lambda line: log.info("evaluation %s (%s): %s", label, split, line))

        inputs = self._initial_eval_inputs(split, listed) if label == "before" and self.step == 0 else None
        if inputs is None:
            report, measured_by = measure(), None
        else:
            timing = self.cfg.launch.timing
            report, measured_by = shared_evaluation(inputs, self.run_dir.run_id, measure,
                                                    self.run_dir.path.parent / SHARED_EVALS,
                                                    timing.lock_stale_s, timing.lock_heartbeat_s)
            if measured_by is not None:
                log.info("evaluation %s (%s): the initial policy's, as run %s measured it (train."
                         "share_initial_eval)", label, split, measured_by)
        self._record_eval(label, split, report, measured_by)
        return report

    def _initial_eval_inputs(self, split: str, listed: list[tuple[str, str]]) -> dict[str, Any] | None:
        """What the evaluation of the initial policy depends on (``shared_evaluation``'s key), or None
        when it is not shared: switched off, or a policy without a build hash (nothing names its weights)."""
        build = built_hash(self.model_path)
        if not self.cfg.train.share_initial_eval or build is None:
            return None
        cfg = self.cfg
        return {"policy_build": build, "split": split, "tasks": listed, "pool": str(resolve_pool_root(cfg.tasks)),
                "k": cfg.train.eval_k, "seed": cfg.algorithm.seed, "sampling": asdict(cfg.sampling),
                "generation": asdict(cfg.generation), "dtype": cfg.model.dtype, "agent": asdict(cfg.agent),
                "sandbox": asdict(cfg.sandbox)}

    def _record_eval(self, label: str, split: str, report: EvalReport, measured_by: str | None = None) -> None:
        line = {"label": label, "step": self.step, "split": split, "at": time.time(), **report.to_dict()}
        if measured_by is not None:  # read back, not executed by this run (train.share_initial_eval)
            line["measured_by"] = measured_by
        append_line_durable(self.run_dir.path / EVALS, json.dumps(line, sort_keys=True))
        log.info("evaluation %s (%s, step %d): %.4f\n%s", label, split, self.step, report.score, report.table())

    def _metrics(self, done: StepResult, sync_seconds: float, io_seconds: float) -> dict[str, float]:
        anchors = done.anchor & ~done.dropped
        wm_groups = ~done.anchor & ~done.dropped
        calibrated = done.scores[wm_groups] if wm_groups.any() else np.array([])
        snap = self.calibrator.snapshot() if self.calibrator is not None else {}
        generated = [len(turn.generated_ids) for g in done.groups for t in g for turn in t.turns]
        out = {
            "anchor_true_mean": float(np.nanmean(done.r[anchors])) if anchors.any() else float("nan"),
            "wm_r_hat_mean": float(np.nanmean(done.r_hat[wm_groups])) if wm_groups.any() else float("nan"),
            "wm_calibrated_mean": float(np.nanmean(calibrated)) if calibrated.size else float("nan"),
            "anchor_groups": float(anchors.sum()), "dropped_groups": float(done.dropped.sum()),
            "rho": done.rho, "pairs_step": float(done.pairs),
            "reply_tokens_mean": float(np.mean(generated)) if generated else 0.0,
            # this step's; the run's totals so far are seconds_<phase> (RunTotals)
            step_seconds_key("weight_sync"): sync_seconds, step_seconds_key("io"): io_seconds,
            **{step_seconds_key(p): done.seconds.get(p, 0.0) for p in PHASES},
            **self.totals.as_metrics(),
            **{k: float(v) for k, v in snap.items() if k != "rho"},
            **{k: float(v) for k, v in done.learner.items()},
        }
        if self.world_model is not None:
            out.update({f"world_model/{k}": float(v) for k, v in self.world_model.stats().items()})
        return out

    # ------------------------------------------------------------------ state (coordinator protocol)
    def _save_learner(self) -> None:
        # save_checkpoint also prunes to the newest learner.keep_checkpoints
        path = self.learner.save_checkpoint(self.run_dir.path / LEARNER_DIR, self.step)
        self._saved = {
            "step": self.step, "learner_checkpoint": str(path.relative_to(self.run_dir.path)),
            "rng": self.rng.bit_generator.state, "totals": self.totals.to_dict(),
            "last_refit_step": self.shell.last_refit_step, "last_eval": dict(self.last_eval),
            "task_ids": [t.task_id for t in self.train_tasks],
            # cumulative world-model counters (JSON fallbacks, pre-check settles, calls): a resumed run
            # continues them instead of counting from 0
            "world_model_counts": self.world_model.state_dict() if self.world_model is not None else {},
        }

    def state_dict(self) -> dict[str, Any]:
        """The state as of the last learner checkpoint (see the module docstring)."""
        return dict(self._saved)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["task_ids"] != [t.task_id for t in self.train_tasks]:
            raise ValueError("checkpoint was written for other tasks than the run's pool now offers")
        self.step = int(state["step"])
        self.learner.load_checkpoint(self.run_dir.path / state["learner_checkpoint"])
        self.generator.update_weights(self.learner.named_parameters())
        self.rng.bit_generator.state = state["rng"]
        self.totals = RunTotals.from_dict(state["totals"])
        self.shell.last_refit_step = state["last_refit_step"]
        self.last_eval = dict(state["last_eval"])
        if self.world_model is not None:
            self.world_model.load_state_dict(state.get("world_model_counts", {}))  # absent before 2026-12
            if self.world_model.memory is not None:  # the memory as it was after the checkpointed step
                self.world_model.memory = ExecutedMemory(self._memory_offline + self._memory_log.rewind(self.step))
        self.shell.rewind(self.step)  # the calibrator back to the end of the checkpointed step
        self._saved = dict(state)

    def state_digest(self) -> str:
        """sha256 of the saved state and the learner checkpoint it points to (measured seconds left out)."""
        h = hashlib.sha256()
        state = dict(self._saved)
        state["totals"] = RunTotals.counted(state["totals"])
        h.update(json.dumps(state, sort_keys=True, default=str).encode())
        meta = self.run_dir.path / state["learner_checkpoint"] / "learner.json"
        if meta.exists():
            h.update(meta.read_bytes())
        return h.hexdigest()

    def snapshot_dirs(self) -> dict[str, Path]:
        return self.shell.snapshot_dirs()

    def progress(self) -> dict[str, Any]:
        return {**self.shell.progress(), "cost_source": COST_SOURCE, **self.totals.progress(),
                "last_eval": self.last_eval,
                "world_model": self.world_model.stats() if self.world_model is not None else {}}

    def write_plots(self, directory: Path, metrics: list[dict[str, Any]]) -> list[Path]:
        curves = {"anchor true score": "anchor_true_mean", "world-model r_hat": "wm_r_hat_mean",
                  "calibrated f_hat(r_hat)": "wm_calibrated_mean"}
        return write_run_plots(self.cfg, self.calibrator, directory, metrics, curves)


def make_trainer(cfg: WMRLConfig, run: RunDir, runner: Runner, resume: bool) -> LLMTrainer:
    return LLMTrainer(cfg, run, runner, resume)
