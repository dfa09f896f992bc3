"""The names a run of the LLM trainer writes: files in its run directory and its per-step metric keys.

Kept apart from the trainer (which needs torch) so that reports (``scripts/headline.py``,
``benchmarks/bench_train_step.py``) read them without it.
"""

from __future__ import annotations

from wmrl.step import PHASES, step_seconds_key

COST_SOURCE = "measured"
LEARNER_DIR = "checkpoints/learner"
EVALS = "evals.jsonl"
MEMORY_LOG = "world_model_memory.jsonl"  # the anchors the executed-solution memory learned, per step
# the memory's one-time build cost (its policy samples drawn, its own executions), read by scripts/headline.py
MEMORY_BUILD = "memory_build.json"
# The phases of one of its steps: the step's own (wmrl.step.PHASES), then what the trainer does around it;
# evaluation and the learner checkpoint fall only in the steps that evaluate or save.
RUN_PHASES = (*PHASES, "weight_sync", "io", "evaluation", "checkpoint")
# A step's seconds per phase in its metrics row (the step-time breakdown, benchmarks/bench_train_step.py).
STEP_PHASE_KEYS = {phase: step_seconds_key(phase) for phase in RUN_PHASES}
