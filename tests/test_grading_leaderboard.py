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
    pd.DataFrame({"score": [0.5, 0.9, 0.7]}).to_csv(path, index=False)
    assert read_leaderboard(path, "max").scores == (0.9, 0.7, 0.5)


def test_an_empty_score_stays_in_n_and_is_never_tied(tmp_path):
    # MLE-Dojo counts every row of the file; a disqualified team without a score is still a team.
    path = tmp_path / "lb.csv"
    path.write_text("rank,score\n1,0.9\n2,0.5\n3,\n")
    board = read_leaderboard(path, "max")
    assert len(board) == 3 and board.scores == (0.9, 0.5)
    assert board.position(0.4) == 4 and board.position_score(0.4) == 0.0
    assert board.position_score(0.6) == pytest.approx(2 / 3)


@pytest.mark.parametrize("rows,expected", [((0.9, None, 0.5), 1 / 3), ((None, 0.9, 0.5), 1 / 3),
                                           ((0.9, 0.5, None), 2 / 3)])
def test_an_empty_row_shadows_entries_as_in_mledojos_sort(rows, expected):
    # MLE-Dojo sorts the raw column with Python's sorted(): a NaN keeps its place among its neighbours.
    board = Leaderboard.from_scores(list(rows), "max")
    assert board.position_score(0.7) == pytest.approx(expected)


def test_a_non_numeric_score_is_an_error_naming_file_line_and_value(tmp_path):
    path = tmp_path / "lb.csv"
    path.write_text("rank,score\n1,0.9\n2,0.8\n3,n/a\n")
    with pytest.raises(LeaderboardError, match=r"lb\.csv, line 4: score='n/a' is not a finite number"):
        read_leaderboard(path, "max")


def test_an_infinite_score_is_an_error(tmp_path):
    path = tmp_path / "lb.csv"
    path.write_text("rank,score\n1,inf\n")
    with pytest.raises(LeaderboardError, match=r"line 2: score='inf'"):
        read_leaderboard(path, "max")


def test_header_only_board_is_an_error_naming_the_file(tmp_path):
    path = tmp_path / "lb.csv"
    path.write_text("rank,score\n")
    with pytest.raises(LeaderboardError, match=r"lb\.csv: column 'score' has no scores \(header only"):
        read_leaderboard(path, "max")


def test_git_lfs_pointer_gets_its_own_error(tmp_path):
    path = tmp_path / "leaderboard.csv"
    path.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:1087afc6\nsize 67155\n")
    with pytest.raises(LeaderboardError, match=r"leaderboard\.csv: is a Git LFS pointer.*git lfs pull"):
        read_leaderboard(path, "max")


def test_leaderboard_without_score_column_is_an_error_naming_the_file(tmp_path):
    path = tmp_path / "lb.csv"
    pd.DataFrame({"points": [1, 2]}).to_csv(path, index=False)
    with pytest.raises(LeaderboardError, match=r"lb\.csv: no 'score' column"):
        read_leaderboard(path, "max")


def test_comparison_is_exact_without_a_tolerance():
    # MLE-Dojo and MLE-bench: a log loss 1e-7 worse than the top entry is second, not first.
    board = Leaderboard.from_scores([0.02467, 0.03, 0.5], "min")
    assert board.position(0.02467) == 1
    assert board.position(0.02467 * (1 + 1e-7)) == 2


def test_a_tolerance_ties_a_score_equal_at_the_boards_rounded_precision():
    # The built-in pool: the entry was written rounded up to 6 digits; the re-computed score is unrounded.
    board = Leaderboard.from_scores([0.9, 0.823457, 0.5], "max", tie_tolerance=1e-6)
    assert board.position(0.8234567) == 2
    assert board.position(0.8234) == 3  # a real difference at that precision still loses


def test_rounded_ties_respect_lower_is_better():
    board = Leaderboard.from_scores([0.1, 0.223457, 0.5], "min", tie_tolerance=1e-6)
    assert board.position(0.2234574) == 2
    assert board.position(0.2235) == 3


def test_a_negative_tolerance_is_refused():
    with pytest.raises(LeaderboardError, match="tie_tolerance"):
        Leaderboard.from_scores([0.5], "max", tie_tolerance=-1.0)
