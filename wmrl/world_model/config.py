"""Config section ``world_model``: the frozen LLM that predicts execution outcomes (paper, Appendix D/E)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from wmrl.config_checks import ConfigError, Section, choice, each, in_range
from wmrl.world_model.prompts import CHECK_NAMES, PROMPT_STYLES, QUALITY

BACKENDS = ("in_process", "http")


@dataclass
class WorldModelConfig(Section):
    KEY: ClassVar[str] = "world_model"
    # in_process: a frozen copy of the policy's backbone in the coordinator (a Generator);
    # http: an OpenAI-compatible endpoint at `url` (a `vllm serve` job on a cluster, `transformers serve` locally).
    backend: str = field(default="in_process", metadata=choice(BACKENDS))
    url: str = ""  # e.g. http://gpu-node-3:8000/v1
    model: str = ""  # the served model name the endpoint expects ("" = the model path)
    # Which of the eight checks run (paper order); the quality check must stay, it scores valid code.
    checks: list[str] = field(default_factory=lambda: list(CHECK_NAMES), metadata=each(choice(CHECK_NAMES)))
    # "full", or "short": the same segments in a few lines, for tiny models
    prompt_style: str = field(default="full", metadata=choice(PROMPT_STYLES))
    max_new_tokens: int = field(default=1024, metadata=in_range(1))  # Appendix D: the prediction budget
    # The context cap of Appendix D (12k tokens), applied to the overview in characters (~4 per token) so
    # that both backends cut the prompt identically without a tokenizer on the client side.
    max_overview_chars: int = field(default=36000, metadata=in_range(100))
    # Greedy: a frozen simulator should say the same thing twice
    temperature: float = field(default=0.0, metadata=in_range(0.0))
    # in_process on the transformers backend: the prefix the checks of a submission (and the submissions
    # of a task) share is prefilled once, and up to `batch_size` requests decode together
    # (wmrl/generation/shared_prefix.py; the same answers, half the CPU-seconds: results/bench_world_model.md).
    share_prefixes: bool = True
    batch_size: int = field(default=128, metadata=in_range(1))
    seed: int = 0
    # A failing check with confidence >= this makes the solution predicted-invalid.
    fail_threshold: float = field(default=0.5, metadata=in_range(0.0, 1.0, low_open=True))
    # Predicted Position Score when the quality check's answer is unparseable (counted as a fallback).
    fallback_quality: float = field(default=0.5, metadata=in_range(0.0, 1.0))
    precheck: bool = True  # the static pre-check (beyond the paper); off = the paper's exact setting
    # HTTP client: requests in flight at once, seconds per request, retries after a failed request.
    concurrency: int = field(default=16, metadata=in_range(1))
    timeout_s: float = field(default=300.0, metadata=in_range(0.0, low_open=True))
    retries: int = field(default=3, metadata=in_range(0))

    # SFT data of the tiny world model (wmrl/sft/data.py): references per task, each with its broken
    # variants, really executed once (cached) with this time budget; this fraction of references (by a
    # hash of their name) is left out of the world model's SFT and of the memory, not out of the policy's
    # (sft.references_per_task), which is why the evaluation picks others (benchmarks/eval_world_model.py).
    sft_variants_per_task: int = field(default=4, metadata=in_range(0))
    heldout_fraction: float = field(default=0.25, metadata=in_range(0.0, 1.0))
    variant_timeout_s: float = field(default=120.0, metadata=in_range(1.0))
    # Also every other reference solution of the training tasks that is not held out, unmodified, its
    # quality answer the real position score the leaderboard's run gave it (the pool build ran them all:
    # nothing more is executed). Off by default until the tiny sweep is re-run on it (issue 22).
    sft_all_references: bool = False
    # The executed-solution memory answers the quality check (wmrl/world_model/memory.py, beyond the paper):
    # a regression fitted on the training tasks' references (their leaderboard scores) and their executed
    # variants; with memory_online the run's anchors join it after each step. Off (the paper): the LLM answers
    # it. On in the tiny default.
    memory: bool = False
    memory_online: bool = True
    # ... and this many first-turn solutions of the initial policy per training task, executed once when a
    # run starts (cached by content, and the samples by the policy's build hash: once per SFT, shared by
    # every run and seed from it): the distribution the memory is asked about. 0: none.
    memory_policy_samples: int = field(default=0, metadata=in_range(0))

    def check_together(self, prefix: str) -> None:
        if self.backend == "http" and not str(self.url).startswith(("http://", "https://")):
            raise ConfigError(
                f"{prefix}.url={self.url!r} is not allowed with {prefix}.backend=http; "
                "give the endpoint's base URL, e.g. http://HOST:8000/v1"
            )
        if not self.checks:
            raise ConfigError(f"{prefix}.checks is empty; choose from: {', '.join(CHECK_NAMES)}")
        if len(set(self.checks)) != len(self.checks):
            raise ConfigError(f"{prefix}.checks={list(self.checks)} lists a check twice")
        if QUALITY not in self.checks:
            raise ConfigError(f"{prefix}.checks must include '{QUALITY}': it scores a valid solution")
