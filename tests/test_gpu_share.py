"""Anchor GPU sharing (launch.executions_per_gpu): worker slots on one GPU, each told its share, each
execution counted at that share of a GPU.

The GPU is a fake one: ``CUDA_VISIBLE_DEVICES=0`` on a machine without GPUs, and an ``nvidia-smi``
stand-in on PATH that reports an 80 GB card (what the real one prints for
``--query-gpu=memory.total --format=csv,noheader,nounits -i 0``). The workers, the spool and the
executions are real processes.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from wmrl.config import load_config, to_yaml
from wmrl.config_checks import ConfigError
from wmrl.execution.config import LaunchConfig
from wmrl.execution.executed import to_feedback
from wmrl.execution.gpu_share import array_tasks, slot_env, slots_per_task
from wmrl.execution.service import LocalExecutor, SpoolExecutionService
from wmrl.sandbox.base import SandboxLimits
from wmrl.sandbox.runspec import gpu_env
from wmrl.storage.records import ExecutionRequest
from wmrl.storage.rundir import create_run_dir

PYTHON_WORK = "wmrl.execution.work:python_work"
FAST = {"timing.lease_s": 1.5, "timing.heartbeat_s": 0.2, "timing.poll_min_s": 0.02, "timing.poll_max_s": 0.2}
# Each execution reports what it was told and when it ran (it waits until its neighbour has started).
CODE = """
import json, os, time
marks = {marks!r}
open(os.path.join(marks, str(os.getpid())), "w").close()
deadline = time.time() + 60
while len(os.listdir(marks)) < 2 and time.time() < deadline:
    time.sleep(0.05)
print(json.dumps({{"gpu": os.environ.get("CUDA_VISIBLE_DEVICES"), "fraction": os.environ.get("WMRL_GPU_FRACTION"),
                  "memory_mb": os.environ.get("WMRL_GPU_MEMORY_MB"), "together": len(os.listdir(marks)) >= 2}}))
