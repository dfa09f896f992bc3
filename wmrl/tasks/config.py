"""Config section ``tasks``: which task pool a run trains on."""

from __future__ import annotations

from dataclasses import dataclass

from wmrl.config_checks import check_choice, check_range

SPLITS = ("train", "heldout", "all")


@dataclass
class TasksConfig:
    # Root of the task pool; "" means $WMRL_TASKS_DIR, else the built-in pool at
    # ~/.cache/wmrl/tasks/builtin-v2 (built on first use, or by `wmrl tasks build`).
    root: str = ""
    # Which tasks a run samples from: the training pool, the held-out pool, or both.
    split: str = "train"
    # MLE-bench keeps config.yaml/leaderboard.csv in its repository (mlebench/competitions/), MLE-Dojo
    # its utils/metric.py and info/ (mledojo/competitions/); point here when they are not inside each
    # competition directory.
    competitions_dir: str = ""
    # MLE-Dojo's reward is the mean of the private and public position scores ("mean");
    # "private" uses the private board only.
    mledojo_boards: str = "mean"
    # Submissions larger than this are invalid without being read (adversarial output).
    max_submission_mb: float = 64.0

    def validate(self, prefix: str = "tasks") -> None:
        check_choice(f"{prefix}.split", self.split, SPLITS)
        check_choice(f"{prefix}.mledojo_boards", self.mledojo_boards, ("mean", "private"))
        check_range(f"{prefix}.max_submission_mb", self.max_submission_mb, 0.0, low_open=True)
