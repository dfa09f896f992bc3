"""The benchmarks' own grading, run from clones of their repositories, as the reference that
``pools_exactness.py`` compares wmrl against. Only this check script imports their code; wmrl's
grader never does.

* MLE-Dojo (github.com/MLE-Dojo/MLE-Dojo): the competition's ``utils/metric.py`` class
  (``validate_submission`` then ``evaluate(ground_truth, submission)`` on the CSVs read with pandas,
  as ``mledojo/gym/interface.py::_process_submission`` does), and the position score of
  ``_calculate_leaderboard_position`` (second column of each board, sorted, first entry tied or
  beaten, ``(total - position + 1) / total``, mean over the boards that exist), transcribed below.
* MLE-bench (github.com/openai/mle-bench): ``mlebench.grade_helpers.Grader`` (score rounded to 5
  decimals, invalid -> None) and ``Grader.rank_score`` (medals, above median) on the board.
  ``mlebench.utils`` is replaced by a two-function stand-in because it imports packages (py7zr,
  kaggle) that grading does not use.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import logging
import sys
import types
from pathlib import Path
from typing import Any

import pandas as pd


def parse_repos(description: str) -> argparse.Namespace:
    """``--mledojo-repo``, ``--mlebench-repo`` (clones) and ``--out``: the arguments of both pools scripts."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--mledojo-repo", type=Path, required=True, help="clone of github.com/MLE-Dojo/MLE-Dojo")
    parser.add_argument("--mlebench-repo", type=Path, required=True, help="clone of github.com/openai/mle-bench")
    parser.add_argument("--out", type=Path, default=Path("results/pools"))
    return parser.parse_args()


def _load_file(name: str, path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


class MLEDojo:
    def __init__(self, repo: Path) -> None:
        self.competitions = Path(repo) / "mledojo" / "competitions"
        for name in ("mledojo", "mledojo.metrics"):
            sys.modules.setdefault(name, types.ModuleType(name))
        _load_file("mledojo.metrics.base", Path(repo) / "mledojo" / "metrics" / "base.py")

    def metric(self, comp: str) -> Any:
        module = _load_file(f"_mledojo_metric_{comp.replace('-', '_')}", self.competitions / comp / "utils" / "metric.py")
        base = sys.modules["mledojo.metrics.base"].CompetitionMetrics
        classes = [v for v in vars(module).values() if isinstance(v, type) and issubclass(v, base) and v is not base]
        return classes[0]()

    def raw_score(self, comp: str, submission: Path, answers: Path) -> float | None:
        """``None`` where MLE-Dojo reports an invalid submission or an evaluation error."""
        metric = self.metric(comp)
        sub, truth = pd.read_csv(submission), pd.read_csv(answers)
        try:
            metric.validate_submission(sub, truth)
            return float(metric.evaluate(truth, sub))
        except Exception:  # noqa: BLE001 - MLE-Dojo turns every failure here into an error response
            return None

    @staticmethod
    def position_score(score: float, boards: list[Path], higher_is_better: bool) -> dict[str, float]:
        """MLE-Dojo's ``_calculate_leaderboard_position``, transcribed."""
        out: dict[str, float] = {}
        total_score = 0.0
        for path in boards:
            scores = pd.read_csv(path).iloc[:, 1].values
            total = len(scores)
            ranked = sorted(scores, reverse=higher_is_better)
            position = next((i + 1 for i, s in enumerate(ranked) if (score >= s if higher_is_better else score <= s)),
                            total + 1)
            out[path.stem] = (total - position + 1) / total
            total_score += out[path.stem]
        out["avg_score"] = total_score / len(boards)
        return out


class MLEBench:
    def __init__(self, repo: Path) -> None:
        sys.path.insert(0, str(repo))
        utils = types.ModuleType("mlebench.utils")

        def import_fn(spec: str) -> Any:
            module, fn = spec.split(":")
            return getattr(importlib.import_module(module), fn)

        utils.get_logger = logging.getLogger  # type: ignore[attr-defined]
        utils.import_fn = import_fn  # type: ignore[attr-defined]
        importlib.import_module("mlebench")
        sys.modules["mlebench.utils"] = utils
        self.grade_helpers = importlib.import_module("mlebench.grade_helpers")

    def _grader(self, comp: str) -> Any:
        logging.getLogger("mlebench.grade_helpers").setLevel(logging.CRITICAL)
        return self.grade_helpers.Grader("reference", f"mlebench.competitions.{comp}.grade:grade")

    def score(self, comp: str, submission: pd.DataFrame, answers: pd.DataFrame) -> float | None:
        return self._grader(comp)(submission, answers)

    def grade(self, comp: str, submission: Path, answers: Path, leaderboard: Path) -> dict[str, Any]:
        grader = self._grader(comp)
        score = grader(pd.read_csv(submission), pd.read_csv(answers))
        return {"score": score, **grader.rank_score(score, pd.read_csv(leaderboard))}