print(1.0)
"""


def two_queued_executions(tmp_path: Path, *overrides: str):
    """A run with executions_per_gpu=2 and two queued executions that wait for each other (CODE)."""
    cfg = load_config(None, ["run_name=t", "launch.executions_per_gpu=2", *overrides,
                             *(f"launch.{k}={v}" for k, v in FAST.items())])
    run = create_run_dir(tmp_path / "t", to_yaml(cfg))
    marks = tmp_path / "marks"
    marks.mkdir()
    reqs = [ExecutionRequest.create("t", step=1, task_id="iris", group_id=0, traj_id=i,
                                    code=CODE.format(marks=str(marks)), timeout_s=90) for i in range(2)]
    service = SpoolExecutionService(run, cfg.launch)
    service.submit(reqs)
    return cfg, run, service, reqs


@pytest.fixture
def fake_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 81920\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")


def test_two_executions_share_one_gpu_at_once_each_told_half_and_counted_at_half(tmp_path, fake_gpu):
    cfg, run, service, reqs = two_queued_executions(tmp_path, "launch.workers=2")
    with LocalExecutor(run, workers=2, work=PYTHON_WORK, idle_timeout_s=30,
                       executions_per_gpu=cfg.launch.executions_per_gpu):
        done = service.wait([r.request_id for r in reqs], timeout_s=120)
    assert len(done) == 2
    seen = [json.loads(rec.outcome["stdout_tail"].splitlines()[0]) for rec in done.values()]
    assert seen == [{"gpu": "0", "fraction": "0.5", "memory_mb": "40960", "together": True}] * 2
    assert len({rec.worker_id for rec in done.values()}) == 2  # two slots, not one after the other
    for rec in done.values():
        assert rec.outcome["gpu_fraction"] == 0.5
        feedback = to_feedback("1/0/0/0", rec)
        assert feedback.seconds == pytest.approx(rec.exec_seconds * 0.5)  # half a GPU per execution


def test_a_whole_gpu_execution_is_counted_at_its_wall_seconds(tmp_path):
    from wmrl.storage.records import ExecutionOutcomeRecord

    rec = ExecutionOutcomeRecord("r", "t", "done", 1.0, {"score": 1.0}, "w", 1, 0.0, 10.0, 10.0)
    assert to_feedback("1/0/0/0", rec).seconds == 10.0


def test_the_sandbox_passes_the_slots_share_on_to_a_gpu_execution_only(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    monkeypatch.setenv("WMRL_GPU_FRACTION", "0.5")
    monkeypatch.setenv("WMRL_GPU_MEMORY_MB", "40960")
    monkeypatch.setenv("TF_FORCE_GPU_ALLOW_GROWTH", "true")
    with_gpu = gpu_env(SandboxLimits(timeout_s=1, gpus=1))
    assert with_gpu["CUDA_VISIBLE_DEVICES"] == "3" and with_gpu["WMRL_GPU_MEMORY_MB"] == "40960"
    assert with_gpu["WMRL_GPU_FRACTION"] == "0.5" and with_gpu["TF_FORCE_GPU_ALLOW_GROWTH"] == "true"
    assert gpu_env(SandboxLimits(timeout_s=1, gpus=0)) == {"CUDA_VISIBLE_DEVICES": ""}


def test_slots_are_spread_over_the_tasks_gpus(fake_gpu):
    envs = [slot_env(i, ["0", "1"], 2) for i in range(4)]
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["0", "0", "1", "1"]
    assert slot_env(0, [], 2) == {}  # no GPU: nothing to share


def test_the_worker_array_asks_for_one_task_per_shared_gpu():
    launch = LaunchConfig(workers=8, worker_gpus=1, executions_per_gpu=2)
    assert (slots_per_task(launch), array_tasks(launch)) == (2, 4)
    assert array_tasks(LaunchConfig(workers=8, worker_gpus=1)) == 8
    assert array_tasks(LaunchConfig(workers=3, worker_gpus=0, executions_per_gpu=2)) == 3  # CPU workers


def test_executions_per_gpu_below_one_is_refused():
    with pytest.raises(ConfigError, match="launch.executions_per_gpu"):
        load_config(None, ["run_name=t", "launch.executions_per_gpu=0"])


@pytest.mark.parametrize("name", ["qwen3.5-4b", "qwen3.5-9b"])
def test_the_cluster_configs_put_two_anchor_executions_on_each_gpu(name):
    cfg = load_config(Path(__file__).resolve().parents[1] / "configs" / f"{name}.yaml")
    assert cfg.launch.executions_per_gpu == 2 and cfg.launch.worker_gpus == 1


def test_a_slurm_array_task_runs_one_worker_slot_per_share_of_its_gpu(tmp_path, fake_gpu):
    """The body of an array task (run_worker_task's shared-GPU path), called here in-process: two slots
    named after the task, each on GPU 0 with half of it, until they go idle."""
    from wmrl.slurm.client import run_worker_slots

    cfg, run, service, reqs = two_queued_executions(tmp_path, "launch.worker_gpus=1", "launch.timing.idle_timeout_s=3")
    summary = run_worker_slots(run, cfg, PYTHON_WORK, "node1-77_3-123")
    done = service.wait([r.request_id for r in reqs], timeout_s=5)
    assert summary["slots"] == 2 and summary["exit_reason"] == "slots exited"
    assert sorted(rec.worker_id for rec in done.values()) == ["node1-77_3-123-s0", "node1-77_3-123-s1"]
    seen = [json.loads(rec.outcome["stdout_tail"].splitlines()[0]) for rec in done.values()]
    assert all(s["gpu"] == "0" and s["fraction"] == "0.5" and s["together"] for s in seen)


@pytest.mark.slurm
@pytest.mark.timeout(300)
def test_on_the_local_slurm_an_array_task_with_one_fake_gpu_runs_two_executions_on_it_at_once(tmp_path, fake_gpu,
                                                                                               monkeypatch):
    """The worker array of the cluster configs' shape (one GPU per task, two executions on it) on the
    local Slurm, whose node has fake GPUs (slurm/conf/gres.conf.in): the GPU comes from Slurm's
    allocation, not from this process (CUDA_VISIBLE_DEVICES is unset here), and both slots use it."""
    from launch_support import require_slurm, squeue_gone, wait_until

    from wmrl.slurm.client import cancel_jobs, submit_workers

    require_slurm()
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")  # the nvidia-smi stand-in stays on PATH (sbatch exports it)
    cfg, run, service, reqs = two_queued_executions(
        tmp_path, "launch.executor=slurm", f"launch.work={PYTHON_WORK}", "launch.workers=2", "launch.worker_gpus=1",
        "launch.worker_cpus=2", "sandbox.memory_mb=2048",  # 2 slots; their 8 GB fit the local node
        "launch.timing.worker_time_min=5", "launch.timing.idle_timeout_s=5")
    array = submit_workers(cfg, run)
    try:
        done = service.wait([r.request_id for r in reqs], timeout_s=180)
        shown = subprocess.run(["scontrol", "show", "job", "-o", array], capture_output=True, text=True,
                               check=False).stdout
        wait_until("the array to leave the queue", lambda: squeue_gone(array), 120)
    finally:
        cancel_jobs([array])
    assert "TresPerNode=gres:gpu:1" in shown or "TresPerNode=gres/gpu:1" in shown, shown
    assert len(done) == 2
    seen = [json.loads(rec.outcome["stdout_tail"].splitlines()[0]) for rec in done.values()]
    assert seen[0]["gpu"].isdigit() and seen[0] == seen[1]  # Slurm's one GPU, the same for both
    assert seen[0] | {"gpu": "0"} == {"gpu": "0", "fraction": "0.5", "memory_mb": "40960", "together": True}
    workers = sorted(rec.worker_id for rec in done.values())
    assert workers[0].endswith("-s0") and workers[1].endswith("-s1") and workers[0][:-3] == workers[1][:-3]
    assert all(rec.outcome["gpu_fraction"] == 0.5 for rec in done.values())


MPS_CONTROL_STANDIN = """#!/bin/sh
# nvidia-cuda-mps-control's interface: `-d` starts the daemon (and returns), no argument reads commands
# (here: quit) from stdin. Records each call with the pipe directory it was given.
if [ "$1" = "-d" ]; then echo "start $CUDA_MPS_PIPE_DIRECTORY $CUDA_VISIBLE_DEVICES" >> {calls}; exit 0; fi
read cmd; echo "$cmd $CUDA_MPS_PIPE_DIRECTORY" >> {calls}
"""


def test_own_mps_starts_a_daemon_for_the_slots_and_enforces_each_share(tmp_path, fake_gpu):
    """launch.mps=own: the slots' executor starts an MPS control daemon (the stand-in keeps the real
    command's interface) with a pipe directory of its own, each slot is a client whose limits are its
    half of the GPU, the executions see the pipe directory, and the daemon is told to quit at the end."""
    calls = tmp_path / "mps-calls"
    control = tmp_path / "bin" / "nvidia-cuda-mps-control"
    control.write_text(MPS_CONTROL_STANDIN.format(calls=calls))
    control.chmod(0o755)
    probe = ("import json, os\nprint(json.dumps({k: os.environ.get(k) for k in ('CUDA_MPS_PIPE_DIRECTORY', "
             "'CUDA_MPS_ACTIVE_THREAD_PERCENTAGE', 'CUDA_MPS_PINNED_DEVICE_MEM_LIMIT')}))\nprint(1.0)")
    cfg = load_config(None, ["run_name=t", "launch.executions_per_gpu=2", "launch.mps=own",
                             *(f"launch.{k}={v}" for k, v in FAST.items())])
    run = create_run_dir(tmp_path / "t", to_yaml(cfg))
    reqs = [ExecutionRequest.create("t", step=1, task_id="iris", group_id=0, traj_id=i, code=probe, timeout_s=60)
            for i in range(2)]
    service = SpoolExecutionService(run, cfg.launch)
    service.submit(reqs)
    with LocalExecutor(run, workers=2, work=PYTHON_WORK, idle_timeout_s=30, executions_per_gpu=2, mps="own"):
        done = service.wait([r.request_id for r in reqs], timeout_s=120)
    lines = calls.read_text().splitlines()
    assert len(lines) == 2 and lines[0].startswith("start ") and lines[1].startswith("quit ")
    pipe = lines[0].split()[1]
    assert lines[0] == f"start {pipe} 0" and lines[1] == f"quit {pipe}"
    seen = [json.loads(rec.outcome["stdout_tail"].splitlines()[0]) for rec in done.values()]
    assert seen == [{"CUDA_MPS_PIPE_DIRECTORY": pipe, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50",
                     "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=40960M"}] * 2
    assert not Path(pipe).exists()  # the executor's own directory, removed with the daemon


def test_mps_modes_are_named_and_own_without_the_control_binary_says_what_to_do(tmp_path, fake_gpu, monkeypatch):
    from wmrl.execution.gpu_share import mps_daemon

    with pytest.raises(ConfigError, match=r"launch.mps='always' is not allowed; choose one of: off, own, site"):
        load_config(None, ["run_name=t", "launch.mps=always"])
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))  # the fake nvidia-smi, no MPS control
    with (pytest.raises(RuntimeError, match=r"launch.mps=own: nvidia-cuda-mps-control is not on PATH"),
          mps_daemon(tmp_path / "mps")):
        pass
    assert slot_env(1, ["3"], 2, mps=True)["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in slot_env(1, ["3"], 2)
