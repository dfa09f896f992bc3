"""The research agent: its prompts (Appendix E), reply parsing and the multi-turn token-in/token-out loop."""
