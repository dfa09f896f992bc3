"""Config section ``sft``: the supervised warm start's hyperparameters."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Protocol

from wmrl.config_checks import Section, each, in_range

if TYPE_CHECKING:  # annotations only: loading the section imports no other package
    from wmrl.agent.config import AgentConfig
    from wmrl.models.config import ModelConfig
    from wmrl.sandbox.config import SandboxConfig
    from wmrl.tasks.config import TasksConfig
    from wmrl.world_model.config import WorldModelConfig

# Keys that change how the run is executed, not what it computes: left out of the cache key.
NOT_HASHED = ("checkpoint_every", "threads", "out")


@dataclass
class SFTConfig(Section):
    KEY: ClassVar[str] = "sft"
    # Peak AdamW learning rate (tiny models from scratch want a large one)
    lr: float = field(default=2e-3, metadata=in_range(0.0, low_open=True))
    # Cosine decay down to lr * min_lr_ratio
    min_lr_ratio: float = field(default=0.1, metadata=in_range(0.0, 1.0))
    warmup_steps: int = field(default=10, metadata=in_range(0))
    # Passes over the examples of every kind not listed in epochs_per_kind
    epochs: int = field(default=4, metadata=in_range(1))
    # Fewer (or more) passes for some kinds. World-model prompts are long and unshared (~510k tokens
    # per pass on the built-in pool, against ~89k for the agent's), so one pass keeps SFT in budget.
    epochs_per_kind: dict[str, int] = field(default_factory=lambda: {"world_model": 1},
                                            metadata=each(in_range(0)))
    # Policy examples per training task: this many references spread evenly over the task's leaderboard,
    # weakest to strongest (0 = every reference). A tiny model memorises a few whole programs per task
    # and then writes runnable code; spread thin over ~60 near-duplicates it splices lines of different
    # programs together (measured: 0 of 84 sampled replies ran after 4 epochs over all 639).
    references_per_task: int = field(default=0, metadata=in_range(0))
    # The policy reply's analysis first names the CSV files its code reads and the id column, then the
    # target (off: "The target is ...", then "reads DATA_DIR, predicts one row per test id"). On the task families a 5M policy
    # (4 SFT epochs) wrote the held-out instance's own target in 25 of 30 replies, but its files and id
    # column no more often than a fixed guess would; with this on, the train file 25/30 and the target
    # 22/30, the test file and id column still not (results/transfer/pilot.md). Off: the tiny default's
    # SFT as measured.
    reply_names_inputs: bool = False
    # Packed rows accumulated into one optimizer step
    rows_per_step: int = field(default=4, metadata=in_range(1))
    # At most this many tokens per row (a shared prompt head + the examples after it). Longer rows share
    # more, but attention grows with the square of the row: 2048 costs ~25% fewer FLOPs than 4096 here.
    pack_tokens: int = field(default=2048, metadata=in_range(16))
    weight_decay: float = field(default=0.0, metadata=in_range(0.0))
    grad_clip: float = field(default=1.0, metadata=in_range(0.0))
    seed: int = 0
    # Optimizer steps between resumable checkpoints (0 = never)
    checkpoint_every: int = field(default=20, metadata=in_range(0))
    threads: int = field(default=0, metadata=in_range(0))  # torch CPU threads; 0 = torch's default
    # Output directory; "" = <model.cache_dir>/sft/sft-<hash> (cached by content hash).
    out: str = ""

    def epochs_for(self, kind: str) -> int:
        return int(self.epochs_per_kind.get(kind, self.epochs))


class SFTRunConfig(Protocol):
    """The sections SFT reads of a run's config (``wmrl.config.WMRLConfig`` is one): the model to build,
    the task pool, the prompts' sections (agent, world model, sandbox limits) and ``sft`` itself."""

    model: ModelConfig
    tasks: TasksConfig
    sandbox: SandboxConfig
    agent: AgentConfig
    world_model: WorldModelConfig
    sft: SFTConfig
