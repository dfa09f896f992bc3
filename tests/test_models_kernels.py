"""Which kernels a model's layers run: read back from transformers' own choice, warned on the slow path."""

from __future__ import annotations

import logging
import sys
import types

import pytest
import torch

from wmrl.models.kernels import _implementation, kernel_report, log_kernels


def tiny_qwen35():
    """A random-init Qwen3.5 text model: 3 Gated DeltaNet layers, 1 full-attention layer (the paper's ratio)."""
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    config = Qwen3_5TextConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                               num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                               linear_num_key_heads=2, linear_num_value_heads=2, linear_key_head_dim=8,
                               linear_value_head_dim=8)
    torch.manual_seed(0)
    return Qwen3_5ForCausalLM(config)


def test_qwen35_without_the_kernel_packages_reports_the_pytorch_fallback_and_warns(caplog):
    pytest.importorskip("transformers.models.qwen3_5")
    if "fla" in sys.modules or "causal_conv1d" in sys.modules:
        # Only in the gpu extra's environment (the image); the CPU install and CI never have them, and the
        # case with the kernels is the GPU smoke's (scripts/gpu_smoke.sh logs which kernels load).
        pytest.skip("the kernel packages are installed here")
    model = tiny_qwen35()
    with caplog.at_level(logging.INFO, logger="wmrl.models.kernels"):
        report = log_kernels(model)
    assert report.layer_types == {"linear_attention": 3, "full_attention": 1}
    assert report.linear_attention == {
        "torch_chunk_gated_delta_rule": "pytorch:flash-linear-attention",
        "torch_recurrent_gated_delta_rule": "pytorch:flash-linear-attention",
        "causal_conv1d_fn": "pytorch:causal-conv1d", "causal_conv1d_update": "pytorch:causal-conv1d"}
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "3 linear-attention layer(s)" in warnings[0]
    assert "causal-conv1d and flash-linear-attention" in warnings[0]
    info = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert any("attention=" in m and "1 full_attention, 3 linear_attention" in m for m in info)


def test_a_pure_attention_model_has_no_linear_attention_entries_and_no_warning(caplog):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    model = Qwen3ForCausalLM(Qwen3Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=2, num_key_value_heads=1, head_dim=16))
    with caplog.at_level(logging.INFO, logger="wmrl.models.kernels"):
        report = log_kernels(model)
    assert report.linear_attention == {} and report.warning() is None
    assert report.attention == model.config._attn_implementation
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_function_transformers_bound_to_an_installed_package_reports_that_package(monkeypatch):
    """transformers' own decorator, given an importable ``causal_conv1d`` (a stand-in module), binds it:
    the report names the package, not the fallback."""
    from transformers.integrations.hub_kernels import use_kernel_func_from_hub_with_fallback

    def kernel(x, weight, bias=None, activation=None):
        return x

    monkeypatch.setitem(sys.modules, "causal_conv1d", types.SimpleNamespace(causal_conv1d_fn=kernel))

    @use_kernel_func_from_hub_with_fallback("causal_conv1d_fn", "causal_conv1d")
    def causal_conv1d_fn(x, weight, bias=None, activation=None):
        return x * 0

    assert _implementation(causal_conv1d_fn) == "causal_conv1d"
    assert causal_conv1d_fn(torch.ones(2), None).sum() == 2  # it really calls the package's function
    assert _implementation(len) == "unknown"


def test_a_report_with_every_kernel_installed_does_not_warn():
    report = kernel_report(tiny_qwen35())
    report.linear_attention = dict.fromkeys(report.linear_attention, "fla")
    assert report.warning() is None and "torch_chunk_gated_delta_rule=fla" in report.summary()
