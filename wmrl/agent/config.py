"""Config section ``agent``: the research agent's prompt and multi-turn loop (paper, Appendix D/E)."""

from __future__ import annotations

from dataclasses import dataclass

from wmrl.agent.prompts import PROMPT_STYLES
from wmrl.config_checks import check_choice, check_range

KEEP_RULES = ("best", "last")


@dataclass
class AgentConfig:
    # "full": the seven segments of Appendix E; "short": the same seven in a few lines (tiny models).
    prompt_style: str = "full"
    max_turns: int = 4  # Appendix D: up to four interaction turns per trajectory
    observation_tokens: int = 1024  # Appendix D: observations truncated to 1024 tokens
    # The trajectory's score: "best" = its best valid submission over the turns (what the prompt promises),
    # "last" = its last turn's.
    keep: str = "best"
    # Stop a trajectory before a turn whose prompt + new tokens would pass this; 0 = the tokenizer's
    # model_max_length.
    max_context_tokens: int = 0

    def validate(self, prefix: str = "agent") -> None:
        check_choice(f"{prefix}.prompt_style", self.prompt_style, PROMPT_STYLES)
        check_range(f"{prefix}.max_turns", self.max_turns, 1)
        check_range(f"{prefix}.observation_tokens", self.observation_tokens, 16)
        check_choice(f"{prefix}.keep", self.keep, KEEP_RULES)
        check_range(f"{prefix}.max_context_tokens", self.max_context_tokens, 0)
