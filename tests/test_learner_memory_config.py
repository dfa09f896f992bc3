"""The learner's memory keys: validated at load with the key named, and turned into the DeepSpeed
config and the client optimizer DeepSpeed is given (the multi-rank behaviour is in test_learner_zero3.py)."""

from __future__ import annotations

import pytest
import torch

from wmrl.config import load_config
from wmrl.config_checks import ConfigError
from wmrl.learner.config import LearnerConfig
from wmrl.learner.engine import _optimizer, deepspeed_config, reference_config


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["learner.offload_params=true", "learner.zero_stage=2"],
         "learner.offload_params=true needs learner.zero_stage=3 (got 2)"),
        (["learner.offload_optimizer=true", "learner.zero_stage=0"],
         "learner.offload_optimizer=true needs learner.zero_stage 1, 2 or 3 (got 0)"),
        (["learner.grad_accum_dtype=fp16"], "learner.grad_accum_dtype='fp16' is not allowed"),
        (["learner.grad_accum_dtype=bf16"], "learner.grad_accum_dtype=bf16 needs learner.precision=bf16"),
        (["learner.precision=bf16", "learner.zero_stage=0"],
         "learner.grad_accum_dtype=fp32 with learner.precision=bf16 needs learner.zero_stage >= 1"),
        (["learner.weight_sync_bucket_mb=0"], "learner.weight_sync_bucket_mb=0.0 is out of range"),
        (["learner.zero3_persistence_threshold=-1"], "learner.zero3_persistence_threshold=-1 is out of range"),
    ],
)
def test_bad_memory_keys_are_named_at_load_time(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_config(None, overrides)


def test_zero3_with_offload_gives_deepspeed_a_client_optimizer_offload_config() -> None:
    cfg = LearnerConfig(zero_stage=3, offload_optimizer=True, offload_params=True, precision="bf16")
    ds = deepspeed_config(cfg)
    zero = ds["zero_optimization"]
    assert zero["stage"] == 3
    assert zero["offload_optimizer"]["device"] == "cpu" and zero["offload_param"]["device"] == "cpu"
    assert zero["stage3_param_persistence_threshold"] == cfg.zero3_persistence_threshold
    # DeepSpeed refuses a client optimizer under ZeRO-Offload unless this is false (no DeepSpeedCPUAdam JIT)
    assert ds["zero_force_ds_cpu_optimizer"] is False
    assert ds["data_types"] == {"grad_accum_dtype": "fp32"} and ds["bf16"] == {"enabled": True}
    ref = reference_config(cfg)
    assert ref["zero_optimization"]["stage"] == 3 and ref["zero_optimization"]["offload_param"]["device"] == "cpu"
    assert "optimizer" not in ref


def test_below_zero3_nothing_is_offloaded_or_partitioned() -> None:
    zero = deepspeed_config(LearnerConfig(zero_stage=2))["zero_optimization"]
    assert zero == {"stage": 2}


def test_adamw_is_fused_where_torch_has_the_kernel_and_never_foreach() -> None:
    params = [torch.nn.Parameter(torch.zeros(3))]
    on_host = _optimizer(LearnerConfig(), params, "cpu")  # torch >= 2.4 has a fused CPU AdamW
    assert on_host.defaults["fused"] is True
    elsewhere = _optimizer(LearnerConfig(), params, "no-such-device")
    assert not elsewhere.defaults["fused"] and elsewhere.defaults["foreach"] is False
