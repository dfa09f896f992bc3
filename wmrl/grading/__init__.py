"""Grading outside the sandbox: validation, metrics, leaderboard position score."""

from wmrl.grading.grader import Grade, grade_submission
from wmrl.grading.leaderboard import Leaderboard, LeaderboardError, read_leaderboard
from wmrl.grading.metrics import METRICS, Metric, get_metric

__all__ = ["METRICS", "Grade", "Leaderboard", "LeaderboardError", "Metric", "get_metric", "grade_submission",
           "read_leaderboard"]
