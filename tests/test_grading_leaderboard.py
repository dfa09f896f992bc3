"""Position score (N - position + 1) / N with MLE-Dojo's tie rule and the metric's direction."""

import pandas as pd
import pytest

from wmrl.grading.leaderboard import Leaderboard, LeaderboardError, read_leaderboard

HIGH = Leaderboard.from_scores([0.9, 0.8, 0.8, 0.5], "max")  # N = 4
LOW = Leaderboard.from_scores([0.1, 0.2, 0.2, 0.5], "min")


def test_beating_the_winner_scores_one():
    assert HIGH.position(0.95) == 1 and HIGH.position_score(0.95) == 1.0


def test_tying_an_entry_takes_its_position():
    assert HIGH.position(0.8) == 2
    assert HIGH.position_score(0.8) == pytest.approx(3 / 4)


def test_between_entries_takes_first_entry_beaten():
    assert HIGH.position(0.6) == 4
    assert HIGH.position_score(0.6) == pytest.approx(1 / 4)


def test_losing_to_everyone_scores_zero():
    assert HIGH.position(0.1) == 5 and HIGH.position_score(0.1) == 0.0


def test_lower_is_better_direction_is_respected():
    assert LOW.position(0.05) == 1
    assert LOW.position(0.2) == 2
    assert LOW.position_score(0.3) == pytest.approx(1 / 4)
    assert LOW.position_score(0.9) == 0.0


def test_nan_score_gets_zero():
    assert HIGH.position_score(float("nan")) == 0.0


def test_entries_are_sorted_regardless_of_file_order(tmp_path):
    path = tmp_path / "lb.csv"
    pd.DataFrame({"score": [0.5, 0.9, None, 0.7]}).to_csv(path, index=False)
    board = read_leaderboard(path, "max")
    assert board.scores == (0.9, 0.7, 0.5)  # missing score (disqualified team) dropped


def test_leaderboard_without_score_column_is_an_error_naming_the_file(tmp_path):
    path = tmp_path / "lb.csv"
    pd.DataFrame({"points": [1, 2]}).to_csv(path, index=False)
    with pytest.raises(LeaderboardError, match=r"lb\.csv: no 'score' column"):
        read_leaderboard(path, "max")


def test_a_score_equal_to_an_entry_at_its_rounded_precision_ties_it():
    # The entry was written rounded up to 6 digits; the re-computed score is the unrounded value.
    board = Leaderboard.from_scores([0.9, 0.823457, 0.5], "max")
    assert board.position(0.8234567) == 2
    assert board.position(0.8234) == 3  # a real difference at that precision still loses


def test_rounded_ties_respect_lower_is_better():
    board = Leaderboard.from_scores([0.1, 0.223457, 0.5], "min")
    assert board.position(0.2234574) == 2
    assert board.position(0.2235) == 3
