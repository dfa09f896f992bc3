"""Metrics a task can be graded with, each with its direction.

Every metric takes ``(y_true, y_pred)`` as 2-D arrays ``[n_rows, n_target_columns]`` aligned by id
(see :mod:`wmrl.grading.validate`). Label metrics compare normalised label strings; score metrics
compare floats. ``ALIASES`` maps MLE-bench grader names; MLE-Dojo and MLE-bench competitions are
mapped by ``wmrl/tasks/registry/*.yaml`` (see docs/tasks.md). The three log losses differ only in
how they treat probability rows: ``log_loss`` renormalises them (Kaggle's rule; the built-in pool),
``log_loss_raw`` takes them as given (MLE-Dojo), ``log_loss_sklearn`` is scikit-learn's (MLE-bench,
which first refuses rows that do not sum to one).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from sklearn.metrics import cohen_kappa_score, f1_score, log_loss, roc_auc_score

MAXIMIZE = "max"
MINIMIZE = "min"
DIRECTIONS = (MAXIMIZE, MINIMIZE)
_EPS = 1e-15


@dataclass(frozen=True)
class Metric:
    name: str
    direction: str  # MAXIMIZE or MINIMIZE
    kind: str  # "label": predictions are class labels; "score": predictions are numbers
    fn: Callable[[np.ndarray, np.ndarray], float]

    def __call__(self, y_true: np.ndarray, y_pred: np.ndarray) -> float:
        return float(self.fn(np.asarray(y_true), np.asarray(y_pred)))

    def better(self, a: float, b: float) -> bool:
        """True where ``a`` is strictly better than ``b``."""
        return a > b if self.direction == MAXIMIZE else a < b


def _accuracy(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    return float(np.mean(np.all(y_true == y_pred, axis=1)))


def _macro_f1(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    scores = [f1_score(y_true[:, j], y_pred[:, j], average="macro") for j in range(y_true.shape[1])]
    return float(np.mean(scores))


def _roc_auc(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    # One column: binary target. Several: one-hot answers, mean one-vs-rest AUC.
    yt, yp = y_true.astype(float), y_pred.astype(float)
    return float(np.mean([roc_auc_score(yt[:, j], yp[:, j]) for j in range(yt.shape[1])]))


def _log_loss(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    yt, yp = y_true.astype(float), np.clip(y_pred.astype(float), _EPS, 1 - _EPS)
    if yt.shape[1] == 1:  # binary: the column holds P(class 1)
        return float(-np.mean(yt * np.log(yp) + (1 - yt) * np.log(1 - yp)))
    yp = yp / yp.sum(axis=1, keepdims=True)  # Kaggle's rule: rows are renormalised after clipping
    return float(-np.mean(np.sum(yt * np.log(yp), axis=1)))


def _log_loss_raw(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """MLE-Dojo's: clip to [1e-15, 1 - 1e-15] and take the rows as given (no renormalisation)."""
    yt, yp = y_true.astype(float), np.clip(y_pred.astype(float), _EPS, 1 - _EPS)
    if yt.shape[1] == 1:
        return float(-np.mean(yt * np.log(yp) + (1 - yt) * np.log(1 - yp)))
    return float(-np.mean(np.sum(yt * np.log(yp), axis=1)))


def _log_loss_sklearn(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """MLE-bench's: scikit-learn's ``log_loss`` (rows must already sum to one: see GradingRules)."""
    yt, yp = y_true.astype(float), y_pred.astype(float)
    if yt.shape[1] == 1:
        return float(log_loss(yt[:, 0], yp[:, 0], labels=[0.0, 1.0]))
    return float(log_loss(yt, yp))


def _qwk(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    # Labels are normalised strings; the weights need the ordinal values back.
    return float(cohen_kappa_score(y_true[:, 0].astype(float).astype(int), y_pred[:, 0].astype(float).astype(int),
                                   weights="quadratic"))


def _rmse(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    return float(np.sqrt(np.mean((y_true.astype(float) - y_pred.astype(float)) ** 2)))


def _mae(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    return float(np.mean(np.abs(y_true.astype(float) - y_pred.astype(float))))


def _rmsle(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    yt, yp = y_true.astype(float), y_pred.astype(float)
    if (yp < 0).any():  # scikit-learn and Kaggle refuse negative predictions; clipping would hide them
        raise ValueError("RMSLE is undefined for negative predictions")
    yt, yp = np.log1p(yt), np.log1p(yp)
    return float(np.sqrt(np.mean((yt - yp) ** 2)))


def _r2(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    yt, yp = y_true.astype(float), y_pred.astype(float)
    ss_res = np.sum((yt - yp) ** 2)
    ss_tot = np.sum((yt - yt.mean(axis=0)) ** 2)
    return float(1 - ss_res / ss_tot) if ss_tot > 0 else 0.0


METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric("accuracy", MAXIMIZE, "label", _accuracy),
        Metric("macro_f1", MAXIMIZE, "label", _macro_f1),
        Metric("roc_auc", MAXIMIZE, "score", _roc_auc),
        Metric("log_loss", MINIMIZE, "score", _log_loss),
        Metric("log_loss_raw", MINIMIZE, "score", _log_loss_raw),
        Metric("log_loss_sklearn", MINIMIZE, "score", _log_loss_sklearn),
        Metric("qwk", MAXIMIZE, "label", _qwk),
        Metric("rmse", MINIMIZE, "score", _rmse),
        Metric("mae", MINIMIZE, "score", _mae),
        Metric("rmsle", MINIMIZE, "score", _rmsle),
        Metric("r2", MAXIMIZE, "score", _r2),
    )
}

# Spellings found in MLE-bench grader names and MLE-Dojo descriptions.
ALIASES: dict[str, str] = {
    "acc": "accuracy",
    "classification-accuracy": "accuracy",
    "f1-macro": "macro_f1",
    "macro-f1": "macro_f1",
    "f1": "macro_f1",
    "auc": "roc_auc",
    "auc-roc": "roc_auc",
    "roc-auc": "roc_auc",
    "auroc": "roc_auc",
    "logloss": "log_loss",
    "log-loss": "log_loss",
    "multi-class-log-loss": "log_loss",
    "multiclass-log-loss": "log_loss",
    "binary-log-loss": "log_loss",
    "root-mean-squared-error": "rmse",
    "mean-absolute-error": "mae",
    "root-mean-squared-log-error": "rmsle",
    "r-squared": "r2",
    "quadratic-weighted-kappa": "qwk",
}


def canonical_name(name: str) -> str | None:
    key = str(name).strip().lower()
    if key in METRICS:
        return key
    dashed = key.replace("_", "-").replace(" ", "-")
    if dashed.replace("-", "_") in METRICS:
        return dashed.replace("-", "_")
    return ALIASES.get(dashed)


def get_metric(name: str, where: str = "metric") -> Metric:
    """The metric called ``name`` (or one of its aliases); ``ValueError`` naming ``where`` otherwise."""
    canonical = canonical_name(name)
    if canonical is None:
        allowed = ", ".join(sorted(METRICS)) + " (aliases: " + ", ".join(sorted(ALIASES)) + ")"
        raise ValueError(f"{where}: unknown metric {name!r}; allowed: {allowed}")
    return METRICS[canonical]
