"""The executed-solution memory's one-time build cost is recorded when it is paid (issue 36: every
CPU-hour comparison counts it): the policy samples' generation seconds and CPU time beside their cache,
the memory's own executions (beyond the SFT's) from each outcome's recorded seconds and CPU time, the
same when read from the cache."""

from __future__ import annotations

import itertools
import json
import shutil
import time
from dataclasses import replace
from pathlib import Path

import pytest
from agent_support import ScriptedGenerator
from test_sft_data import task  # noqa: F401 - a fixture

from wmrl.agent.config import AgentConfig
from wmrl.agent.policy import AgentPolicy
from wmrl.agent.prompts import PromptContext
from wmrl.generation.base import SamplingParams
from wmrl.sandbox.probe import table_runtime

bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed (CI installs it)")


def test_drawing_the_policy_samples_records_its_seconds_and_a_cached_draw_does_not_rewrite_them(task, tmp_path,  # noqa: F811
                                                                                                monkeypatch):
    from wmrl.world_model_data.examples import policy_samples, policy_samples_cost

    monkeypatch.setenv("WMRL_CACHE", str(tmp_path / "cache"))
    drawn = itertools.count()
    generator = ScriptedGenerator(lambda prompt, call: f"```python\nprint({next(drawn)})\n```")
    context = PromptContext(max_turns=1, timeout_s=60, gpus=0, runtime=table_runtime())
    policy = AgentPolicy(generator, SamplingParams(), {task.task_id: "Competition: Tiny\nBegin.\n"},
                         AgentConfig(prompt_style="short", max_turns=1), context)
    assert policy_samples_cost(policy, [task], 3, 0, "b") is None  # not drawn yet
    policy_samples(policy, [task], 3, seed=0, build="b")
    cost = policy_samples_cost(policy, [task], 3, 0, "b")
    assert cost["samples"] == 3 and cost["seconds_generation"] >= 0.0
    policy_samples(policy, [task], 3, seed=0, build="b")  # from the cache: the first draw's cost stays
    assert policy_samples_cost(policy, [task], 3, 0, "b") == cost and len(generator.calls) == 1
    assert policy_samples_cost(policy, [task], 3, 0, "other") is None


def _spin(seconds: float) -> None:
    until = time.process_time() + seconds
    while time.process_time() < until:
        pass


@pytest.mark.parametrize("busy", [True, False])
def test_the_draws_cpu_time_is_the_processs_not_the_wall_clocks(task, tmp_path, monkeypatch, busy):  # noqa: F811
    """A generator that computes is charged its CPU time; one that waits (a server elsewhere) is not."""
    from wmrl.world_model_data.examples import policy_samples, policy_samples_cost

    monkeypatch.setenv("WMRL_CACHE", str(tmp_path / "cache"))

    def reply(prompt, call):
        _spin(0.3) if busy else time.sleep(0.3)
        return "```python\nprint(1)\n```"

    context = PromptContext(max_turns=1, timeout_s=60, gpus=0, runtime=table_runtime())
    policy = AgentPolicy(ScriptedGenerator(reply), SamplingParams(), {task.task_id: "Competition: Tiny\nBegin.\n"},
                         AgentConfig(prompt_style="short", max_turns=1), context)
    policy_samples(policy, [task], 3, seed=0, build="b")
    cost = policy_samples_cost(policy, [task], 3, 0, "b")
    # whatever else the draw costs (prompts, tokenising) is in both clocks: the sleep is in the wall clock only
    # (the spin counts the process's CPU, other threads' included, so its wall time may be a little shorter)
    if busy:
        assert cost["cpu_seconds_generation"] >= 0.85
    else:
        assert cost["seconds_generation"] - cost["cpu_seconds_generation"] >= 0.8


@bwrap
def test_the_memorys_own_executions_are_counted_with_their_recorded_seconds(tmp_path, monkeypatch):
    from test_sft_data import task_with_references

    from wmrl.config import load_config
    from wmrl.configs import TINY_CONFIG
    from wmrl.world_model_data.examples import memory_examples, world_model_sft_variants
    from wmrl.world_model_data.variants import POLICY_SAMPLE, SolutionVariant, cache_dir

    monkeypatch.setenv("WMRL_CACHE", str(tmp_path / "cache"))
    task = task_with_references(tmp_path, 4)  # noqa: F811
    cfg = load_config(str(TINY_CONFIG))
    cfg = replace(cfg, world_model=replace(cfg.world_model, sft_variants_per_task=1, heldout_fraction=0.5))
    kept = task.reference_solutions()[0]
    deeper = kept.code.replace("max_depth=", "max_depth=1 + ")  # a new program: executed for the memory
    samples = [SolutionVariant(task.task_id, POLICY_SAMPLE, POLICY_SAMPLE, deeper, False, 0.0)]
    cost: dict = {}
    memory_examples(cfg, [task], table_runtime(), samples, progress=False, cost=cost)
    sft_keys = {v.key for v in world_model_sft_variants([task], cfg.world_model, table_runtime())}
    executed = {p.stem: o for p in Path(cache_dir()).rglob("*.json")
                if isinstance(o := json.loads(p.read_text()), dict) and o.get("source") == "executed"}
    own = {k: o for k, o in executed.items() if k not in sft_keys}
    assert 0 < cost["executions"] == len(own) < len(executed)  # the SFT's executions are the SFT's cost
    assert cost["seconds_execution"] == pytest.approx(sum(o["seconds"] for o in own.values())) and cost["seconds_execution"] > 0
    assert cost["cpu_seconds_execution"] == pytest.approx(sum(o["cpu_seconds"] for o in own.values()))
    assert cost["cpu_seconds_execution"] > 0
    again: dict = {}
    memory_examples(cfg, [task], table_runtime(), samples, progress=False, cost=again)  # all from the cache
    assert again == cost
    # an outcome cached by a wmrl that did not record CPU time: the total is unknown, not an undercount
    first = next(p for p in Path(cache_dir()).rglob("*.json") if p.stem in own)
    older = json.loads(first.read_text())
    del older["cpu_seconds"]
    first.write_text(json.dumps(older))
    unknown: dict = {}
    memory_examples(cfg, [task], table_runtime(), samples, progress=False, cost=unknown)
    assert unknown["cpu_seconds_execution"] is None and unknown["seconds_execution"] == cost["seconds_execution"]


def test_an_llm_run_records_its_memorys_one_time_build(micro_run):
    """The trainer writes RUN_DIR/memory_build.json at its first start: what scripts/headline.py charges."""
    from wmrl.models.cache import built_hash
    from wmrl.sft.pipeline import read_pinned_initial_policy
    from wmrl.trainers.llm.names import MEMORY_BUILD

    record = json.loads((micro_run / MEMORY_BUILD).read_text())
    assert record["build"] == built_hash(read_pinned_initial_policy(micro_run, log=lambda *a: None))
    assert record["executions"] >= 0 and record["seconds_execution"] >= 0
    # the samples' draw is timed where they are cached (the unit test above); a cache filled by an older
    # wmrl has no record of it, which the record then leaves out rather than guess
    assert "seconds_generation" not in record or (record["seconds_generation"] > 0 and record["samples"] > 0)
