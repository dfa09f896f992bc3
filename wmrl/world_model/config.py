"""Config section ``world_model``: the frozen LLM that predicts execution outcomes (paper, Appendix D/E)."""

from __future__ import annotations

from dataclasses import dataclass, field

from wmrl.config_checks import ConfigError, check_choice, check_range
from wmrl.world_model.prompts import CHECK_NAMES, PROMPT_STYLES, QUALITY

BACKENDS = ("in_process", "http")


@dataclass
class WorldModelConfig:
    # in_process: a frozen copy of the policy's backbone in the coordinator (a Generator);
    # http: an OpenAI-compatible endpoint at `url` (a `vllm serve` job on a cluster, `transformers serve` locally).
    backend: str = "in_process"
    url: str = ""  # e.g. http://gpu-node-3:8000/v1
    model: str = ""  # the served model name the endpoint expects ("" = the model path)
    # Which of the eight checks run (paper order); the quality check must stay, it scores valid code.
    checks: list[str] = field(default_factory=lambda: list(CHECK_NAMES))
    prompt_style: str = "full"  # "short": the same segments in a few lines, for tiny models
    max_new_tokens: int = 1024  # Appendix D: the prediction budget
    # The context cap of Appendix D (12k tokens), applied to the overview in characters (~4 per token) so
    # that both backends cut the prompt identically without a tokenizer on the client side.
    max_overview_chars: int = 36000
    temperature: float = 0.0  # greedy: a frozen simulator should say the same thing twice
    # in_process on the transformers backend: the prefix the checks of a submission (and the submissions
    # of a task) share is prefilled once, and up to `batch_size` requests decode together
    # (wmrl/generation/shared_prefix.py; the same answers, half the CPU-seconds: results/bench_world_model.md).
    share_prefixes: bool = True
    batch_size: int = 128
    seed: int = 0
    # A failing check with confidence >= this makes the solution predicted-invalid.
    fail_threshold: float = 0.5
    # Predicted Position Score when the quality check's answer is unparseable (counted as a fallback).
    fallback_quality: float = 0.5
    precheck: bool = True  # the static pre-check (beyond the paper); off = the paper's exact setting
    # HTTP client: requests in flight at once, seconds per request, retries after a failed request.
    concurrency: int = 16
    timeout_s: float = 300.0
    retries: int = 3

    # SFT data of the tiny world model (wmrl/sft/data.py): references per task, each with its broken
    # variants, really executed once (cached) with this time budget; this fraction of references (by a
    # hash of their name) is left out of the world model's SFT and of the memory, not out of the policy's
    # (sft.references_per_task), which is why the evaluation picks others (benchmarks/eval_world_model.py).
    sft_variants_per_task: int = 4
    heldout_fraction: float = 0.25
    variant_timeout_s: float = 120.0
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
    memory_policy_samples: int = 0

    def validate(self, prefix: str = "world_model") -> None:
        check_choice(f"{prefix}.backend", self.backend, BACKENDS)
        check_choice(f"{prefix}.prompt_style", self.prompt_style, PROMPT_STYLES)
        if self.backend == "http" and not str(self.url).startswith(("http://", "https://")):
            raise ConfigError(
                f"{prefix}.url={self.url!r} is not allowed with {prefix}.backend=http; "
                "give the endpoint's base URL, e.g. http://HOST:8000/v1"
            )
        if not self.checks:
            raise ConfigError(f"{prefix}.checks is empty; choose from: {', '.join(CHECK_NAMES)}")
        for i, name in enumerate(self.checks):
            check_choice(f"{prefix}.checks[{i}]", name, CHECK_NAMES)
        if len(set(self.checks)) != len(self.checks):
            raise ConfigError(f"{prefix}.checks={list(self.checks)} lists a check twice")
        if QUALITY not in self.checks:
            raise ConfigError(f"{prefix}.checks must include '{QUALITY}': it scores a valid solution")
        check_range(f"{prefix}.max_new_tokens", self.max_new_tokens, 1)
        check_range(f"{prefix}.max_overview_chars", self.max_overview_chars, 100)
        check_range(f"{prefix}.temperature", self.temperature, 0.0)
        check_range(f"{prefix}.batch_size", self.batch_size, 1)
        check_range(f"{prefix}.memory_policy_samples", self.memory_policy_samples, 0)
        check_range(f"{prefix}.fail_threshold", self.fail_threshold, 0.0, 1.0, low_open=True)
        check_range(f"{prefix}.fallback_quality", self.fallback_quality, 0.0, 1.0)
        check_range(f"{prefix}.concurrency", self.concurrency, 1)
        check_range(f"{prefix}.timeout_s", self.timeout_s, 0.0, low_open=True)
        check_range(f"{prefix}.retries", self.retries, 0)
        check_range(f"{prefix}.sft_variants_per_task", self.sft_variants_per_task, 0)
        check_range(f"{prefix}.heldout_fraction", self.heldout_fraction, 0.0, 1.0)
        check_range(f"{prefix}.variant_timeout_s", self.variant_timeout_s, 1.0)
