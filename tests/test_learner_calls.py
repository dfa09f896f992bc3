"""Calls between learner ranks (wmrl/learner/channel.py): a follower waits for rank 0's next call as
long as a step takes, far past the learner group's timeout, and still ends when rank 0 dies.

The two ranks are plain processes given the ``env://`` variables (as ``srun`` tasks are), not
``torchrun``: its agent would itself stop rank 1 once rank 0 died, hiding what the follower does alone.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from learner_support import LAUNCH_VARS, REPO, _free_port, tiny_model_dir

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

SCRIPT = Path(__file__).with_name("learner_script.py")
GROUP_TIMEOUT_S = 6.0  # the learner group's own timeout in these tests (1800 s in a run)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_model_dir(tmp_path_factory.mktemp("model"))


def start_ranks(args: list[str], logs: Path, ranks: int = 2) -> list[subprocess.Popen]:
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS}
    env.update(PYTHONPATH=os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]), OMP_NUM_THREADS="1",
               WORLD_SIZE=str(ranks), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    procs = []
    for rank in range(ranks):
        out = (logs / f"rank{rank}.log").open("w")
        procs.append(subprocess.Popen([sys.executable, str(SCRIPT), *args], stdout=out, stderr=subprocess.STDOUT,
                                      env={**env, "RANK": str(rank), "LOCAL_RANK": str(rank)}))
    return procs


def finish(procs: list[subprocess.Popen], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    try:
        return [p.wait(timeout=max(1.0, deadline - time.monotonic())) for p in procs]
    finally:
        for p in procs:  # a hung rank is the failure under test: never leave it behind
            if p.poll() is None:
                p.kill()
                p.wait()


def test_a_follower_waits_between_two_calls_far_longer_than_the_group_timeout(model_dir: Path, tmp_path: Path):
    idle = 4 * GROUP_TIMEOUT_S
    procs = start_ranks(["--model", str(model_dir), "--out", str(tmp_path / "out.pt"), "--follow", "--updates", "2",
                         "--group-timeout-s", str(GROUP_TIMEOUT_S), "--idle-s", str(idle)], tmp_path)
    codes = finish(procs, timeout=400)
    logs = {r: (tmp_path / f"rank{r}.log").read_text() for r in range(2)}
    assert codes == [0, 0], f"rank 0:\n{logs[0][-3000:]}\nrank 1:\n{logs[1][-3000:]}"
    assert (tmp_path / "out.pt").exists()


def test_a_follower_ends_with_an_error_soon_after_rank_0_dies_between_calls(model_dir: Path, tmp_path: Path):
    procs = start_ranks(["--model", str(model_dir), "--out", str(tmp_path / "out.pt"), "--follow", "--updates", "3",
                         "--kill-leader-after", "1"], tmp_path)
    leader, follower = procs
    try:
        assert leader.wait(timeout=400) == -9
    finally:
        if leader.poll() is None:
            leader.kill()
    died = time.monotonic()
    code = finish([follower], timeout=120)[0]  # not the learner group's 1800 s, nor the channel's days
    log = (tmp_path / "rank1.log").read_text()
    assert code != 0, log[-3000:]
    assert time.monotonic() - died < 120
    assert "LeaderGone: rank 0 is gone" in log, log[-3000:]


def run_two_ranks(script: str, start_line: Path) -> tuple[list[subprocess.Popen], list[str]]:
    """``script`` as ranks 0 and 1 of a gloo world of two (no DeepSpeed); their exit codes and outputs.

    ``start_line``: an empty directory where the ranks meet before they join the group, so that the
    group's short timeout never measures one interpreter's start against the other's (a loaded machine).
    """
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS}
    env.update(PYTHONPATH=os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]), WORLD_SIZE="2",
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), START_LINE=str(start_line))
    procs = [subprocess.Popen([sys.executable, "-c", script], env={**env, "RANK": str(r)},
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(2)]
    try:
        outs = [p.communicate(timeout=120)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return procs, outs


CHANNEL_SCRIPT = """
import sys, time
from datetime import timedelta
import torch.distributed as dist
from wmrl.learner.channel import CallChannel
import os, pathlib
line = pathlib.Path(os.environ["START_LINE"])  # both ranks past their imports before the 3 s clock runs
(line / os.environ["RANK"]).touch()
while len(list(line.iterdir())) < 2:
    time.sleep(0.01)
dist.init_process_group("gloo", timeout=timedelta(seconds=3))  # env:// from start_ranks' variables
from wmrl.learner.distributed import leave_rank
channel = CallChannel()
if dist.get_rank() == 0:
    with channel.leading("made", 41):
        time.sleep(9)  # rank 0 alone for 3 times the group timeout: the follower waits on the channel
    with channel.leading("not registered"):
        pass
    time.sleep(1)
    leave_rank(0)  # as a rank's entry point ends: a plain exit can abort in gloo's teardown
else:
    channel.register("made", lambda x: print("made", x + 1, flush=True))
    try:
        channel.serve()
    except Exception as err:
        print(f"{type(err).__name__}: {err}", flush=True)
        leave_rank(1)
    leave_rank(0)
"""


def test_a_call_the_follower_did_not_register_is_named_with_what_it_registered(tmp_path: Path) -> None:
    """Without DeepSpeed: the channel alone outwaits a 3 s group timeout, and refuses an unknown call."""
    procs, outs = run_two_ranks(CHANNEL_SCRIPT, tmp_path)
    assert procs[0].returncode == 0, outs[0][-3000:]
    assert procs[1].returncode == 1 and "made 42" in outs[1], outs[1][-3000:]
    assert "rank 0 made the call 'not registered', which rank 1 did not register (it registered ['made'])" in outs[1]


EARLY_JOIN_SCRIPT = """
import sys, time
from datetime import timedelta
import torch.distributed as dist
from wmrl.learner.channel import CallChannel
import os, pathlib
line = pathlib.Path(os.environ["START_LINE"])  # both ranks past their imports before the 3 s clock runs
(line / os.environ["RANK"]).touch()
while len(list(line.iterdir())) < 2:
    time.sleep(0.01)
dist.init_process_group("gloo", timeout=timedelta(seconds=3))  # env:// from start_ranks' variables
if dist.get_rank() == 0:
    time.sleep(9)  # the coordinator's own start (pool, tracking, the initial policy) before lead() opens the channel
channel = CallChannel()
if dist.get_rank() == 0:
    with channel.leading("made", 41):
        pass
    channel.release()
else:
    channel.register("made", lambda x: print("made", x + 1, flush=True))
    print("calls", channel.serve(), flush=True)
from wmrl.learner.distributed import leave_rank
leave_rank(0)  # as a rank's entry point ends: a plain exit can abort in gloo's teardown ("terminate called ...")
"""


def test_a_follower_waits_for_rank_0_to_open_the_channel_far_longer_than_the_group_timeout(tmp_path: Path) -> None:
    """Rank 0 joins the learner group when its coordinator starts (wmrl/orchestration/coordinator.py), then
    works alone before it opens the channel: the follower, already in the group, waits on the channel's
    own timeout, not the group's."""
    procs, outs = run_two_ranks(EARLY_JOIN_SCRIPT, tmp_path)
    assert [p.returncode for p in procs] == [0, 0], outs
    assert "made 42" in outs[1] and "calls 1" in outs[1], outs[1][-3000:]
