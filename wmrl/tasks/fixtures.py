"""Competition directories in MLE-Dojo's and MLE-bench's on-disk layouts, for interop tests and
``benchmarks/pools_exactness.py``: their real leaderboards (``tests/fixtures/``, or a clone of their
repository) next to small synthetic data, laid out as their own prepare steps write them."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from wmrl.tasks.registry import registry
from wmrl.tasks.testing import write_metric_stub

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures"  # present in a source checkout


@dataclass(frozen=True)
class Competition:
    comp: str
    id_column: str
    targets: tuple[str, ...]
    kind: str  # "onehot": class probabilities; "binary": 0/1 label scored by a probability; "regression"
    class_name: str  # MLE-Dojo's metric class (utils/metric.py)
    higher_is_better: bool


MLEDOJO = {
    c.comp: c for c in (
        Competition("spooky-author-identification", "id", ("EAP", "HPL", "MWS"), "onehot",
                    "SpookyAuthorIdentificationMetrics", False),
        Competition("petfinder-pawpularity-score", "Id", ("Pawpularity",), "regression",
                    "PetfinderPawpularityScoreMetrics", False),
        Competition("random-acts-of-pizza", "request_id", ("requester_received_pizza",), "binary",
                    "RandomActsOfPizzaMetrics", True),
    )
}
MLEBENCH = {"spooky-author-identification": MLEDOJO["spooky-author-identification"]}


def synthetic_answers(spec: Competition, rows: int = 64, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    ids = [f"{spec.comp[:3]}{i:05d}" for i in range(rows)]
    frame = pd.DataFrame({spec.id_column: ids})
    if spec.kind == "onehot":
        labels = np.arange(rows) % len(spec.targets)  # every class present
        rng.shuffle(labels)
        for j, column in enumerate(spec.targets):
            frame[column] = (labels == j).astype(int)
    elif spec.kind == "binary":
        labels = np.arange(rows) % 2
        rng.shuffle(labels)
        frame[spec.targets[0]] = labels
    else:
        frame[spec.targets[0]] = rng.integers(1, 101, size=rows)
    return frame


def _public(public: Path, spec: Competition, answers: pd.DataFrame, description_name: str) -> None:
    public.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(1)
    train = answers.copy()
    train[spec.id_column] = [f"train{i:05d}" for i in range(len(train))]
    train["feature"] = rng.normal(size=len(train))
    train.to_csv(public / "train.csv", index=False)
    answers[[spec.id_column]].assign(feature=rng.normal(size=len(answers))).to_csv(public / "test.csv", index=False)
    sample = answers.copy()
    for column in spec.targets:
        sample[column] = 1.0 / len(spec.targets) if spec.kind == "onehot" else 0.5
    sample.to_csv(public / "sample_submission.csv", index=False)
    (public / description_name).write_text(f"# {spec.comp}\n\nSynthetic stand-in data for interop tests.\n")


def _lay_out(task: Path, spec: Competition, rows: int, data: str, description: str, answers: str) -> Path:
    """Public side with synthetic data, and the answers on the private side; returns the private dir."""
    truth = synthetic_answers(spec, rows)
    _public(task / data / "public", spec, truth, description)
    private = task / data / "private"
    private.mkdir(parents=True, exist_ok=True)
    truth.to_csv(private / answers, index=False)
    return private


def make_mledojo_competition(root: Path, comp: str, boards_from: Path = FIXTURES / "mledojo", rows: int = 64,
                             metric_stub: bool = True) -> Path:
    """``root/<comp>`` as MLE-Dojo's ``prepare/mle.py`` writes it: ``data/public``, ``data/private`` with
    ``test_answer.csv`` and both boards (copied from ``boards_from/<comp>/info/``). ``metric_stub``
    adds ``utils/metric.py`` (a stand-in with the real class name and defaults); without it, point
    ``competitions_dir`` at MLE-Dojo's ``mledojo/competitions``."""
    spec = MLEDOJO[comp]
    task = Path(root) / comp
    private = _lay_out(task, spec, rows, "data", "description.txt", "test_answer.csv")
    for board in ("private_leaderboard.csv", "public_leaderboard.csv"):
        shutil.copyfile(Path(boards_from) / comp / "info" / board, private / board)
    if metric_stub:
        write_metric_stub(task / "utils" / "metric.py", spec.class_name, ",".join(spec.targets), spec.higher_is_better)
        # The stand-in's evaluate() is not the one wmrl's registry reviewed: confirm the metric, as
        # a user does for a competition whose metric.py differs.
        (task / "wmrl_task.yaml").write_text(f"metric: {registry('mledojo')[comp]['metric']}\n")
    return task


def make_mlebench_competition(data_root: Path, comp: str, rows: int = 64) -> Path:
    """``data_root/<comp>/prepared/{public,private}`` as MLE-bench's prepare step writes them; its
    ``config.yaml`` and ``leaderboard.csv`` stay in the competitions folder (``FIXTURES / "mlebench"``)."""
    task = Path(data_root) / comp
    _lay_out(task, MLEBENCH[comp], rows, "prepared", "description.md", "test.csv")
    return task
