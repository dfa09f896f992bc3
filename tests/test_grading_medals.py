"""MLE-bench's medal thresholds (Kaggle's progression table) and the above-median flag."""

import pytest

from wmrl.grading.leaderboard import Leaderboard
from wmrl.grading.medals import medal_for, thresholds


def board(n, direction="max"):
    scores = [1.0 - i / n for i in range(n)] if direction == "max" else [i / n for i in range(n)]
    return Leaderboard.from_scores(scores, direction)


@pytest.mark.parametrize("n,positions", [(50, (5, 10, 20)), (200, (10, 40, 80)), (500, (11, 50, 100)),
                                         (2000, (14, 100, 200))])
def test_thresholds_are_the_scores_at_kaggles_positions(n, positions):
    limits = thresholds(board(n))
    assert [limits[m] for m in ("gold", "silver", "bronze")] == [board(n).file_scores[p - 1] for p in positions]


def test_tying_a_threshold_earns_the_medal():
    b = board(50)
    assert medal_for(b.file_scores[4], b).medal == "gold"
    assert medal_for(b.file_scores[5], b).medal == "silver"


def test_lower_is_better_boards_compare_the_other_way():
    b = board(50, "min")
    assert medal_for(b.file_scores[9], b).medal == "silver"
    assert medal_for(b.file_scores[30], b).medal == ""


def test_above_median_is_strict():
    b = Leaderboard.from_scores([4.0, 3.0, 2.0, 1.0], "max")  # median 2.5
    assert medal_for(2.5, b).above_median is False and medal_for(2.6, b).above_median is True
