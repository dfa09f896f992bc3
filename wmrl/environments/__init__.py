"""Environments of the WMRL step (:class:`wmrl.rollout.Environment`): the executed one lives here (real
sandboxed executions through the run's workers); the LLM world model is ``wmrl.world_model.env``."""
