"""Procedural task families: instances drawn from seeds, each a full task of the built-in pool's format
(description, public data, hidden answers, metric, leaderboard of executed references), so that what a
policy learns on the training instances carries to held-out ones (docs/tasks.md, "Task families").

- :mod:`wmrl.tasks.families.surface`: what every instance varies (file and column names, metric, format);
- :mod:`wmrl.tasks.families.tabular`, :mod:`~wmrl.tasks.families.text`, :mod:`~wmrl.tasks.families.images`:
  the generators, each with its regimes (which modelling choices pay) and its references;
- :mod:`wmrl.tasks.families.pool`: the instances of a config, their seeds and split, the cached build.
"""
