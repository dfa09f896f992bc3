"""What a task family hands to the pool builder: data frames, extra public files, reference variants."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class ReferenceSpec:
    """One reference solution: a model from ``refcode.MODELS`` plus how it sees the data."""

    name: str
    model: str  # key of refcode.MODELS (formatted with ``params``)
    params: dict = field(default_factory=dict)
    fraction: float = 1.0  # fraction of the training rows used
    features: str = "all"  # family-specific feature choice (column subset, pooling, vocabulary)
    weak: bool = False  # deliberately weak
    shuffle_labels: bool = False  # fit on permuted training labels (a deliberately useless model)


@dataclass
class TaskData:
    task_id: str
    name: str
    category: str  # tabular / image / text
    split: str  # train / heldout
    metric: str
    summary: str  # first paragraph of the description
    source: str  # where the data comes from (provenance, shown in `wmrl tasks show`)
    output: str  # "label", "prob_binary", "prob_multi" or "value"
    train: pd.DataFrame
    test: pd.DataFrame  # inputs only
    answers: pd.DataFrame  # id + submission columns (one-hot for prob_multi)
    sample_submission: pd.DataFrame
    loader: str  # code that defines X_train, y_train, X_test, test_ids (refcode placeholders allowed)
    variants: list[ReferenceSpec]
    # ReferenceSpec.features -> Python expression substituted for __FEATURES__ in ``loader``.
    feature_choices: dict[str, str] = field(default_factory=dict)
    target: str = "label"
    files: dict[str, bytes] = field(default_factory=dict)  # extra public files (images, zips)
    data_notes: list[str] = field(default_factory=list)  # bullet points for the description
    # Public file names and the id column (the task families vary them; the built-in tasks keep these).
    train_file: str = "train.csv"
    test_file: str = "test.csv"
    id_column: str = "id"
    # "literal": the code names files and columns as the prompt does, the model's import at the top.
    # "discovered" (task families' schema "discovered"): the loader reads the names from the data and
    # calls the id and target columns ID and TARGET; the model's import sits just above the model.
    reference_style: str = "literal"


def shuffle_split(n: int, test_frac: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    order = np.random.default_rng(seed).permutation(n)
    n_test = round(n * test_frac)
    return np.sort(order[n_test:]), np.sort(order[:n_test])


def classification_frames(
    features: pd.DataFrame, labels: np.ndarray, target: str, output: str, seed: int, test_frac: float = 0.3,
    id_prefix: str = "",
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """``(train, test, answers, sample_submission)`` with an ``id`` column first.

    Ids are a shuffled range so that row order leaks nothing about the split or the label.
    """
    n = len(features)
    ids = np.random.default_rng(seed + 1).permutation(n)
    id_values = [f"{id_prefix}{i:05d}" for i in ids] if id_prefix else ids
    frame = features.copy()
    frame.insert(0, "id", id_values)
    train_idx, test_idx = shuffle_split(n, test_frac, seed)
    train = frame.iloc[train_idx].copy()
    train[target] = labels[train_idx]
    test = frame.iloc[test_idx].reset_index(drop=True)
    y_test = labels[test_idx]
    answers, sample = submission_frames(test["id"], y_test, target, output, labels)
    return train.reset_index(drop=True), test, answers, sample


def submission_frames(
    ids: pd.Series, y_test: np.ndarray, target: str, output: str, all_labels: np.ndarray
) -> tuple[pd.DataFrame, pd.DataFrame]:
    ids = ids.reset_index(drop=True)
    if output == "prob_multi":
        classes = sorted(pd.unique(all_labels).tolist())
        answers = pd.DataFrame({"id": ids})
        sample = pd.DataFrame({"id": ids})
        for c in classes:
            answers[f"{target}_{c}"] = (y_test == c).astype(int)
            sample[f"{target}_{c}"] = round(1.0 / len(classes), 6)
        return answers, sample
    answers = pd.DataFrame({"id": ids, target: y_test})
    if output == "label":
        fill = pd.Series(all_labels).mode().iloc[0]
    elif output == "prob_binary":
        fill = 0.5
    else:
        fill = float(np.round(np.mean(all_labels), 4))
    sample = pd.DataFrame({"id": ids, target: [fill] * len(ids)})
    return answers, sample
