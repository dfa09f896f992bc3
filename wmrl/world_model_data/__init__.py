"""What the world model is trained and evaluated on, beside the environment the step calls
(:mod:`wmrl.world_model`): reference solutions and their broken variants with their really executed
outcomes (``variants``), the strict JSON each check should answer for an outcome (``targets``), the
SFT's and the executed-solution memory's examples (``examples``) and what an evaluation must not have
seen (``contamination``). It may import the environment's records and prompts; the environment never
imports it.
"""
