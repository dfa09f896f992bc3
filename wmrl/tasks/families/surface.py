"""What every task family draws per instance: the surface a solution must read from the prompt.

File names, the id column and its values, the metric with its submission format, and a sentence
about the generating process (which modelling choice pays) vary from instance to instance; the
frames are split and laid out by the built-in pool's own helpers (``wmrl.tasks.builtin.spec``).

How the references get those names is the pool's ``tasks.families.schema``: ``literal`` writes the
names the prompt states into the code (a policy must copy each one from its prompt), ``discovered``
reads them from the data (the id column is ``sample_submission.csv``'s first, the training file is the
CSV with the column the test file lacks, which is the target). The task, its data and its description
are the same either way; only the references' text (and so what SFT teaches) differs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import pandas as pd

from wmrl.tasks.builtin.spec import ReferenceSpec, TaskData, classification_frames

T = TypeVar("T")

TRAIN_FILES = ("train.csv", "training_set.csv", "train_data.csv", "labeled_train.csv")
TEST_FILES = ("test.csv", "test_features.csv", "test_data.csv", "unlabeled_test.csv")
ID_COLUMNS = ("id", "row_id", "Id", "sample_id", "record_id", "uid", "key")
ID_PREFIXES = ("", "", "r", "ID-", "x_")  # "" = integer ids
# Problem kind -> (metric, submission format) pairs an instance draws from.
METRICS: dict[str, tuple[tuple[str, str], ...]] = {
    "binary": (("accuracy", "label"), ("macro_f1", "label"), ("roc_auc", "prob_binary"), ("log_loss", "prob_binary")),
    "multiclass": (("accuracy", "label"), ("macro_f1", "label"), ("log_loss", "prob_multi")),
    "regression": (("rmse", "value"), ("mae", "value"), ("r2", "value")),
}
MIN_REFERENCES = 12  # a family instance's leaderboard: fewer, faster references than the built-in tasks


def pick(rng: np.random.Generator, options: Sequence[T]) -> T:
    return options[int(rng.integers(len(options)))]


@dataclass(frozen=True)
class Surface:
    train_file: str
    test_file: str
    id_column: str
    id_prefix: str
    metric: str
    output: str  # "label", "prob_binary", "prob_multi" or "value" (wmrl.tasks.builtin.refcode.OUTPUTS)
    discovered: bool = False  # the references read the names from the data (schema "discovered"), not drawn


def draw_surface(rng: np.random.Generator, problem: str, schema: str = "literal") -> Surface:
    metric, output = pick(rng, METRICS[problem])
    return Surface(pick(rng, TRAIN_FILES), pick(rng, TEST_FILES), pick(rng, ID_COLUMNS), pick(rng, ID_PREFIXES),
                   metric, output, discovered=schema == "discovered")


def problem_of(n_classes: int) -> str:
    return "binary" if n_classes == 2 else "multiclass"


def label_values(rng: np.random.Generator, classes: Sequence[str], output: str) -> list:
    """The target's values: 0/1 where a probability of 1 is asked, else the class names or integer codes."""
    if output == "prob_binary":
        return [0, 1]
    if len(classes) == 2 and rng.random() < 0.6:
        return [0, 1]
    return list(range(len(classes))) if rng.random() < 0.3 else list(classes)


def values_note(target: str, values: Sequence, y: np.ndarray, output: str) -> str:
    """The target's values and the class balance of the training data, as the description states them."""
    shares = pd.Series(y).value_counts(normalize=True)
    listed = ", ".join(f"`{v}` ({shares.get(v, 0.0):.0%})" for v in values)
    note = f"`{target}` takes the values {listed} (share of the rows in parentheses)."
    if output == "prob_binary":
        note += f" Predict the probability that `{target}` is 1."
    return note


def task_data(task_id: str, name: str, split: str, category: str, surface: Surface, summary: str, source: str,
              features: pd.DataFrame, y: np.ndarray, target: str, seed: int, loader: str,
              feature_choices: dict[str, str], variants: list[ReferenceSpec], data_notes: list[str],
              files: dict[str, bytes] | None = None) -> TaskData:
    """A task in the built-in pool's format, laid out with this instance's file names and id column."""
    train, test, answers, sample = classification_frames(features, np.asarray(y), target, surface.output, seed,
                                                         id_prefix=surface.id_prefix)
    frames = [f.rename(columns={"id": surface.id_column}) for f in (train, test, answers, sample)]
    return TaskData(
        task_id=task_id, name=name, category=category, split=split, metric=surface.metric, summary=summary,
        source=source, output=surface.output, train=frames[0], test=frames[1], answers=frames[2],
        sample_submission=frames[3], loader=loader, variants=variants, feature_choices=feature_choices,
        target=target, files=files or {}, data_notes=data_notes, train_file=surface.train_file,
        test_file=surface.test_file, id_column=surface.id_column,
        reference_style="discovered" if surface.discovered else "literal",
    )


# Schema "discovered": every name a valid submission needs, read from the files in DATA_DIR.
_DISCOVER_READ = '''sample = pd.read_csv(os.path.join(DATA_DIR, "sample_submission.csv"))
tables = [pd.read_csv(os.path.join(DATA_DIR, name)) for name in sorted(os.listdir(DATA_DIR))
          if name.endswith(".csv") and name != "sample_submission.csv"]
train, test = sorted(tables, key=lambda table: len(table.columns), reverse=True)  # train also holds the target
ID = sample.columns[0]
TARGET = [column for column in train.columns if column not in test.columns][0]
'''


def read_block(surface: Surface) -> str:
    """The loader's first lines: read both files (and, discovered, name the id and target columns)."""
    if surface.discovered:
        return _DISCOVER_READ
    return (f'train = pd.read_csv(os.path.join(DATA_DIR, "{surface.train_file}"))\n'
            f'test = pd.read_csv(os.path.join(DATA_DIR, "{surface.test_file}"))\n')


def tail_block(surface: Surface, target: str) -> str:
    """The loader's last lines: labels and test ids."""
    if surface.discovered:
        return "y_train = train[TARGET].to_numpy()\ntest_ids = test[ID]\n"
    return f'y_train = train["{target}"].to_numpy()\ntest_ids = test["{surface.id_column}"]\n'
