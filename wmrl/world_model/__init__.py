"""The frozen LLM world model (Appendix E): eight single-aspect checks, strict-JSON verdicts, r_hat."""
