"""Every learner rank on its own GPU, and its colocated vLLM engine on that same GPU.

The ranks' environments come from the real local Slurm, whose node declares stand-in GPUs (gres): with
``--gpus-per-node`` every task sees all of them and ``LOCAL_RANK`` picks one; with ``--gpus-per-task=1``
each task sees only its own (``CUDA_VISIBLE_DEVICES=1`` in task 1, CUDA index 0 there). vLLM is a stand-in
(tests/test_generation_vllm.py) that records the ``CUDA_VISIBLE_DEVICES`` its engine process would
start with: vLLM's worker runs on its CUDA index 0 (the uniproc executor's ``local_rank`` is 0 unless the
device string names one; vllm/v1/worker/gpu_worker.py ``init_device``: ``cuda:{local_rank}``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from launch_support import require_slurm
from test_generation_vllm import fake_vllm, tiny  # noqa: F401 - the stand-in vLLM and a tiny checkpoint

from wmrl.generation import vllm_engine
from wmrl.generation.config import VLLMConfig
from wmrl.learner.devices import physical_gpus, rank_device_index, visible_gpus

REPO = Path(__file__).resolve().parents[1]
# What a learner task computes: its LOCAL_RANK (DeepSpeed's CUDA index) as wmrl's Slurm rendezvous sets
# it, the GPUs it sees, and the physical GPU its colocated engine would be started on.
TASK = """
import json, os
from wmrl.learner.devices import physical_gpus, visible_gpus
from wmrl.learner.distributed import slurm_rendezvous
index = int(slurm_rendezvous(os.environ)["LOCAL_RANK"])
visible = visible_gpus(os.environ)
print(json.dumps({"task": int(os.environ["SLURM_PROCID"]), "index": index, "visible": visible,
                  "engine_gpu": physical_gpus([index], visible)}))
"""


@pytest.mark.parametrize(("local_rank", "visible", "index"), [
    (1, ["0", "1"], 1),  # --gpus-per-node: LOCAL_RANK picks among the node's GPUs
    (1, ["1"], 0),  # --gpus-per-task=1: the one GPU the task sees
    (3, None, 3),  # nothing narrowed: every GPU visible
    (1, [], 1),  # CUDA_VISIBLE_DEVICES="": no GPU, nothing to bind
])
def test_a_rank_binds_the_gpu_it_was_given(local_rank: int, visible: list[str] | None, index: int) -> None:
    assert rank_device_index(local_rank, visible) == index


def test_more_tasks_than_shared_gpus_is_refused_with_the_fix() -> None:
    with pytest.raises(ValueError, match="--gpus-per-task=1"):
        rank_device_index(2, ["0", "1"])


@pytest.mark.slurm
@pytest.mark.parametrize("gpus", ["--gpus-per-task=1", "--gpus-per-node=2"])
def test_slurm_tasks_each_bind_their_own_gpu_and_start_their_engine_there(gpus: str) -> None:
    """Before: LOCAL_RANK was SLURM_LOCALID, CUDA index 1 in a task that sees one GPU (DeepSpeed's
    set_device fails), and the colocated engine inherited the whole CUDA_VISIBLE_DEVICES (cuda:0 for all)."""
    require_slurm()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "CUDA_VISIBLE"))}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    proc = subprocess.run(["srun", "--ntasks=2", "--cpus-per-task=1", "--mem=500", "--time=5", gpus,
                           "--job-name=wmrl-devices-test", sys.executable, "-c", TASK],
                          env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    tasks = sorted((json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")),
                   key=lambda t: t["task"])
    assert [t["task"] for t in tasks] == [0, 1]
    for t in tasks:
        assert t["visible"], f"{gpus}: Slurm gave task {t['task']} no GPU"
        assert 0 <= t["index"] < len(t["visible"]), f"task {t['task']} binds CUDA index {t['index']}, not visible"
    engines = [t["engine_gpu"] for t in tasks]
    assert engines[0] != engines[1] and all(len(e) == 1 for e in engines), engines


@pytest.mark.parametrize(("visible", "current", "engine_sees"), [
    ("0,1", 1, "1"),  # rank 1 of 2 sharing the node's GPUs (DeepSpeed made cuda:1 current)
    (None, 3, "3"),
    ("1", 0, "1"),  # a task with its own GPU
])
def test_a_colocated_engine_starts_on_its_ranks_gpu(fake_vllm, tiny, monkeypatch,  # noqa: F811
                                                      visible: str | None, current: int, engine_sees: str) -> None:
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: current)
    vllm_engine.VLLMGenerator(str(tiny), VLLMConfig(placement="colocated", sleep_level=1))
    assert fake_vllm.visible_at_start == engine_sees
    assert os.environ.get("CUDA_VISIBLE_DEVICES") == visible  # the learner's process keeps its view


def test_an_in_process_engine_off_cuda_index_0_is_refused(fake_vllm, tiny, monkeypatch) -> None:  # noqa: F811
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    with pytest.raises(ValueError, match="VLLM_ENABLE_V1_MULTIPROCESSING"):
        vllm_engine.VLLMGenerator(str(tiny), VLLMConfig(placement="colocated", sleep_level=1))


def test_the_child_sees_the_physical_gpu_of_each_index() -> None:
    assert physical_gpus([1], visible_gpus({"CUDA_VISIBLE_DEVICES": "4,5"})) == ["5"]
    with pytest.raises(ValueError, match="not among the 1 visible"):
        physical_gpus([1], ["7"])
