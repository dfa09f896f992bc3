"""Config section ``sft``: the supervised warm start's hyperparameters."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # annotations only: loading the section imports no other package
    from wmrl.agent.config import AgentConfig
    from wmrl.models.config import ModelConfig
    from wmrl.sandbox.config import SandboxConfig
    from wmrl.tasks.config import TasksConfig
    from wmrl.world_model.config import WorldModelConfig

# Keys that change how the run is executed, not what it computes: left out of the cache key.
NOT_HASHED = ("checkpoint_every", "threads", "out")


@dataclass
class SFTConfig:
    lr: float = 2e-3  # peak AdamW learning rate (tiny models from scratch want a large one)
    min_lr_ratio: float = 0.1  # cosine decay down to lr * min_lr_ratio
    warmup_steps: int = 10
    epochs: int = 4  # passes over the examples of every kind not listed in epochs_per_kind
    # Fewer (or more) passes for some kinds. World-model prompts are long and unshared (~510k tokens
    # per pass on the built-in pool, against ~89k for the agent's), so one pass keeps SFT in budget.
    epochs_per_kind: dict[str, int] = field(default_factory=lambda: {"world_model": 1})
    # Policy examples per training task: this many references spread evenly over the task's leaderboard,
    # weakest to strongest (0 = every reference). A tiny model memorises a few whole programs per task
    # and then writes runnable code; spread thin over ~60 near-duplicates it splices lines of different
    # programs together (measured: 0 of 84 sampled replies ran after 4 epochs over all 639).
    references_per_task: int = 0
    rows_per_step: int = 4  # packed rows accumulated into one optimizer step
    # At most this many tokens per row (a shared prompt head + the examples after it). Longer rows share
    # more, but attention grows with the square of the row: 2048 costs ~25% fewer FLOPs than 4096 here.
    pack_tokens: int = 2048
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    seed: int = 0
    checkpoint_every: int = 20  # optimizer steps between resumable checkpoints (0 = never)
    threads: int = 0  # torch CPU threads; 0 = torch's default
    # Output directory; "" = <model.cache_dir>/sft/sft-<hash> (cached by content hash).
    out: str = ""

    def epochs_for(self, kind: str) -> int:
        return int(self.epochs_per_kind.get(kind, self.epochs))

    def validate(self, prefix: str = "sft") -> None:
        from wmrl.config_checks import check_range

        check_range(f"{prefix}.lr", self.lr, 0.0, low_open=True)
        check_range(f"{prefix}.min_lr_ratio", self.min_lr_ratio, 0.0, 1.0)
        check_range(f"{prefix}.warmup_steps", self.warmup_steps, 0)
        check_range(f"{prefix}.epochs", self.epochs, 1)
        for kind, epochs in self.epochs_per_kind.items():
            check_range(f"{prefix}.epochs_per_kind.{kind}", epochs, 0)
        check_range(f"{prefix}.references_per_task", self.references_per_task, 0)
        check_range(f"{prefix}.rows_per_step", self.rows_per_step, 1)
        check_range(f"{prefix}.pack_tokens", self.pack_tokens, 16)
        check_range(f"{prefix}.weight_decay", self.weight_decay, 0.0)
        check_range(f"{prefix}.grad_clip", self.grad_clip, 0.0)
        check_range(f"{prefix}.checkpoint_every", self.checkpoint_every, 0)
        check_range(f"{prefix}.threads", self.threads, 0)


class SFTRunConfig(Protocol):
    """The sections SFT reads of a run's config (``wmrl.config.WMRLConfig`` is one): the model to build,
    the task pool, the prompts' sections (agent, world model, sandbox limits) and ``sft`` itself."""

    model: ModelConfig
    tasks: TasksConfig
    sandbox: SandboxConfig
    agent: AgentConfig
    world_model: WorldModelConfig
    sft: SFTConfig
