"""Which attention and linear-attention kernels a loaded model's layers run, and a warning on the slow path.

Qwen3.5 (the paper's 4B/9B) interleaves Gated DeltaNet (linear attention) layers with full-attention
layers, 3 : 1. transformers' ``modeling_qwen3_5`` picks each Gated DeltaNet function once, when the
module is imported (``transformers.integrations.hub_kernels.use_kernel_func_from_hub_with_fallback``):
a kernel from the hub when ``kernels`` is installed and allowed (never here: wmrl runs offline), else the
installed package (``fla`` = flash-linear-attention for the delta rule, ``causal_conv1d``), else the
reference PyTorch function, in float32 chunks and many times slower. The choice lives in each wrapped
function's closure (``implementation`` vs ``torch_function``); this module reads it back instead of
guessing from what is importable, so what it reports is what the layers call. Full-attention layers use
``config._attn_implementation`` (``sdpa``, ``flash_attention_2``, ``eager``).
"""

from __future__ import annotations

import inspect
import logging
import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

# The functions a Gated DeltaNet layer calls, by the name transformers gives them in its modeling module.
LINEAR_ATTENTION_FUNCTIONS = ("torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule",
                              "causal_conv1d_fn", "causal_conv1d_update")
# The pip distribution that provides each kernel package (what to install on the slow path).
DISTRIBUTIONS = {"fla": "flash-linear-attention", "causal_conv1d": "causal-conv1d"}
REFERENCE = "pytorch"


@dataclass
class KernelReport:
    """The kernels of one model: attention implementation, layer counts and each linear-attention function's."""

    attention: str
    layer_types: dict[str, int] = field(default_factory=dict)
    linear_attention: dict[str, str] = field(default_factory=dict)  # function -> package, or "pytorch"

    @property
    def slow(self) -> dict[str, str]:
        """The functions on the reference PyTorch path, each with the distribution that would replace it."""
        return {name: impl.split(":", 1)[1] for name, impl in self.linear_attention.items()
                if impl.startswith(REFERENCE + ":")}

    def summary(self) -> str:
        layers = ", ".join(f"{n} {kind}" for kind, n in sorted(self.layer_types.items())) or "no layer_types"
        kernels = ", ".join(f"{name}={impl.split(':', 1)[0]}" for name, impl in self.linear_attention.items())
        return f"attention={self.attention} ({layers})" + (f"; linear attention: {kernels}" if kernels else "")

    def warning(self) -> str | None:
        """A warning when linear-attention layers run the reference PyTorch code, naming what to install."""
        if not self.slow:
            return None
        missing = sorted(set(self.slow.values()))
        linear = self.layer_types.get("linear_attention", 0)
        return (f"{linear} linear-attention layer(s) run the slow reference PyTorch code for "
                f"{', '.join(sorted(self.slow))}: install {' and '.join(missing)} (the `gpu` extra: "
                "pip install 'wmrl[gpu]'; containers/learner.def has them)")


def _implementation(function: Any) -> str:
    """``package`` when the wrapped function calls a kernel package, ``pytorch:<distribution>`` when it
    falls back, ``unknown`` when transformers wrapped it in a way this reader does not know."""
    try:
        cells = inspect.getclosurevars(function).nonlocals
    except TypeError:
        return "unknown"
    if "is_new_implementation" not in cells or "package" not in cells:
        return "unknown"
    package = str(cells["package"])
    if cells["is_new_implementation"]:
        return package
    return f"{REFERENCE}:{DISTRIBUTIONS.get(package, package)}"


def kernel_report(model: Any) -> KernelReport:
    """The kernels ``model`` (a transformers causal LM) runs; linear-attention entries only when it has
    such layers (found by the modeling module of its classes that defines the Gated DeltaNet functions)."""
    config = getattr(model, "config", None)
    attention = str(getattr(config, "_attn_implementation", None) or "unknown")
    layer_types = dict(Counter(getattr(config, "layer_types", None) or []))
    linear: dict[str, str] = {}
    if layer_types.get("linear_attention"):
        modules = {type(m).__module__ for m in model.modules()}
        for module_name in sorted(modules):
            module = sys.modules.get(module_name)
            found = {name: getattr(module, name) for name in LINEAR_ATTENTION_FUNCTIONS if hasattr(module, name)}
            if found:
                linear = {name: _implementation(fn) for name, fn in found.items()}
                break
    return KernelReport(attention, layer_types, linear)


def log_kernels(model: Any, log: logging.Logger | None = None) -> KernelReport:
    """Log the kernels ``model`` runs (start-up of a trainer); a warning when any layer is on the slow path."""
    log = log or logging.getLogger(__name__)
    report = kernel_report(model)
    log.info("policy kernels: %s", report.summary())
    if (warning := report.warning()) is not None:
        log.warning(warning)
    return report
