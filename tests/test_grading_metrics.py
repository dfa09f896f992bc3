"""Metric values against hand-computed numbers, and name resolution."""

import math

import numpy as np
import pytest

from wmrl.grading.metrics import MAXIMIZE, MINIMIZE, get_metric


def col(*values):
    return np.array(values, dtype=object).reshape(-1, 1)


def test_accuracy_counts_matching_labels():
    assert get_metric("accuracy")(col("a", "b", "c", "a"), col("a", "b", "a", "b")) == 0.5


def test_macro_f1_averages_per_class_f1():
    # class a: tp=1 fp=1 fn=1 -> f1 0.5; class b: tp=1 fp=0 fn=0 -> 1.0; class c: tp=0 -> 0
    y_true, y_pred = col("a", "a", "b", "c"), col("a", "c", "b", "a")
    assert get_metric("macro_f1")(y_true, y_pred) == pytest.approx((0.5 + 1.0 + 0.0) / 3)


def test_roc_auc_is_fraction_of_correctly_ordered_pairs():
    # positives 0.8, 0.4; negatives 0.6, 0.1: ordered pairs (0.8>0.6, 0.8>0.1, 0.4>0.1) = 3 of 4
    assert get_metric("roc_auc")(np.array([[1], [1], [0], [0]]), np.array([[0.8], [0.4], [0.6], [0.1]])) == 0.75


def test_binary_log_loss_matches_formula():
    value = get_metric("log_loss")(np.array([[1], [0]]), np.array([[0.8], [0.4]]))
    assert value == pytest.approx(-(math.log(0.8) + math.log(0.6)) / 2)


def test_multiclass_log_loss_renormalises_rows():
    y_true = np.array([[1, 0, 0], [0, 0, 1]])
    y_pred = np.array([[2.0, 1.0, 1.0], [0.25, 0.25, 0.5]])  # first row sums to 4: renormalised -> 0.5
    # clipping first caps 2.0 at 1-1e-15, so the first row is ~[1, 1, 1]/... -> p = 1/3
    expected = -(math.log(1 / 3) + math.log(0.5)) / 2
    assert get_metric("log_loss")(y_true, y_pred) == pytest.approx(expected, rel=1e-6)


def test_rmse_and_mae():
    y, p = np.array([[1.0], [2.0], [4.0]]), np.array([[2.0], [2.0], [1.0]])
    assert get_metric("rmse")(y, p) == pytest.approx(math.sqrt((1 + 0 + 9) / 3))
    assert get_metric("mae")(y, p) == pytest.approx((1 + 0 + 3) / 3)


def test_rmsle_uses_log1p():
    assert get_metric("rmsle")(np.array([[0.0], [np.e - 1]]), np.array([[0.0], [0.0]])) == pytest.approx(math.sqrt(0.5))


def test_directions():
    assert get_metric("roc_auc").direction == MAXIMIZE
    assert get_metric("log_loss").direction == MINIMIZE
    assert get_metric("rmse").direction == MINIMIZE


@pytest.mark.parametrize("alias,name", [("auc-roc", "roc_auc"), ("multi-class-log-loss", "log_loss"),
                                        ("Accuracy", "accuracy"), ("macro-f1", "macro_f1"), ("RMSE", "rmse")])
def test_aliases_from_other_benchmarks_resolve(alias, name):
    assert get_metric(alias).name == name


def test_unknown_metric_error_lists_allowed_names():
    with pytest.raises(ValueError, match="unknown metric 'bleu'.*accuracy"):
        get_metric("bleu", where="task.json")
