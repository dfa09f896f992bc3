"""The LLM trainer (``trainer: llm``, ``wmrl train``): a research agent post-trained with WMRL.

One step is :func:`wmrl.step.wmrl_step` with these parts:

- policy: :class:`~wmrl.agent.policy.AgentPolicy`, the multi-turn agent over a :class:`Generator`
  (transformers on CPU, vLLM on a cluster) that samples replies, parses their code block and feeds
  each turn's submission to its group's environment;
- executed environment (anchor groups): :class:`~wmrl.orchestration.executed.ExecutedEnvironment`, the
  run's workers (local processes or a Slurm array) running the sandbox and the grader;
- world-model environment: :class:`~wmrl.world_model.env.WorldModelEnvironment`, the frozen initial
  policy prompted with the eight checks of Appendix E (in this process, or a served endpoint);
- learner: :class:`~wmrl.learner.grpo.GRPOLearner`, the DeepSpeed GRPO update with the Eq. 5 weights.

Around the step, this module does what only a real run needs: weight sync from the learner to the
generator after each update, rollout records (``rollouts/step-N.jsonl.gz``), evaluation with the paper's
metric before, during and after training (real execution, avg@k), learner checkpoints every
``train.save_every`` steps, and the coordinator protocol (state, progress, plots).

Resume: the coordinator snapshots :meth:`state_dict` after every step, but model and optimizer live in
learner checkpoints; so :meth:`state_dict` is the state *as of the last learner checkpoint*, and a
requeued run resumes there (calibration restored to the same step) and replays the steps after it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from wmrl.agent.policy import AgentPolicy
from wmrl.agent.records import write_rollouts
from wmrl.calibration.calibrator import Calibrator
from wmrl.config import WMRLConfig
from wmrl.evaluation import EvalReport, evaluate_split
from wmrl.generation.data_parallel import place_on_rank
from wmrl.generation.factory import build_generator
from wmrl.generation.shared_prefix import sharing_prefixes
from wmrl.io import append_line_durable, atomic_write_json
from wmrl.learner.follower import lead
from wmrl.loop import LoopShell
from wmrl.models.cache import built_hash
from wmrl.models.kernels import log_kernels
from wmrl.orchestration.executed import ExecutedEnvironment, Runner
from wmrl.orchestration.rundir import RunDir
from wmrl.sft.data import run_context
from wmrl.sft.pipeline import INITIAL_POLICY, read_pinned_initial_policy
from wmrl.step import PHASES, StepResult
from wmrl.tasks.overview import task_overview
from wmrl.tasks.pool import load_pool, resolve_pool_root
from wmrl.trainers.common import RunTotals, write_run_plots
from wmrl.world_model.backends import HTTPBackend, InProcessBackend
from wmrl.world_model.env import TaskCase, WorldModelEnvironment
from wmrl.world_model.memory import Executed, ExecutedMemory, OnlineLog, executed_solutions
from wmrl.world_model_data.examples import memory_examples, policy_samples, policy_samples_cost

log = logging.getLogger(__name__)
COST_SOURCE = "measured"
LEARNER_DIR = "checkpoints/learner"
EVALS = "evals.jsonl"
MEMORY_LOG = "world_model_memory.jsonl"  # the anchors the executed-solution memory learned, per step
# the memory's one-time build cost (its policy samples drawn, its own executions), read by scripts/headline.py
MEMORY_BUILD = "memory_build.json"
# A step's seconds per phase in its metrics row (the step-time breakdown, benchmarks/bench_train_step.py);
# evaluation and the learner checkpoint fall only in the steps that evaluate or save.
STEP_PHASE_KEYS = {"generation": "step_seconds_generation", "world_model": "step_seconds_world_model",
                   "execution": "step_seconds_execution", "learner": "step_seconds_update",
                   "weight_sync": "step_seconds_weight_sync", "io": "step_seconds_io",
                   "evaluation": "step_seconds_evaluation", "checkpoint": "step_seconds_checkpoint"}


class LLMTrainer:
    def __init__(self, cfg: WMRLConfig, run: RunDir, runner: Runner, resume: bool) -> None:
        import torch


        if cfg.train.threads:
            torch.set_num_threads(cfg.train.threads)
        self.cfg, self.run_dir, self.runner = cfg, run, runner
        self.total_steps = cfg.train.steps
        self.step = 0
        self.rng = np.random.default_rng(cfg.algorithm.seed)
        torch.manual_seed(cfg.algorithm.seed)
        # The initial policy (model.path, or the tiny default after SFT), resolved and pinned by `wmrl
        # launch` before this trainer starts: a resume never swaps the reference or the world model.
        pinned = read_pinned_initial_policy(run.path, log=log.info)
        if pinned is None:
            raise RuntimeError(f"no initial policy pinned in {run.path / INITIAL_POLICY}: start the run with "
                               "`wmrl launch` or `wmrl train`, which resolve it (building it if needed) first")
        self.model_path = pinned
        root = resolve_pool_root(cfg.tasks)
        competitions = Path(cfg.tasks.competitions_dir) if cfg.tasks.competitions_dir else None
        every = load_pool(root, "all", competitions)
        self.train_tasks = [t for t in every if t.split == (cfg.tasks.split if cfg.tasks.split != "all" else t.split)]
        if not self.train_tasks:
            raise ValueError(f"no task of split {cfg.tasks.split!r} in the pool at {root}")
        self.eval_tasks = {split: [t for t in every if t.split == split] for split in ("train", "heldout")}
        overviews = {t.task_id: task_overview(t) for t in every}
        agent_ctx, _, runtime = run_context(cfg)

        # Rank 0 of several learner ranks leads them (the others follow, wmrl/learner/follower.py).
        learner = lead(cfg.learner, self.model_path)
        log_kernels(learner.engine.module)
        # generation.vllm.placement: colocated vLLM takes turns with the learner on its GPU (colocation.py),
        # one engine per learner rank, each drawing a share of every call (data_parallel.py)
        self.learner, self.generator = place_on_rank(learner, self.model_path, learner.channel, cfg.generation,
                                                     cfg.model.dtype)
        self.policy = AgentPolicy(self.generator, cfg.sampling.params(), overviews, cfg.agent, agent_ctx)
        self.executed_env = ExecutedEnvironment(runner, run.run_id, cfg.sandbox.timeout_s, cfg.launch)
        self.shell = LoopShell(cfg.algorithm, run.path / "calibration", resume=resume)
        self.cal_dir = self.shell.directory
        self.world_model = None
        # world_model.memory: the executed-solution memory answers the quality check; it starts from what
        # was executed offline and, with memory_online, learns each step's anchors (logged for a resume).
        self._memory_offline: list[Executed] = []
        self._memory_log = OnlineLog(run.path / MEMORY_LOG)
        if self.shell.calls_world_model:
            cases = {t.task_id: TaskCase.from_task(t) for t in every}
            memory = None
            if cfg.world_model.memory:
                started = time.perf_counter()
                build = built_hash(self.model_path)
                sampling = (self.policy, self.train_tasks, cfg.world_model.memory_policy_samples, cfg.world_model.seed)
                drawn = time.perf_counter()
                samples = policy_samples(*sampling, build)
                # without a build hash nothing is cached: the samples were drawn just now, at this cost
                drawing = (policy_samples_cost(*sampling, build) if build is not None else
                           {"samples": len(samples), "seconds_generation": time.perf_counter() - drawn})
                cost: dict[str, Any] = {"build": build, **(drawing or {})}
                self._memory_offline = memory_examples(cfg, every, runtime, samples, progress=False, cost=cost)
                if not run.path.joinpath(MEMORY_BUILD).is_file():  # a resume keeps the first start's record
                    atomic_write_json(run.path / MEMORY_BUILD, cost)
                memory = ExecutedMemory(self._memory_offline)
                log.info("executed-solution memory: %d solutions of known outcome (%d samples of the initial "
                         "policy), %.1f s", len(memory), len(samples), time.perf_counter() - started)
            self.world_model = WorldModelEnvironment(self._world_model_backend(), cases, cfg.world_model,
                                                     runtime, cfg.sandbox.timeout_s, cfg.sandbox.gpus, memory)
        self.totals = RunTotals()
        self.last_eval: dict[str, float] = {}
        self._saved: dict[str, Any] = {}
        if not resume:
            self._save_learner()  # step 0: what a run that never finished a step resumes from

    @property
    def calibrator(self) -> Calibrator | None:
        return self.shell.calibrator

    def _world_model_backend(self) -> Any:
        """The frozen initial policy in this process (a second copy, never synced), or an endpoint."""
        wm = self.cfg.world_model
        if wm.backend == "http":
            return HTTPBackend(wm.url, wm.model or str(self.model_path), wm.max_new_tokens, wm.temperature,
                               wm.seed, concurrency=wm.concurrency, timeout_s=wm.timeout_s, retries=wm.retries)
        frozen = build_generator(self.model_path, self.cfg.generation, self.cfg.model.dtype)
        if wm.share_prefixes:
            frozen = sharing_prefixes(frozen, wm.batch_size)
        return InProcessBackend(frozen, wm.max_new_tokens, wm.temperature, wm.seed)

    # ------------------------------------------------------------------ one step
    def run_step(self) -> dict[str, float]:
        metrics: dict[str, float] = {}
        eval_seconds = 0.0
        if self.step == 0 and self.cfg.train.eval_split != "none" and not self.last_eval:
            started = time.perf_counter()
            metrics.update(self.evaluate_now("before"))
            eval_seconds += time.perf_counter() - started
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
            anchors = executed_solutions(done.groups, (done.executed & ~done.dropped).tolist())
            self._memory_log.append(self.step, anchors)
            memory.add(anchors)
        write_rollouts(self.run_dir.path, self.step, done.groups,
                       {"executed": done.executed.tolist(), "dropped": done.dropped.tolist(),
                        "weights": done.weights.tolist(), "rho": done.rho})
        io_seconds = time.perf_counter() - started
        self.totals.charge(done, {"weight_sync": sync_seconds, "io": io_seconds})
        audit = {} if report is None else {"audit_ok": float(report.ok)}
        self.step += 1
        metrics.update(self._metrics(done, sync_seconds, io_seconds))
        metrics.update(audit)
        every = self.cfg.train.eval_every
        last = self.step >= self.total_steps
        started = time.perf_counter()
        if self.cfg.train.eval_split != "none" and (last or (every and self.step % every == 0)):
            metrics.update(self.evaluate_now("after" if last else f"step{self.step}"))
        metrics["step_seconds_evaluation"] = eval_seconds + time.perf_counter() - started
        started = time.perf_counter()
        if last or self.step % self.cfg.train.save_every == 0:
            self._save_learner()
        metrics["step_seconds_checkpoint"] = time.perf_counter() - started
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
            # Its own request namespace, so evaluation never collides with a training step's requests.
            env = ExecutedEnvironment(self.runner, f"{self.run_dir.run_id}-eval-{label}-{split}",
                                      self.cfg.sandbox.timeout_s, self.cfg.launch)
            report = evaluate_split(self.policy, env, [(t.task_id, t.category) for t in tasks], cfg.eval_k,
                                    self.cfg.algorithm.seed, self.step, split,
                                    progress=lambda line, split=split: log.info("evaluation %s (%s): %s", label,
                                                                                split, line))
            self._record_eval(label, split, report)
            out.update(report.metrics(f"eval/{split}"))
        self.last_eval = out
        return out

    def _record_eval(self, label: str, split: str, report: EvalReport) -> None:
        line = {"label": label, "step": self.step, "split": split, "at": time.time(), **report.to_dict()}
        append_line_durable(self.run_dir.path / EVALS, json.dumps(line, sort_keys=True))
        log.info("evaluation %s (%s, step %d): %.4f\n%s", label, split, self.step, report.score, report.table())

    def _metrics(self, done: StepResult, sync_seconds: float, io_seconds: float) -> dict[str, float]:
        anchors = done.executed & ~done.dropped
        wm_groups = ~done.executed & ~done.dropped
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
            "step_seconds_weight_sync": sync_seconds, "step_seconds_io": io_seconds,
            **{f"step_seconds_{p}": done.seconds.get(p, 0.0) for p in PHASES},
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
        state["totals"] = {k: v for k, v in state["totals"].items() if not k.startswith("seconds_")}
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
