"""The LLM trainer (``trainer: llm``, ``wmrl train``): a research agent post-trained with WMRL.

One step is :func:`wmrl.step.wmrl_step` with these parts:

- policy: :class:`~wmrl.agent.policy.AgentPolicy`, the multi-turn agent over a :class:`Generator`
  (transformers on CPU, vLLM on a cluster) that samples replies, parses their code block and feeds
  each turn's submission to its group's environment;
- executed environment (anchor groups): :class:`~wmrl.execution.executed.ExecutedEnvironment`, the
  run's workers (local processes or a Slurm array) running the sandbox and the grader;
- world-model environment: :class:`~wmrl.world_model.env.WorldModelEnvironment`, the frozen initial
  policy prompted with the eight checks of Appendix E (in this process, or a served endpoint);
- learner: :class:`~wmrl.learner.grpo.GRPOLearner`, the DeepSpeed GRPO update with the Eq. 5 weights.

Around the step, this package does what only a real run needs: weight sync from the learner to the
generator after each update, rollout records (``rollouts/step-N.jsonl.gz``), evaluation with the paper's
metric before, during and after training (real execution, avg@k), learner checkpoints every
``train.save_every`` steps, and the coordinator protocol (state, progress, plots).

The package: :mod:`~wmrl.trainers.llm.assembly` builds the run's parts from its config (the pinned
initial policy, the task pool, learner and generator placed on this rank, the agent, the executed and the
world-model environments, the executed-solution memory); :mod:`~wmrl.trainers.llm.trainer` is the step
loop around them (evaluation, weight sync, records, learner checkpoints, the coordinator protocol);
:mod:`~wmrl.trainers.llm.names` the files and metric names a run writes.

Resume: the coordinator snapshots :meth:`state_dict` after every step, but model and optimizer live in
learner checkpoints; so :meth:`state_dict` is the state *as of the last learner checkpoint*, and a
requeued run resumes there (calibration restored to the same step) and replays the steps after it.
"""
