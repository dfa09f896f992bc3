"""Config section ``train``: the run's length (every trainer) and the LLM trainer's loop (evaluation,
learner checkpoints, threads)."""

from __future__ import annotations

from dataclasses import dataclass

from wmrl.config_checks import check_choice, check_range

EVAL_SPLITS = ("train", "heldout", "both", "none")


@dataclass
class TrainConfig:
    # Learner updates of the run, for every trainer. The default is the synthetic testbed's (the default
    # trainer); the shipped LLM configs set their own (qwen3.5-*: 200, the tiny default: 12).
    steps: int = 400
    # Evaluation (paper metric: avg@k position score, really executed): before the first step, every
    # eval_every steps (0 = only before and after) and after the last step.
    eval_every: int = 0
    eval_k: int = 8
    eval_split: str = "both"  # which pool split(s) to evaluate; "none" switches evaluation off
    eval_tasks: int = 0  # evaluate at most this many tasks per split (0 = all), for quick checks
    # Learner checkpoint (model, optimizer, RNG) every this many steps; a requeued run resumes at the
    # last one and replays the steps after it. 1 = every step (cheap at the tiny scale).
    save_every: int = 1
    # torch CPU threads of the trainer process (generation, world model, learner); 0 = torch's default.
    # On a busy machine 1 thread is several times faster than torch's default of one per core.
    threads: int = 0

    def validate(self, prefix: str = "train") -> None:
        check_range(f"{prefix}.steps", self.steps, 1)
        check_range(f"{prefix}.eval_every", self.eval_every, 0)
        check_range(f"{prefix}.eval_k", self.eval_k, 1)
        check_choice(f"{prefix}.eval_split", self.eval_split, EVAL_SPLITS)
        check_range(f"{prefix}.eval_tasks", self.eval_tasks, 0)
        check_range(f"{prefix}.save_every", self.save_every, 1)
        check_range(f"{prefix}.threads", self.threads, 0)
