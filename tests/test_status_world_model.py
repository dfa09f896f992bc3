"""`wmrl status` shows what the world model's answers were (fallbacks and infrastructure failures by kind),
and which initial policy the run started from."""

from wmrl.cli.status import _world_model_line


def test_status_names_fallbacks_and_failures_by_kind():
    line = _world_model_line({"world_model": {"submissions": 6.0, "calls": 18.0, "verdict:fallback": 4.0,
                                              "infrastructure_failures": 2.0, "failure:MalformedResponse": 1.0,
                                              "failure:APITimeoutError": 1.0, "precheck_settled": 0.0,
                                              "precheck_skipped": 1.0}})
    assert line == ("world model 6 submissions, 18 calls, 4 fallback verdicts, 2 infrastructure failures "
                    "(APITimeoutError 1, MalformedResponse 1), pre-check settled 0, skipped 1")


def test_status_without_a_world_model_says_nothing_of_it():
    assert _world_model_line({}) == ""


def test_status_says_how_many_quality_checks_the_memory_answered():
    line = _world_model_line({"world_model": {"submissions": 10.0, "calls": 14.0, "precheck_settled": 3.0,
                                              "memory_solutions": 612.0, "memory_quality": 7.0,
                                              "memory_exact": 2.0}})
    assert line.endswith("pre-check settled 3; memory of 612 executed solutions answered 7 quality checks "
                         "(2 seen verbatim)")


def test_status_names_the_initial_policy_the_run_started_from(tmp_path):
    from launch_support import dry_config, make_run

    from wmrl.cli.status import collect, render
    from wmrl.io import atomic_write_json
    from wmrl.sft.pipeline import INITIAL_POLICY

    run = make_run(dry_config(tmp_path, "pinned", 1))
    assert not [line for line in render(collect(run)).splitlines() if line.startswith("policy")]  # not pinned yet
    atomic_write_json(run.path / INITIAL_POLICY, {"path": "/c/sft/sft-3cc97f37219cbc82",
                                                  "build_hash": "3cc97f37219cbc82" + "0" * 48})
    (line,) = [line for line in render(collect(run)).splitlines() if line.startswith("policy")]
    assert line == "policy     started from sft-3cc97f37219cbc82 (pinned at the run's first start)"
