"""The paper's evaluation aggregation: avg@k per task, mean within category, then over categories."""

import math

import numpy as np
import pytest

from wmrl.evaluation import TaskScore, aggregate, evaluate
from wmrl.rollout import Feedback, Trajectory, Turn


def test_categories_count_equally_whatever_their_number_of_tasks():
    tasks = [TaskScore("a", "tabular", [1.0, 1.0]), TaskScore("b", "tabular", [0.0, 0.0]),
             TaskScore("c", "tabular", [0.5, 0.5]), TaskScore("d", "image", [0.1, 0.3])]
    report = aggregate(tasks, k=2)
    assert report.by_category == {"image": pytest.approx(0.2), "tabular": pytest.approx(0.5)}
    assert report.score == pytest.approx(0.35)  # not the task mean 0.4
    assert report.sample_mean == pytest.approx(np.mean([1, 1, 0, 0, .5, .5, .1, .3]))


def test_tasks_without_any_score_are_left_out_not_zero():
    report = aggregate([TaskScore("a", "text", [0.6]), TaskScore("b", "text", [], failed=3)], k=1)
    assert report.score == pytest.approx(0.6)
    assert report.tasks[1].failed == 3 and math.isnan(report.tasks[1].mean)


class _Scripted:
    """A policy whose trajectory i of every group submits code scoring ``scores[i]`` (test stand-in)."""

    def __init__(self, scores):
        self.scores = scores

    def rollout(self, step, task_ids, n, envs, rng):
        from wmrl.rollout import Submission

        groups = []
        for g, (task_id, env) in enumerate(zip(task_ids, envs)):
            subs = [Submission(f"{step}/{g}/{i}/0", task_id, repr(self.scores[i])) for i in range(n)]
            feedback = env.evaluate(subs)
            groups.append([Trajectory(task_id, g, i, env.role, [Turn([], [], [], "", s.code, None, fb)],
                                      score=fb.score, kept_turn=0, final_code=s.code)
                           for i, (s, fb) in enumerate(zip(subs, feedback))])
        return groups


class _Echo:
    role = "executed"

    def __init__(self):
        self.keys = []

    def evaluate(self, subs):
        self.keys += [s.key for s in subs]
        return [Feedback(s.key, "", None if s.code == "None" else float(s.code), s.code != "None", "ok")
                for s in subs]


def test_evaluate_executes_every_trajectory_and_skips_infrastructure_failures():
    env = _Echo()
    report = evaluate(_Scripted([0.2, 0.4, None]), env, [("t1", "tabular"), ("t2", "text")], k=3,
                      rng=np.random.default_rng(0))
    assert len(env.keys) == 6
    assert [t.failed for t in report.tasks] == [1, 1]
    assert report.score == pytest.approx(0.3)
    assert report.valid_rate == pytest.approx(4 / 6)


def test_evaluation_says_how_far_it_got_after_each_batch_of_executions():
    lines = []
    report = evaluate(_Scripted([0.2, None]), _Echo(), [("t1", "tabular"), ("t2", "text")], k=2,
                      rng=np.random.default_rng(0), progress=lines.append)
    assert lines[0] == "2 tasks x k=2 = 4 trajectories, every submission executed"
    assert lines[1].startswith("batch 1: 2 submissions executed (2 so far for 4 trajectories, 1 without a score)")
    assert lines[2].startswith("batch 2: 2 submissions executed (4 so far")
    assert lines[-1].startswith("done in ") and f"{report.score:.4f}" in lines[-1]
