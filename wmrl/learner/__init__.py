"""The DeepSpeed GRPO + WMRL learner (docs/learner.md).

``grpo.py`` is the update, readable top to bottom; ``loss.py`` the loss as pure functions,
``head.py`` the chunked LM head over the loss positions; ``engine.py`` builds the DeepSpeed engine and the
reference policy, ``distributed.py`` the data-parallel group, ``batch.py`` the micro-batches,
``checkpoint.py`` exact resume, ``weights.py`` the weights as gathered buckets for the weight sync,
``follower.py`` ranks 1.. repeating rank 0's learner calls, ``channel.py`` how calls travel between
ranks, ``export.py`` the plain Hugging Face model
directory.
Import ``wmrl.learner.grpo`` for :class:`GRPOLearner` (it pulls in torch and DeepSpeed).
"""
