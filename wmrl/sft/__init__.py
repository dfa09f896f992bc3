"""Supervised warm start (``wmrl sft``): the engine that trains a causal LM on prompt/target token pairs.

``wmrl.sft.example.SFTExample`` is what the example builders hand in (agent replies, world-model JSON
verdicts); the engine (``wmrl.sft.engine``) knows tokens only, never prompts or formats. Nothing is
imported here, so that loading the ``sft`` config section does not import torch.
"""
