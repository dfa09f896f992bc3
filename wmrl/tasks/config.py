"""Config section ``tasks``: which task pool a run trains on."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from wmrl.config_checks import Section, choice, in_range

SPLITS = ("train", "heldout", "all")
MLEDOJO_BOARDS = ("mean", "private")
POOLS = ("builtin", "families")
FAMILY_SCHEMAS = ("literal", "discovered")
MAX_INSTANCES = 100_000  # per split; the instances' seeds stay disjoint below it (wmrl/tasks/families/pool.py)


@dataclass
class FamiliesConfig(Section):
    """The task-family pool (``tasks.pool: families``): instances generated from seeds, each a full task."""

    KEY: ClassVar[str] = "tasks.families"
    # Instances per split, spread evenly over the five families (tabular binary and multiclass,
    # regression, text, image). Held-out instances come from seeds disjoint from the training ones.
    train: int = field(default=120, metadata=in_range(1, MAX_INSTANCES))
    heldout: int = field(default=30, metadata=in_range(1, MAX_INSTANCES))
    # The seed every instance's seed derives from: another value, another pool.
    seed: int = field(default=0, metadata=in_range(0, 1000))
    # How the references name the files and columns: "literal" writes the names the prompt states (a
    # policy must copy each one from its prompt), "discovered" reads them from the data files (the id
    # column from sample_submission.csv, the training file as the CSV holding the target). Same tasks,
    # data and descriptions; only the reference code (what SFT teaches) differs. docs/tasks.md.
    schema: str = field(default="literal", metadata=choice(FAMILY_SCHEMAS))


@dataclass
class TasksConfig(Section):
    KEY: ClassVar[str] = "tasks"
    # Root of the task pool; "" means $WMRL_TASKS_DIR, else the built-in pool at
    # ~/.cache/wmrl/tasks/builtin-v2 (built on first use, or by `wmrl tasks build`).
    root: str = ""
    # The pool built and used when root is "": the 15 built-in tasks ("builtin"), or the procedurally
    # generated task families ("families", sized by tasks.families) at
    # $WMRL_CACHE/tasks/families-v1-<hash> (else ~/.cache/wmrl/tasks/...), built on first use.
    pool: str = field(default="builtin", metadata=choice(POOLS))
    families: FamiliesConfig = field(default_factory=FamiliesConfig)
    # Which tasks a run samples from: the training pool, the held-out pool, or both.
    split: str = field(default="train", metadata=choice(SPLITS))
    # MLE-bench keeps config.yaml/leaderboard.csv in its repository (mlebench/competitions/), MLE-Dojo
    # its utils/metric.py and info/ (mledojo/competitions/); point here when they are not inside each
    # competition directory.
    competitions_dir: str = ""
    # MLE-Dojo's reward is the mean of the private and public position scores ("mean");
    # "private" uses the private board only.
    mledojo_boards: str = field(default="mean", metadata=choice(MLEDOJO_BOARDS))
    # Submissions larger than this are invalid without being read (adversarial output).
    max_submission_mb: float = field(default=64.0, metadata=in_range(0.0, low_open=True))
