"""Config section ``agent``: the research agent's prompt and multi-turn loop (paper, Appendix D/E)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from wmrl.agent.prompts import PROMPT_STYLES
from wmrl.config_checks import Section, choice, in_range

KEEP_RULES = ("best", "last")


@dataclass
class AgentConfig(Section):
    KEY: ClassVar[str] = "agent"
    # "full": the seven segments of Appendix E; "short": the same seven in a few lines (tiny models).
    prompt_style: str = field(default="full", metadata=choice(PROMPT_STYLES))
    # Appendix D: up to four interaction turns per trajectory
    max_turns: int = field(default=4, metadata=in_range(1))
    # Appendix D: observations truncated to 1024 tokens
    observation_tokens: int = field(default=1024, metadata=in_range(16))
    # The trajectory's score: "best" = its best valid submission over the turns (what the prompt promises),
    # "last" = its last turn's.
    keep: str = field(default="best", metadata=choice(KEEP_RULES))
    # Stop a trajectory before a turn whose prompt + new tokens would pass this; 0 = the tokenizer's
    # model_max_length.
    max_context_tokens: int = field(default=0, metadata=in_range(0))
