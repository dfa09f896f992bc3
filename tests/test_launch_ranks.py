"""The coordinator's shape on Slurm: nodes x tasks per node from config, each job's own sbatch options
(never the other's), the NCCL environment keys, and the learner's rendezvous derived from the
allocation; on the local Slurm a 2-task coordinator job really gets 2 tasks."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from launch_support import REPO, dry_config, make_run, require_slurm, wait_until

from wmrl.config import ConfigError, to_yaml
from wmrl.learner.distributed import MASTER_PORT_RANGE, slurm_rendezvous
from wmrl.slurm.client import (
    COORDINATOR,
    WORKERS,
    cancel_jobs,
    sbatch_command_options,
    slurm_executor,
    template_path,
)
from wmrl.slurm.preflight import PreflightError, check_learner_ranks

needs_srun = pytest.mark.skipif(shutil.which("srun") is None, reason="submitit's SlurmExecutor needs srun on PATH")

SHAPE = ["launch.executor=slurm", "launch.coordinator_nodes=2", "launch.coordinator_tasks_per_node=4",
         "launch.coordinator_gpus=4", "launch.worker_gpus=1", "launch.extra_sbatch=[--constraint=a100]",
         "launch.coordinator_sbatch=[--exclusive,'#SBATCH --mem=0']", "launch.worker_sbatch=['--mem=40G']"]


def _script(tmp_path, role: str, *extra: str) -> list[str]:
    cfg = dry_config(tmp_path, f"shape-{role}", 1, *SHAPE, *extra)
    executor = slurm_executor(cfg, make_run(cfg), role)
    if role == WORKERS:
        executor.parameters["map_count"] = cfg.launch.workers
    return executor._make_submission_file_text("python -m submitit.core._submit X", "uid").splitlines()


@needs_srun
def test_coordinator_job_asks_for_its_nodes_tasks_gpus_and_its_own_options_only(tmp_path):
    lines = _script(tmp_path, COORDINATOR)
    for line in ("#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=4", "#SBATCH --gpus-per-node=4",
                 "#SBATCH --exclusive", "#SBATCH --mem=0", "#SBATCH --constraint=a100"):
        assert line in lines, line
    assert "#SBATCH --mem=40G" not in lines


@needs_srun
def test_worker_array_keeps_its_own_resources(tmp_path):
    lines = _script(tmp_path, WORKERS)
    for line in ("#SBATCH --gpus-per-node=1", "#SBATCH --mem=40G", "#SBATCH --constraint=a100"):
        assert line in lines, line
    for leaked in ("#SBATCH --exclusive", "#SBATCH --mem=0", "#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=4",
                   "#SBATCH --gpus-per-node=4"):
        assert leaked not in lines, leaked


def test_plain_sbatch_lines_carry_each_jobs_shape_and_options(tmp_path):
    cfg = dry_config(tmp_path, "plain", 1, *SHAPE)
    assert sbatch_command_options(cfg, COORDINATOR) == [
        "--nodes=2", "--ntasks-per-node=4", "--gpus-per-node=4", "--cpus-per-task=2", "--time=1440",
        "--constraint=a100", "--exclusive", "--mem=0"]
    # 2 workers, one execution per GPU: an array of 2 tasks, each with its GPU
    assert sbatch_command_options(cfg, WORKERS) == [
        "--array=0-1", "--gpus-per-node=1", "--cpus-per-task=1", "--mem=40G", "--time=240", "--constraint=a100"]


def test_no_submit_prints_the_options_of_each_job_on_its_own_sbatch_line(tmp_path):
    config = tmp_path / "shape.yaml"
    config.write_text(to_yaml(dry_config(tmp_path, "plain", 1, *SHAPE, "trainer=llm")))
    done = subprocess.run([sys.executable, "-m", "wmrl.cli.main", "launch", str(config), "--no-submit"], cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    run_dir = tmp_path / "plain"
    assert ("sbatch --nodes=2 --ntasks-per-node=4 --gpus-per-node=4 --cpus-per-task=2 --time=1440 "
            f"--constraint=a100 --exclusive --mem=0 {template_path('coordinator.sbatch')} {run_dir}") in done.stdout
    assert ("sbatch --array=0-1 --gpus-per-node=1 --cpus-per-task=1 --mem=40G --time=240 --constraint=a100 "
            f"{template_path('workers.sbatch')} {run_dir}") in done.stdout


def test_coordinator_template_runs_every_task_of_its_allocation():
    text = (REPO / "slurm" / "templates" / "coordinator.sbatch").read_text()
    assert "--ntasks=1" not in text and "srun $WMRL coordinator" in text


def test_plain_sbatch_lines_ask_for_what_the_submitted_jobs_ask_for(tmp_path):
    """--no-submit's options are submitit's parameters of the same job: a plain sbatch of the templates
    gets the resources `wmrl launch` would have asked for (the array sized by executions_per_gpu)."""
    cfg = dry_config(tmp_path, "same", 1, "launch.executor=slurm", "launch.workers=8", "launch.worker_gpus=1",
                     "launch.executions_per_gpu=2", "launch.array_parallelism=6", "launch.worker_mem_gb=64",
                     "launch.partition=gpu", "launch.account=lab")
    run = make_run(cfg)
    for role in (COORDINATOR, WORKERS):
        submitted = slurm_executor(cfg, run, role).parameters
        printed = dict(o.removeprefix("--").partition("=")[::2] for o in sbatch_command_options(cfg, role))
        for key in ("nodes", "ntasks_per_node", "gpus_per_node", "cpus_per_task", "mem", "time", "partition",
                    "account"):
            if key in submitted:
                assert printed[key.replace("_", "-")] == str(submitted[key]), (role, key)
    # 8 workers at 2 per GPU: 4 tasks; the throttle of 6 is written as 4, as submitit writes it
    assert dict(o.partition("=")[::2] for o in sbatch_command_options(cfg, WORKERS))["--array"] == "0-3%4"


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("launch.nccl_env={PATH: /tmp}", r"launch.nccl_env.PATH='/tmp' is not allowed; names are NCCL_\*"),
        ("launch.coordinator_sbatch=[--ntasks-per-node=8]",
         r"launch.coordinator_sbatch\[0\]='--ntasks-per-node=8' is not allowed: a job's shape comes from"),
        ("launch.worker_sbatch=[--nodes=2]", r"launch.worker_sbatch\[0\]='--nodes=2' is not allowed"),
        ("launch.worker_sbatch=[exclusive]", r"launch.worker_sbatch\[0\]='exclusive' is not allowed; use a long"),
        ("launch.coordinator_tasks_per_node=0", "launch.coordinator_tasks_per_node=0 is out of range"),
    ],
)
def test_bad_launch_shape_keys_are_named_at_load_time(tmp_path, override, message):
    with pytest.raises(ConfigError, match=message):
        dry_config(tmp_path, "bad", 1, override)


def test_nccl_env_is_a_mapping_of_nccl_variables(tmp_path):
    cfg = dry_config(tmp_path, "nccl", 1, "launch.nccl_env={NCCL_SOCKET_IFNAME: ib0, NCCL_IB_HCA: mlx5}")
    assert cfg.launch.nccl_env == {"NCCL_SOCKET_IFNAME": "ib0", "NCCL_IB_HCA": "mlx5"}


def test_several_coordinator_ranks_need_a_trainer_with_a_learner(tmp_path):
    cfg = dry_config(tmp_path, "ranks", 1, "launch.coordinator_tasks_per_node=2")
    with pytest.raises(PreflightError, match=r"\(2 tasks\) are learner ranks, but trainer='dry'"):
        check_learner_ranks(cfg)
    check_learner_ranks(dry_config(tmp_path, "llm", 1, "launch.coordinator_tasks_per_node=2", "trainer=llm"))


def test_several_ranks_take_a_colocated_engine_each_or_a_dedicated_one_but_no_tensor_parallel_colocated(tmp_path):
    ranks = ("launch.coordinator_tasks_per_node=2", "trainer=llm", "generation.backend=vllm")
    check_learner_ranks(dry_config(tmp_path, "coloc", 1, *ranks))  # one engine beside each rank
    check_learner_ranks(dry_config(tmp_path, "dedic", 1, *ranks, "generation.vllm.placement=dedicated",
                                   "generation.vllm.inference_gpus=1"))
    with pytest.raises(PreflightError, match=r"colocated with 2 learner ranks runs one engine beside each rank.*"
                                             r"tensor_parallel_size=2 needs tensor_parallel_size=1"):
        check_learner_ranks(dry_config(tmp_path, "tp", 1, *ranks, "generation.vllm.tensor_parallel_size=2",
                                       "generation.vllm.weight_transfer=nccl"))


@pytest.mark.skipif(shutil.which("scontrol") is None, reason="needs scontrol")
def test_rendezvous_comes_from_the_allocation_the_same_for_every_task():
    node = subprocess.run(["scontrol", "show", "hostnames", "vm[1-3],gpu07"], capture_output=True, text=True,
                          check=True).stdout.split()[0]
    tasks = [slurm_rendezvous({"SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0", "SLURM_PROCID": str(r),
                               "SLURM_NTASKS": "2", "SLURM_LOCALID": str(r), "SLURM_JOB_NODELIST": "vm[1-3],gpu07"})
             for r in range(2)]
    assert [t["RANK"] for t in tasks] == ["0", "1"] and {t["WORLD_SIZE"] for t in tasks} == {"2"}
    assert {t["MASTER_ADDR"] for t in tasks} == {node} == {"vm1"}
    assert len({t["MASTER_PORT"] for t in tasks}) == 1
    assert MASTER_PORT_RANGE[0] <= int(tasks[0]["MASTER_PORT"]) < MASTER_PORT_RANGE[1]
    other = slurm_rendezvous({"SLURM_JOB_ID": "4243", "SLURM_PROCID": "0", "SLURM_NTASKS": "2",
                              "SLURM_JOB_NODELIST": "vm1"})
    assert other["MASTER_PORT"] != tasks[0]["MASTER_PORT"]


def _task_probe() -> dict[str, str]:
    from wmrl.learner.distributed import slurm_rendezvous as rendezvous

    env = dict(os.environ)
    return {"procid": env["SLURM_PROCID"], "ntasks": env["SLURM_NTASKS"], **rendezvous(env)}


@pytest.mark.slurm
@pytest.mark.timeout(240)
def test_a_two_task_coordinator_job_gets_two_tasks_on_the_local_slurm(tmp_path):
    require_slurm()
    cfg = dry_config(tmp_path, "two", 1, "launch.executor=slurm", "launch.coordinator_tasks_per_node=2",
                     "launch.coordinator_cpus=1", "launch.timing.coordinator_time_min=5",
                     "launch.timing.signal_delay_s=30",
                     f"launch.setup=['export PYTHONPATH={REPO}:{REPO / 'tests'}']")  # the probe is this module's
    job = slurm_executor(cfg, make_run(cfg), COORDINATOR).submit(_task_probe)
    try:
        def shown() -> dict[str, str]:
            out = subprocess.run(["scontrol", "show", "job", "-o", str(job.job_id)], capture_output=True, text=True,
                                 check=False).stdout
            return dict(tok.split("=", 1) for tok in out.split() if "=" in tok)

        wait_until("the job to start", lambda: shown().get("JobState") in ("RUNNING", "COMPLETED"), 120)
        fields = shown()
        assert fields["NumTasks"] == "2" and fields["NumNodes"] == "1"
        results = job.results()  # one result per task
    finally:
        cancel_jobs([str(job.job_id)])
    assert sorted(r["procid"] for r in results) == ["0", "1"] and {r["ntasks"] for r in results} == {"2"}
    assert len({(r["MASTER_ADDR"], r["MASTER_PORT"]) for r in results}) == 1


@pytest.mark.slurm
@pytest.mark.timeout(300)
def test_the_9b_configs_jobs_ask_the_local_slurm_with_fake_gpus_for_their_own_resources(tmp_path):
    """configs/qwen3.5-9b.yaml as a user launches it: `--no-submit` prints both jobs' resources, and the
    same jobs submitted (held, so nothing runs) to the local Slurm, whose node has 8 fake GPUs
    (slurm/conf/gres.conf.in), are what `scontrol show job` says: the coordinator 1 node, 7 tasks
    (learner ranks) and 8 GPUs (the 8th vLLM's, generation.vllm.inference_gpus), the worker array 4 tasks
    of one GPU each (8 workers, 2 executions per GPU). Only what the 2-CPU machine cannot have is
    overridden: CPUs per task and host memory."""
    from wmrl.orchestration.launch import submit_run

    require_slurm()
    config = REPO / "configs" / "qwen3.5-9b.yaml"
    image = tmp_path / "sandbox.sif"  # Apptainer cannot run here: the image only has to exist
    image.touch()
    site = [f"runs_root={tmp_path}", "tasks.root=''", f"sandbox.apptainer_image={image}"]
    printed = subprocess.run([sys.executable, "-m", "wmrl.cli.main", "launch", str(config), *site, "--no-submit"],
                             cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
                             timeout=240, check=False)
    assert printed.returncode == 0, printed.stderr
    assert "sbatch --nodes=1 --ntasks-per-node=7 --gpus-per-node=8 --cpus-per-task=8 " in printed.stdout
    assert "sbatch --array=0-3%4 --gpus-per-node=1 --cpus-per-task=16 --mem=102400MB " in printed.stdout

    from wmrl.config import load_config

    cfg = load_config(config, [*site, "run_name=held", "launch.coordinator_cpus=2", "launch.worker_cpus=2",
                               "launch.coordinator_mem_gb=1", "launch.worker_mem_gb=6", "sandbox.threads=1",
                               "sandbox.memory_mb=1024",
                               "launch.coordinator_sbatch=[--hold]", "launch.worker_sbatch=[--hold]"])
    assert cfg.generation.vllm.placement == "dedicated" and cfg.generation.vllm.inference_gpus == 1
    coordinator, workers = submit_run(cfg, make_run(cfg))
    try:
        def shown(job: str) -> dict[str, str]:
            out = subprocess.run(["scontrol", "show", "job", "-o", job], capture_output=True, text=True,
                                 check=True).stdout.splitlines()
            return {**dict(tok.split("=", 1) for tok in out[0].split() if "=" in tok), "records": str(len(out))}

        coord, work = shown(coordinator), shown(workers)
    finally:
        cancel_jobs([coordinator, workers])
    assert (coord["NumNodes"], coord["NumTasks"], coord["TresPerNode"]) == ("1-1", "7", "gres:gpu:8")  # min-max
    assert coord["JobState"] == "PENDING" and "Held" in coord["Reason"]
    assert (work["ArrayTaskId"], work["NumTasks"], work["TresPerNode"]) == ("0-3%4", "1", "gres:gpu:1")
