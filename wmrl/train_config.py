"""Config section ``train``: the run's length (every trainer) and the LLM trainer's loop (evaluation,
learner checkpoints, threads)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from wmrl.config_checks import Section, choice, in_range

EVAL_SPLIT_CHOICES = ("train", "heldout", "both", "none")  # one split, both, or no evaluation


@dataclass
class TrainConfig(Section):
    KEY: ClassVar[str] = "train"
    # Learner updates of the run, for every trainer. The default is the synthetic testbed's (the default
    # trainer); the shipped LLM configs set their own (qwen3.5-*: 200, the tiny default: 12).
    steps: int = field(default=400, metadata=in_range(1))
    # Evaluation (paper metric: avg@k position score, really executed): before the first step, every
    # eval_every steps (0 = only before and after) and after the last step.
    eval_every: int = field(default=0, metadata=in_range(0))
    eval_k: int = field(default=8, metadata=in_range(1))
    # Which pool split(s) to evaluate; "none" switches evaluation off
    eval_split: str = field(default="both", metadata=choice(EVAL_SPLIT_CHOICES))
    # Evaluate at most this many tasks per split (0 = all), for quick checks
    eval_tasks: int = field(default=0, metadata=in_range(0))
    # The evaluation before the first step is measured once per initial policy (and split, k, seed,
    # sampling, agent, sandbox) and read back by later runs from the same start under the same runs root,
    # e.g. the other variants of a paired sweep's seed (wmrl/trainers/llm/shared_eval.py;
    # <runs_root>/.initial_evals). Evaluation is not charged to a run's compute either way.
    share_initial_eval: bool = True
    # Learner checkpoint (model, optimizer, RNG) every this many steps; a requeued run resumes at the
    # last one and replays the steps after it. 1 = every step (cheap at the tiny scale).
    save_every: int = field(default=1, metadata=in_range(1))
    # torch CPU threads of the trainer process (generation, world model, learner); 0 = torch's default.
    # On a busy machine 1 thread is several times faster than torch's default of one per core.
    threads: int = field(default=0, metadata=in_range(0))
