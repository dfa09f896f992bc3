"""``wmrl plan``: the shipped Qwen3.5 architectures, model states equal to DeepSpeed's own estimators, the
shipped cluster configs fit one node of 8 x A100-80GB, today's one-GPU one-rank layout is refused with
its reason and the keys that fix it, and the learner-phase figure matches a measured CPU peak."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from wmrl.cli.main import main as wmrl_main
from wmrl.config import ConfigError, load_config
from wmrl.models.architecture import SHIPPED, architecture_path, load_text_config, parameter_counts
from wmrl.planning.memory import LOSS_HEAD_BYTES, loss_head_bytes, model_states, plan
from wmrl.slurm.preflight import PreflightError, check_memory_plan

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = {"qwen3.5-4b": ROOT / "configs" / "qwen3.5-4b.yaml", "qwen3.5-9b": ROOT / "configs" / "qwen3.5-9b.yaml"}
ONE_GPU_TODAY = ["launch.coordinator_gpus=1", "launch.coordinator_tasks_per_node=1", "learner.zero_stage=2",
                 "generation.vllm.placement=colocated", "generation.vllm.inference_gpus=0",
                 "generation.vllm.weight_transfer=ipc", "generation.vllm.gpu_memory_utilization=0.3"]
CHECK = ROOT / "scripts" / "gpu_check.py"


@pytest.fixture(scope="module")
def counts():
    return {name: parameter_counts(load_text_config(architecture_path(name))) for name in SHIPPED}


def _plan_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = wmrl_main(["plan", *argv])
    return code, capsys.readouterr().out


# --------------------------------------------------------------------------- architectures


@pytest.mark.parametrize(("name", "billions", "tied"), [("qwen3.5-4b", 4.20, True), ("qwen3.5-9b", 8.95, False)])
def test_shipped_architectures_have_the_published_text_parameter_counts(counts, name, billions, tied):
    c = counts[name]
    assert abs(c.total / 1e9 - billions) < 0.01
    assert c.vocab_size == 248_320 and c.num_layers == 32
    config = load_text_config(architecture_path(name))
    assert config.layer_types.count("linear_attention") == 3 * config.layer_types.count("full_attention")
    assert config.tie_word_embeddings is tied
    assert type(config).__name__ == "Qwen3_5TextConfig"


def test_model_architecture_is_validated_and_accepts_a_config_json_path(tmp_path):
    with pytest.raises(ConfigError, match=r"model.architecture='qwen3.5-7b'.*qwen3.5-4b, qwen3.5-9b"):
        load_config(None, ["model.architecture=qwen3.5-7b"])
    path = architecture_path("qwen3.5-9b")
    assert load_config(None, [f"model.architecture={path}"]).model.architecture == str(path)
    assert load_config(None, [f"model.architecture={path.parent}"]).model.architecture == str(path.parent)


@pytest.mark.parametrize(("override", "message"), [
    ("learner.offload_params=true", "learner.offload_params=true needs learner.zero_stage=3"),
    ("learner.grad_accum_dtype=fp16", "learner.grad_accum_dtype='fp16'"),
    ("learner.loss_chunk_tokens=0", "learner.loss_chunk_tokens=0"),
    ("launch.coordinator_nodes=0", "launch.coordinator_nodes=0"),
    ("launch.coordinator_tasks_per_node=0", "launch.coordinator_tasks_per_node=0"),
    ("generation.vllm.placement=remote", "generation.vllm.placement='remote'"),
    ("generation.vllm.sleep_level=3", "generation.vllm.sleep_level=3"),
    ("generation.vllm.placement=dedicated", "generation.vllm.placement=dedicated needs generation.vllm.inference_gpus"),
])
def test_new_keys_are_validated_with_the_key_and_value(override, message):
    with pytest.raises(ConfigError, match=message.replace(".", r"\.").replace("(", r"\(")):
        load_config(None, [override])


# --------------------------------------------------------------------------- DeepSpeed's estimators


# DeepSpeed offloads parameters under ZeRO-3 only: (stage, offload_optimizer, offload_params)
ZERO_SETTINGS = [(stage, opt, params) for stage in (1, 2, 3) for opt, params in ((False, False), (True, False), (True, True))
                 if stage == 3 or not params]


@pytest.mark.parametrize(("stage", "offload_optimizer", "offload_params"), ZERO_SETTINGS)
@pytest.mark.parametrize(("ranks_per_node", "nodes"), [(1, 1), (8, 1), (4, 2)])
def test_model_states_equal_deepspeeds_estimators(counts, stage, offload_optimizer, offload_params, ranks_per_node, nodes):
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    c = counts["qwen3.5-9b"]
    states, host, _ = model_states(c.total, c.largest_layer, ranks_per_node, nodes, stage, "bf16", "adamw",
                                   offload_optimizer, offload_params)
    if stage == 3:
        cpu, gpu, _ = estimate_zero3_model_states_mem_needs(
            c.total, c.largest_layer, ranks_per_node, nodes, offload_optimizer, offload_params, zero_init=True)
    else:
        cpu, gpu = estimate_zero2_model_states_mem_needs(c.total, ranks_per_node, nodes, offload_optimizer)
    assert sum(states.values()) == gpu and host == cpu
    assert min(states.values()) >= 0


def test_the_shipped_plans_model_states_are_deepspeeds(counts):
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs

    cfg = load_config(CONFIGS["qwen3.5-9b"])
    p = plan(cfg, counts["qwen3.5-9b"])
    c = counts["qwen3.5-9b"]
    cpu, gpu, _ = estimate_zero3_model_states_mem_needs(c.total, c.largest_layer, num_gpus_per_node=cfg.launch.coordinator_tasks_per_node, num_nodes=1,
                                                        cpu_offload=False, cpu_offload_params=False)
    learner = p.learner.gpu
    assert learner["weights"] + learner["gradients"] + learner["optimizer_state"] == gpu
    assert p.learner.host["model_states"] == cpu


# --------------------------------------------------------------------------- the shipped configs


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_configs_fit_one_node_of_8_a100_80gb(capsys, name):
    code, out = _plan_cli(capsys, str(CONFIGS[name]), "--json")
    result = json.loads(out)
    assert code == 0 and result["fits"] is True, result["problems"]
    assert result["gpu_memory_gb"] == 80.0 and result["learner_ranks"] == 7 and result["gpus"] == 8
    assert abs(result["parameters"] / 1e9 - {"qwen3.5-4b": 4.20, "qwen3.5-9b": 8.95}[name]) < 0.01
    for phase in ("learner", "generation"):
        figures = result["phases"][phase]
        assert 0 < figures["total_gb"] <= 0.9 * 80
        assert figures["total_gb"] == pytest.approx(sum(figures["components"].values()), abs=0.1)
    assert {"weights", "gradients", "optimizer_state", "reference", "activations", "loss_head"} <= set(
        result["phases"]["learner"]["components"])
    assert {"generator_weights", "kv_cache"} <= set(result["phases"]["generation"]["components"])
    assert result["phases"]["generation"]["kv_cache_needed_gb"] <= result["phases"]["generation"]["components"]["kv_cache"]
    assert result["checkpoint"]["size_gb"] > 0


@pytest.mark.parametrize("name", SHIPPED)
def test_todays_one_gpu_one_rank_layout_is_refused_with_the_reason_and_the_fix(capsys, name):
    code, out = _plan_cli(capsys, str(CONFIGS[name]), *ONE_GPU_TODAY)
    assert code == 2
    assert "DOES NOT FIT: learner phase needs" in out and "optimizer_state" in out
    # the fix keeps the placement: 8 ranks, each with its colocated engine (data-parallel generation)
    assert "would fit with:" in out and "launch.coordinator_tasks_per_node=8" in out


def test_the_4_gpu_layout_fits_4b_and_needs_optimizer_offload_at_9b(counts):
    four = ["launch.coordinator_gpus=4", "launch.coordinator_tasks_per_node=3"]
    assert plan(load_config(CONFIGS["qwen3.5-4b"], four), counts["qwen3.5-4b"]).fits
    refused = plan(load_config(CONFIGS["qwen3.5-9b"], four), counts["qwen3.5-9b"])
    assert not refused.fits and "learner phase" in refused.problems[0]
    assert plan(load_config(CONFIGS["qwen3.5-9b"], [*four, "learner.offload_optimizer=true"]), counts["qwen3.5-9b"]).fits


def test_dedicated_placement_gives_its_gpus_to_vllm_and_the_rest_to_the_learner(counts):
    cfg = load_config(CONFIGS["qwen3.5-9b"], [
        "generation.vllm.placement=dedicated", "generation.vllm.inference_gpus=2", "launch.coordinator_tasks_per_node=6",
        "generation.vllm.weight_transfer=nccl", "generation.vllm.gpu_memory_utilization=0.9"])
    p = plan(cfg, counts["qwen3.5-9b"])
    assert p.learner_ranks == 6 and p.engines == 2 and p.fits
    assert "generator_asleep" not in p.learner.gpu and "learner_asleep" not in p.generation.gpu
    # 32 trajectories per engine at 24k tokens: 8 full-attention layers x 2 x 4 KV heads x 256 x 2 bytes a token
    assert p.kv_cache_needed >= 32 * 24576 * 32768


@pytest.mark.parametrize("name", SHIPPED)
def test_colocated_placement_puts_an_engine_beside_every_rank_and_fits_8_gpus(counts, name):
    """One vLLM engine per learner rank (data-parallel generation): 8 engines for 8 ranks, each with an
    eighth of the step's trajectories in its KV cache, and the learners' states in host memory meanwhile."""
    colocated = ["generation.vllm.placement=colocated", "generation.vllm.inference_gpus=0",
                 "launch.coordinator_tasks_per_node=8", "generation.vllm.gpu_memory_utilization=0.4"]
    p = plan(load_config(CONFIGS[name], colocated), counts[name])
    assert p.fits, p.problems
    assert p.learner_ranks == 8 and p.engines == 8
    assert "generator_asleep" in p.learner.gpu and "learner_asleep" in p.generation.gpu
    assert "learner_states_offloaded" in p.generation.host
    # 8 trajectories per engine, not 64: a quarter of the KV cache a 2-engine layout would need
    two = plan(load_config(CONFIGS[name], [*colocated[:2], "launch.coordinator_tasks_per_node=2",
                                           "generation.vllm.gpu_memory_utilization=0.4"]), counts[name])
    assert p.kv_cache_needed * 4 == two.kv_cache_needed
    tensor_parallel = plan(load_config(CONFIGS[name], [*colocated, "generation.vllm.tensor_parallel_size=2",
                                                       "generation.vllm.weight_transfer=nccl"]), counts[name])
    assert any("tensor_parallel_size=2 needs to be 1" in problem for problem in tensor_parallel.problems)


@pytest.mark.parametrize("name", SHIPPED)
def test_the_learner_phase_counts_deepspeeds_gradient_bucket_and_the_measured_loss_head(counts, name):
    """Issue 34, item 9: ZeRO-3 allocates its reduce bucket whole on the GPU (reduce_bucket_size bf16
    elements, ~0.93 GiB), and the loss head is the measured-per-element figure of loss_head_bytes (chunk x
    vocabulary x 10 bytes in bf16, not 20, plus the vocabulary matrix's gradient)."""
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    c = counts[name]
    p = plan(load_config(CONFIGS[name]), c)
    assert p.learner.gpu["gradient_bucket"] == DeepSpeedZeroConfig().reduce_bucket_size * 2
    assert LOSS_HEAD_BYTES["bf16"] == 10
    assert p.learner.gpu["loss_head"] == loss_head_bytes(2048, 16384, c.vocab_size, c.hidden_size, "bf16")
    assert p.learner.gpu["loss_head"] > 2048 * c.vocab_size * 10 + c.vocab_size * c.hidden_size * 2
    cpu = plan(load_config(CONFIGS[name], ["launch.coordinator_gpus=0", "launch.coordinator_tasks_per_node=1",
                                           "generation.backend=transformers"]), c)
    assert "gradient_bucket" not in cpu.learner.gpu  # allocated but never touched on a CPU


def test_the_colocated_learners_pinned_host_buffers_stay_in_host_memory_while_it_trains(counts):
    """DeepSpeed's offload_states keeps its page-locked host buffers after reload_states (freed by destroy()):
    the learner phase's host memory holds them too, not only the generation phase's."""
    colocated = ["generation.vllm.placement=colocated", "generation.vllm.inference_gpus=0",
                 "launch.coordinator_tasks_per_node=8", "generation.vllm.gpu_memory_utilization=0.4"]
    p = plan(load_config(CONFIGS["qwen3.5-4b"], colocated), counts["qwen3.5-4b"])
    states = sum(p.learner.gpu[k] for k in ("weights", "gradients", "optimizer_state"))
    assert p.learner.host["learner_states_pinned"] == 8 * states
    assert p.generation.host["learner_states_offloaded"] >= p.learner.host["learner_states_pinned"]
    dedicated = plan(load_config(CONFIGS["qwen3.5-4b"]), counts["qwen3.5-4b"])
    assert "learner_states_pinned" not in dedicated.learner.host


def test_launch_preflight_refuses_a_layout_that_does_not_fit():
    cfg = load_config(CONFIGS["qwen3.5-4b"], ONE_GPU_TODAY)
    with pytest.raises(PreflightError, match="does not fit its allocation.*would fit with"):
        check_memory_plan(cfg)
    check_memory_plan(load_config(CONFIGS["qwen3.5-4b"]))  # the shipped layout passes


# --------------------------------------------------------------------------- measured on CPU


def _check(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="2")
    return subprocess.run([sys.executable, str(CHECK), "--cpu-dry-run", "--no-probes", "--out", str(tmp_path / "out"),
                           *args], capture_output=True, text=True, env=env, timeout=600, cwd=ROOT, check=False)


def test_learner_phase_prediction_is_within_25_percent_of_the_measured_cpu_peak(tmp_path):
    """One real learner update (DeepSpeed ZeRO-2 on CPU, fp32, gradient checkpointing, KL reference) of a
    27M-parameter pure-attention model (a config.json given as model.architecture) at 1024 tokens, in a
    fresh process (scripts/gpu_check.py's CPU path): peak resident memory above the resident set just
    before the learner is built, against the plan's learner phase for the same layout
    (launch.coordinator_gpus=0)."""
    from transformers import Qwen3Config

    Qwen3Config(vocab_size=1024, hidden_size=768, intermediate_size=2048, num_hidden_layers=4, num_attention_heads=12,
                num_key_value_heads=4, head_dim=64, tie_word_embeddings=False, pad_token_id=0).save_pretrained(tmp_path)
    done = _check(tmp_path, "--dims", "", "--layers", "4", "--tokens", "1024", "learner.precision=fp32",
                  "learner.zero_stage=2", "learner.gradient_checkpointing=true",
                  f"model.architecture={tmp_path / 'config.json'}")
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((tmp_path / "out" / "result.json").read_text())
    assert result["parameters"] > 20e6 and result["measured_peak_gb"] > 0.5
    assert 0.75 <= result["measured_over_planned"] <= 1.25, result
