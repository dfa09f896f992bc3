"""``wmrl plan``: the memory a config needs per GPU and per node, before a GPU is requested.

Two phases alternate on the coordinator's GPUs, and each must fit:

- **learner**: the DeepSpeed update of one micro-batch on one learner rank: model states (weights,
  gradients, optimizer state), the frozen reference, activations, the chunked loss head, the CUDA
  runtime and, colocated, the sleeping vLLM engine;
- **generation**: a vLLM engine (colocated: on every learner GPU, with the learner's states offloaded
  to the host; dedicated: on ``generation.vllm.inference_gpus`` GPUs of its own): its weights, its
  KV-cache pool (``gpu_memory_utilization`` x the GPU, less weights and runtime) and the KV cache the
  step's trajectories need at ``max_model_len``.

Model states are DeepSpeed's own estimates (``estimate_zero2_model_states_mem_needs`` /
``estimate_zero3_model_states_mem_needs``, called here for 16-bit precision with AdamW; their GPU
figure split into weights, gradients and optimizer state as their comments count them: 2 bytes 16-bit
weights, 2 + 4 gradients, 4 fp32 master + 8 Adam moments). fp32 precision and SGD, which DeepSpeed's
estimators do not cover, use the same accounting with 4-byte weights and no moments. Parameter counts
come from a meta-device build of the model's config.json (no weights are read). Sizes are GiB
(2**30 bytes), as DeepSpeed's estimators and ``nvidia-smi`` (an "80GB" A100 has 80 GiB) count them.

The activation term is an estimate; ``tests/test_planning.py`` checks the learner phase against a
measured CPU peak (within 25%). The loss head's bytes are checked against a CPU measurement of the same
code (``scripts/measure_loss_head.py``, tests/test_loss_head_memory.py, within ``LOSS_HEAD_MARGIN``), and
``scripts/gpu_check.sh`` prints measured against planned on one GPU.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wmrl.config import WMRLConfig
from wmrl.config_checks import ConfigError
from wmrl.models.architecture import (
    SHIPPED,
    ParameterCounts,
    architecture_path,
    load_text_config,
    parameter_counts,
)

GIB = 2**30
# A phase fits when it needs at most this share of the GPU: the allocator's fragmentation and the
# estimates' error (activations, loss head: within 25% on CPU, tests/test_planning.py) need room.
HEADROOM = 0.9
# The CUDA context, NCCL buffers and allocator slack of one process on a GPU (learner or vLLM).
RUNTIME_BYTES = 2 * GIB
# Host memory of one process beside its tensors (Python, torch, DeepSpeed / vLLM, CUDA host state).
PROCESS_HOST_BYTES = 4 * GIB
# Values one decoder layer keeps per token for its backward, in units of the compute dtype: the norms'
# outputs, q/k/v, the attention output and its gate, the residual stream (~10 h) and the SwiGLU MLP's
# gate, up, activation and product (4 I). With gradient checkpointing only the layer's input (h) is
# kept per layer, and one layer's worth is recomputed at a time.
LAYER_VALUES_H, LAYER_VALUES_I = 10, 4
# Bytes per (position, vocabulary entry) of one chunk of the loss head at its peak (wmrl/learner/head.py,
# _TokenLogProbs): bf16: the chunk's logits (2), their fp32 copy (4) and the fp32 log-softmax (4), then the
# logits, the log-softmax and its exp; fp32: the logits are the fp32 copy, so 4 + 4 + 4. The backward
# holds as much (the recomputed logits, the gradient buffer, the probabilities). Measured on CPU by
# scripts/measure_loss_head.py: 10.0-10.2 (bf16) and 12.0-12.3 (fp32) bytes (tests/test_loss_head_memory.py).
LOSS_HEAD_BYTES = {"bf16": 2 + 4 + 4, "fp32": 4 + 4 + 4}
# The plan's loss head is checked to be at least the measured peak and at most this much above it.
LOSS_HEAD_MARGIN = 0.10
DTYPE_BYTES = {"bf16": 2, "fp32": 4}
HOST_PROBLEM = "host memory per node"
VLLM_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "auto": 2}


@dataclass
class Phase:
    """Memory of one phase: per GPU (components, bytes) and per node in host memory."""

    gpu: dict[str, int]
    host: dict[str, int]
    gpu_role: str  # which GPU the figures are for

    @property
    def gpu_total(self) -> int:
        return sum(self.gpu.values())

    @property
    def host_total(self) -> int:
        return sum(self.host.values())

    def as_json(self) -> dict[str, Any]:
        return {
            "gpu": self.gpu_role,
            "total_gb": _gb(self.gpu_total),
            "components": {k: _gb(v) for k, v in self.gpu.items()},
            "host_total_gb": _gb(self.host_total),
            "host_components": {k: _gb(v) for k, v in self.host.items()},
        }


@dataclass
class Plan:
    model: str
    counts: ParameterCounts
    gpu_memory: int | None  # None: the learner runs on CPU (launch.coordinator_gpus=0)
    host_memory: int | None  # None: launch.coordinator_mem_gb not requested
    nodes: int
    gpus: int  # in the coordinator's allocation, all nodes
    learner_ranks: int
    placement: str
    engines: int  # vLLM engines (0: no vLLM)
    tokens: int  # one trajectory, prompt to last turn
    generated: int  # of which generated
    trajectories: int  # per step
    learner: Phase
    generation: Phase | None
    kv_cache_needed: int = 0
    checkpoint: dict[str, Any] = field(default_factory=dict)
    deepspeed: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    fixes: list[str] = field(default_factory=list)

    @property
    def fits(self) -> bool:
        return not self.problems

    def as_json(self) -> dict[str, Any]:
        phases = {"learner": self.learner.as_json()}
        if self.generation is not None:
            phases["generation"] = self.generation.as_json() | {"kv_cache_needed_gb": _gb(self.kv_cache_needed)}
        return {
            "fits": self.fits,
            "gpu_memory_gb": None if self.gpu_memory is None else _gb(self.gpu_memory),
            "host_memory_gb": None if self.host_memory is None else _gb(self.host_memory),
            "model": self.model,
            "parameters": self.counts.total,
            "largest_layer_parameters": self.counts.largest_layer,
            "nodes": self.nodes,
            "gpus": self.gpus,
            "learner_ranks": self.learner_ranks,
            "placement": self.placement,
            "vllm_engines": self.engines,
            "trajectory_tokens": self.tokens,
            "generated_tokens": self.generated,
            "trajectories_per_step": self.trajectories,
            "phases": phases,
            "deepspeed_estimate": self.deepspeed,
            "checkpoint": self.checkpoint,
            "problems": self.problems,
            "fixes": self.fixes,
            "notes": self.notes,
        }


def _gb(n: float) -> float:
    return round(n / GIB, 2)


# --------------------------------------------------------------------------- the model


def model_config_source(cfg: WMRLConfig) -> str:
    """Where the dimensions come from: model.architecture, else model.path's config.json, else the tiny
    default (model.path empty); a ConfigError when none is readable here."""
    if cfg.model.architecture:
        return str(architecture_path(cfg.model.architecture))
    if not cfg.model.path:
        return "model.tiny"
    config_json = Path(cfg.model.path).expanduser() / "config.json"
    if not config_json.is_file():
        raise ConfigError(f"model.path={cfg.model.path!r} has no config.json on this machine, so `wmrl plan` cannot "
                          "count its parameters; set model.architecture to a shipped architecture "
                          "(qwen3.5-4b, qwen3.5-9b) or to a copy of the checkpoint's config.json")
    return str(config_json)


def model_counts(cfg: WMRLConfig) -> tuple[str, ParameterCounts]:
    source = model_config_source(cfg)
    if source == "model.tiny":
        from transformers import Qwen3Config

        tiny = cfg.model.tiny
        config = Qwen3Config(
            vocab_size=tiny.vocab_size, hidden_size=tiny.hidden_size, num_hidden_layers=tiny.num_layers,
            num_attention_heads=tiny.num_heads, num_key_value_heads=tiny.num_kv_heads, head_dim=tiny.head_dim,
            intermediate_size=tiny.intermediate_size, tie_word_embeddings=tiny.tie_word_embeddings,
        )
    else:
        config = load_text_config(source)
    shipped = cfg.model.architecture in SHIPPED
    return (f"model.architecture={cfg.model.architecture}" if shipped else source), parameter_counts(config)


# --------------------------------------------------------------------------- model states (DeepSpeed)


def model_states(
    n: int, largest: int, ranks_per_node: int, nodes: int, stage: int, precision: str, optimizer: str,
    offload_optimizer: bool, offload_params: bool,
) -> tuple[dict[str, int], int, dict[str, Any]]:
    """Per-GPU model states by component, host bytes per node, and DeepSpeed's own estimate.

    Per parameter, on ``g`` ranks: weights ``p`` bytes (2 in 16-bit, 4 in fp32; ZeRO-3: ``p/g`` plus the
    gathered largest layer), gradients 4 bytes fp32 (+ ``p`` for the gradients autograd produces, which
    DeepSpeed copies into its buckets, below ZeRO-3; ZeRO-3: the largest layer's ``p``), optimizer state 12 bytes (fp32 master + two Adam moments), all divided by
    ``g`` from stage 1 (stage 0 = one rank's worth); offloaded parts are in host memory. For 16-bit with
    AdamW this is exactly DeepSpeed's estimator (stage_1_and_2's for stages 0-2, stage3's for stage 3),
    whose GPU figure the components sum to. fp32 at stage 0 keeps no master copy (the client optimizer
    updates the weights themselves); SGD keeps no moments.
    """
    p = DTYPE_BYTES[precision]
    g = ranks_per_node * nodes if stage > 0 else 1
    if stage == 3:
        from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs

        cpu, gpu, _ = estimate_zero3_model_states_mem_needs(
            n, largest, num_gpus_per_node=ranks_per_node, num_nodes=nodes, cpu_offload=offload_optimizer,
            cpu_offload_params=offload_params, zero_init=True)
        estimator = "estimate_zero3_model_states_mem_needs"
        weights = p * largest + (0 if offload_params else int(p * n / g))
        grads = p * largest + (0 if offload_optimizer else int(4 * n / g))
    else:
        from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

        per_node, n_nodes = (ranks_per_node, nodes) if stage > 0 else (1, 1)
        cpu, gpu = estimate_zero2_model_states_mem_needs(
            n, num_gpus_per_node=per_node, num_nodes=n_nodes, cpu_offload=offload_optimizer)
        estimator = "estimate_zero2_model_states_mem_needs"
        weights = p * n
        grads = 0 if offload_optimizer else int((4 + p) * n / g)
    optim = 0 if offload_optimizer else int(12 * n / g)
    if p == 2 and optimizer == "adamw":
        optim = gpu - weights - grads  # DeepSpeed's figure to the byte (its own rounding)
    elif not offload_optimizer:
        if stage == 0 and p == 4:
            optim -= 4 * n  # no fp32 master copy beside fp32 weights
        if optimizer == "sgd":
            optim -= int(8 * n / g)
    if optimizer == "sgd" and offload_optimizer:
        cpu -= int(8 * n / nodes * 1.5)
    deepspeed = {"function": estimator, "gpu_gb": _gb(gpu), "cpu_gb_per_node": _gb(cpu),
                 "gpu_bytes": gpu, "cpu_bytes_per_node": cpu}
    return {"weights": weights, "gradients": grads, "optimizer_state": optim}, cpu, deepspeed


# --------------------------------------------------------------------------- transient buffers


def loss_head_bytes(chunk: int, positions: int, vocab: int, hidden: int, precision: str) -> int:
    """Peak bytes of the chunked loss head's forward + backward (wmrl/learner/head.py), beyond the weights.

    - a chunk's buffers: ``chunk x vocab x LOSS_HEAD_BYTES``, beside the running sum of the head weight's
      gradient (``vocab x hidden``: the gathered vocabulary matrix's gradient, one per chunk, summed by
      autograd over the chunks before ZeRO's hook takes it);
    - or, while a chunk's gradient is added to that sum: three such matrices (the sum, the new one and
      their sum: the matmul's weight gradient is a transposed view, which autograd's InputBuffer does not
      accumulate in place) beside the chunk's logits gradient in the compute dtype;
    - the hidden states at the loss positions and their gradient.

    Checked against a CPU measurement of the same code in both regimes (scripts/measure_loss_head.py,
    within ``LOSS_HEAD_MARGIN`` above it).
    """
    b = DTYPE_BYTES[precision]
    matrix = vocab * hidden * b
    chunk_peak = chunk * vocab * LOSS_HEAD_BYTES[precision] + matrix
    accumulate_peak = 3 * matrix + chunk * vocab * b
    return max(chunk_peak, accumulate_peak) + 2 * positions * hidden * b


def gradient_bucket_bytes(stage: int, precision: str, grad_accum_dtype: str) -> int:
    """DeepSpeed's contiguous gradient bucket on the GPU: ``reduce_bucket_size`` elements (DeepSpeed's
    default: wmrl does not set it), allocated whole whatever the model's size (stage3.py: one per
    communication dtype, the compute dtype; stage_1_and_2.py ``setup_buckets``: fp32 at ZeRO-1 with fp32
    accumulation of 16-bit gradients, else the compute dtype; overlap_comm, which doubles it below
    ZeRO-3, is off there by default). 0 without ZeRO."""
    if stage == 0:
        return 0
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    elements = DeepSpeedZeroConfig().reduce_bucket_size
    separate_fp32 = stage == 1 and precision == "bf16" and grad_accum_dtype == "fp32"
    return elements * (4 if separate_fp32 else DTYPE_BYTES[precision])


# --------------------------------------------------------------------------- the plan


def _trajectory_tokens(cfg: WMRLConfig) -> tuple[int, int]:
    turns, new, obs = cfg.agent.max_turns, cfg.sampling.max_new_tokens, cfg.agent.observation_tokens
    tokens = cfg.agent.max_context_tokens or (
        cfg.generation.vllm.max_model_len if cfg.generation.backend == "vllm" else turns * (new + obs) + 4096)
    return tokens, min(tokens, turns * new)


@dataclass(frozen=True)
class Layout:
    """Where the coordinator's processes sit. Every coordinator task is a learner rank
    (wmrl/learner/follower.py); a dedicated vLLM runs in rank 0's process on GPUs of rank 0's node that
    no rank uses."""

    nodes: int
    gpus_per_node: int
    tasks_per_node: int
    placement: str  # of vLLM: colocated, dedicated, or none (another generation backend)
    inference: int  # GPUs of a dedicated vLLM (0 otherwise)
    tp: int  # vLLM's tensor-parallel size

    @classmethod
    def of(cls, cfg: WMRLConfig) -> Layout:
        launch, vllm = cfg.launch, cfg.generation.vllm
        placement = vllm.placement if cfg.generation.backend == "vllm" else "none"
        return cls(launch.coordinator_nodes, launch.coordinator_gpus, launch.coordinator_tasks_per_node, placement,
                   vllm.inference_gpus if placement == "dedicated" else 0, vllm.tensor_parallel_size)

    @property
    def on_gpu(self) -> bool:
        return self.gpus_per_node > 0

    @property
    def ranks(self) -> int:
        return self.nodes * self.tasks_per_node

    @property
    def ranks_per_node(self) -> int:
        return math.ceil(self.ranks / self.nodes)

    @property
    def engines(self) -> int:
        """vLLM engines: one per learner GPU (per tp of them) colocated; dedicated, its GPUs' worth."""
        if not self.on_gpu:
            return 0
        if self.placement == "colocated":
            return self.ranks // self.tp
        return self.inference // self.tp if self.placement == "dedicated" else 0


def _layout_problems(cfg: WMRLConfig, layout: Layout) -> list[str]:
    """Layouts that cannot run whatever the memory."""
    vllm, tasks, gpn, inference = cfg.generation.vllm, layout.tasks_per_node, layout.gpus_per_node, layout.inference
    problems: list[str] = []
    if layout.on_gpu and tasks + inference > gpn:
        problems.append(f"launch.coordinator_tasks_per_node={tasks} learner ranks + generation.vllm.inference_gpus="
                        f"{inference} exceed launch.coordinator_gpus={gpn}: every learner rank and every "
                        "inference GPU needs a GPU of its own")
    if layout.placement == "dedicated" and inference < 1:
        problems.append("generation.vllm.placement=dedicated needs generation.vllm.inference_gpus >= 1")
    if layout.placement == "dedicated" and vllm.weight_transfer == "ipc":
        problems.append("generation.vllm.weight_transfer=ipc needs the engine on the learner's GPU "
                        "(placement=colocated); dedicated engines take weights over nccl (or auto)")
    if layout.placement == "colocated" and layout.ranks > 1 and layout.tp > 1:
        # The same rule as the launch preflight (check_learner_ranks): one engine on each rank's GPU.
        problems.append(f"generation.vllm.placement=colocated with {layout.ranks} learner ranks runs one engine "
                        f"per rank: generation.vllm.tensor_parallel_size={layout.tp} needs to be 1")
    return problems


def _vllm_weight_bytes(cfg: WMRLConfig, counts: ParameterCounts) -> int:
    """The text model's weights only: vLLM starts a vision-language checkpoint text-only, without its vision
    tower (wmrl/generation/vllm_engine.py TEXT_ONLY), and the counts are the text config's parameters."""
    return VLLM_DTYPE_BYTES[cfg.generation.vllm.dtype] * counts.total


def _reference_bytes(cfg: WMRLConfig, counts: ParameterCounts, layout: Layout) -> tuple[int, int | None]:
    """The frozen reference (KL) on one learner GPU, and in host memory per node when offloaded (else None).
    ZeRO-3: a partitioned inference engine; otherwise a full copy per rank."""
    learner, b = cfg.learner, DTYPE_BYTES[cfg.learner.precision]
    n, largest = counts.total, counts.largest_layer
    if learner.kl_coef <= 0:
        return 0, None
    if learner.zero_stage == 3 and learner.offload_params:
        return b * largest, b * n // layout.nodes
    return ((b * n // layout.ranks + b * largest) if learner.zero_stage == 3 else b * n), None


def _activation_bytes(cfg: WMRLConfig, counts: ParameterCounts, seq: int) -> int:
    """Activations of one micro-batch of ``seq`` tokens: every layer's saved values (checkpointing: its
    input only), and the layer being back-propagated holds its saved values and their gradients
    (checkpointing: after recomputing them from its saved input)."""
    b, h, checkpointing = DTYPE_BYTES[cfg.learner.precision], counts.hidden_size, cfg.learner.gradient_checkpointing
    layer = (LAYER_VALUES_H * h + LAYER_VALUES_I * counts.intermediate_size) * b * seq
    saved = counts.num_layers * h * b * seq if checkpointing else counts.num_layers * layer
    return saved + layer * (2 if checkpointing else 1)


def _learner_phase(
    cfg: WMRLConfig, counts: ParameterCounts, layout: Layout, tokens: int, generated: int
) -> tuple[Phase, dict[str, int], dict[str, Any]]:
    """The learner phase on one learner GPU, its model states by component and DeepSpeed's estimate."""
    learner, ranks_per_node, tp = cfg.learner, layout.ranks_per_node, layout.tp
    states, ds_cpu, deepspeed = model_states(
        counts.total, counts.largest_layer, ranks_per_node, layout.nodes, learner.zero_stage, learner.precision,
        learner.optimizer, learner.offload_optimizer, learner.offload_params)
    gpu = dict(states)
    host = {"model_states": ds_cpu}
    gpu["reference"], reference_host = _reference_bytes(cfg, counts, layout)
    if reference_host is not None:
        host["reference"] = reference_host
    micro = min(learner.micro_batch_size,
                math.ceil(cfg.algorithm.groups_per_step * cfg.algorithm.group_size / layout.ranks))
    gpu["activations"] = _activation_bytes(cfg, counts, micro * tokens)
    chunk = min(learner.loss_chunk_tokens, micro * generated)
    gpu["loss_head"] = loss_head_bytes(chunk, micro * generated, counts.vocab_size, counts.hidden_size,
                                       learner.precision)
    if layout.on_gpu:
        # On the CPU the bucket is allocated but never touched beyond the gradients' size: no resident pages.
        bucket = gradient_bucket_bytes(learner.zero_stage, learner.precision, learner.grad_accum_dtype)
        if bucket:
            gpu["gradient_bucket"] = bucket
        gpu["runtime"] = RUNTIME_BYTES
        if layout.placement == "colocated":
            gpu["generator_asleep"] = RUNTIME_BYTES  # level 1: weights on the host, KV cache freed
            if cfg.generation.vllm.sleep_level == 1:
                host["generator_weights_asleep"] = (ranks_per_node // tp) * _vllm_weight_bytes(cfg, counts) // tp
            # DeepSpeed's offload_states pins host buffers for the states and keeps them after
            # reload_states (stage3.py: hp_params_pin_buffers, lp_param_contiguous_pin_buffer, ...; freed
            # only by destroy()): they stay in host memory while the learner trains.
            host["learner_states_pinned"] = ranks_per_node * sum(states.values())
    colocated, dedicated = layout.placement == "colocated", layout.placement == "dedicated"
    host["processes"] = PROCESS_HOST_BYTES * (ranks_per_node + (ranks_per_node // tp if colocated else 0)
                                              + (math.ceil(layout.engines / layout.nodes) if dedicated else 0))
    role = "learner GPU" if layout.on_gpu else "CPU (launch.coordinator_gpus=0)"
    return Phase(gpu, host, role), states, deepspeed


def _generation_phase(
    cfg: WMRLConfig, counts: ParameterCounts, layout: Layout, learner_phase: Phase, states: dict[str, int]
) -> tuple[Phase | None, int, list[str]]:
    """The generation phase on one vLLM GPU (None without vLLM engines), the KV cache the step's
    trajectories need, and the problem when vLLM's pool is smaller."""
    vllm, tp = cfg.generation.vllm, layout.tp
    if not (cfg.generation.backend == "vllm" and layout.on_gpu and layout.engines > 0):
        return None, 0, []
    budget = int(vllm.gpu_memory_utilization * cfg.launch.coordinator_gpu_memory_gb * GIB)
    per_engine = math.ceil(cfg.algorithm.groups_per_step * cfg.algorithm.group_size / layout.engines)
    kv_needed = per_engine * (vllm.max_model_len * counts.kv_bytes_per_token + counts.state_bytes_per_sequence) // tp
    gpu = {"generator_weights": _vllm_weight_bytes(cfg, counts) // tp, "generator_runtime": RUNTIME_BYTES}
    gpu["kv_cache"] = max(budget - gpu["generator_weights"] - RUNTIME_BYTES, 0)
    learner_host = learner_phase.host
    host = {"processes": learner_host["processes"], "model_states": learner_host["model_states"]} | (
        {"reference": learner_host["reference"]} if "reference" in learner_host else {})
    if layout.placement == "colocated":  # the learner's states wait in host memory while vLLM generates
        gpu["learner_asleep"] = RUNTIME_BYTES
        moved = sum(states.values()) + learner_phase.gpu["reference"]
        host["learner_states_offloaded"] = layout.ranks_per_node * moved
    generation = Phase(gpu, host, "vLLM GPU" + (" (= every learner GPU)" if layout.placement == "colocated" else ""))
    if kv_needed <= gpu["kv_cache"]:
        return generation, kv_needed, []
    return generation, kv_needed, [(
        f"generation: the KV cache of {per_engine} trajectories per engine at "
        f"generation.vllm.max_model_len={vllm.max_model_len} needs {_gb(kv_needed)} GB, vLLM's pool at "
        f"generation.vllm.gpu_memory_utilization={vllm.gpu_memory_utilization} is {_gb(gpu['kv_cache'])} GB"
    )]


def _fit_problems(cfg: WMRLConfig, phases: list[Phase], gpu_memory: int | None, host_memory: int | None) -> list[str]:
    """Phases that need more than the GPU (less the headroom) or the node's requested host memory."""
    launch, problems = cfg.launch, []
    if gpu_memory is not None:
        for phase, name in zip(phases, ("learner", "generation")):
            if phase.gpu_total > HEADROOM * gpu_memory:
                top = sorted(phase.gpu.items(), key=lambda kv: -kv[1])[:3]
                problems.append(f"{name} phase needs {_gb(phase.gpu_total)} GB per {phase.gpu_role}, more than "
                                f"{HEADROOM:.0%} of launch.coordinator_gpu_memory_gb={launch.coordinator_gpu_memory_gb} "
                                f"(largest: {', '.join(f'{k} {_gb(v)} GB' for k, v in top)})")
    if host_memory is not None:
        worst = max(phases, key=lambda p: p.host_total)
        if worst.host_total > host_memory:
            problems.append(f"{HOST_PROBLEM}: {_gb(worst.host_total)} GB needed, more than "
                            f"launch.coordinator_mem_gb={launch.coordinator_mem_gb}")
    return problems


def _notes(cfg: WMRLConfig, layout: Layout, host_memory: int | None) -> list[str]:
    """What the plan does not count or check."""
    use_vllm, notes = cfg.generation.backend == "vllm", []
    if use_vllm and not layout.on_gpu:
        notes.append("generation.backend=vllm needs GPUs: launch.coordinator_gpus=0")
    if cfg.world_model.backend == "in_process" and use_vllm:
        notes.append("world_model.backend=in_process: the world model's own vLLM engine is not counted")
    if host_memory is None:
        notes.append("launch.coordinator_mem_gb=0 (not requested): host memory is not checked")
    return notes


def plan(cfg: WMRLConfig, counts: ParameterCounts | None = None, model: str = "") -> Plan:
    """The memory plan of ``cfg`` (``counts`` given: skip the meta-device build): the layout, the learner
    phase, the generation phase, and whether each fits the GPU and the node's host memory."""
    if counts is None:
        model, counts = model_counts(cfg)
    launch, layout = cfg.launch, Layout.of(cfg)
    tokens, generated = _trajectory_tokens(cfg)
    learner_phase, states, deepspeed = _learner_phase(cfg, counts, layout, tokens, generated)
    generation, kv_needed, kv_problems = _generation_phase(cfg, counts, layout, learner_phase, states)
    phases = [p for p in (learner_phase, generation) if p is not None]
    gpu_memory = int(launch.coordinator_gpu_memory_gb * GIB) if layout.on_gpu else None
    host_memory = int(launch.coordinator_mem_gb * GIB) if launch.coordinator_mem_gb > 0 else None
    problems = _layout_problems(cfg, layout) + kv_problems + _fit_problems(cfg, phases, gpu_memory, host_memory)
    return Plan(
        checkpoint=checkpoint_cost(cfg, counts.total, layout.ranks), model=model, counts=counts,
        gpu_memory=gpu_memory, host_memory=host_memory, nodes=layout.nodes, gpus=layout.nodes * layout.gpus_per_node,
        learner_ranks=layout.ranks, placement=layout.placement, engines=layout.engines, tokens=tokens,
        generated=generated, trajectories=cfg.algorithm.groups_per_step * cfg.algorithm.group_size,
        learner=learner_phase, generation=generation, kv_cache_needed=kv_needed, deepspeed=deepspeed,
        problems=problems, notes=_notes(cfg, layout, host_memory),
    )


def checkpoint_cost(cfg: WMRLConfig, n: int, ranks: int) -> dict[str, Any]:
    """Bytes of one learner checkpoint (DeepSpeed's files: the weights in the learner's precision, the
    fp32 master copy and Adam's two moments, each rank writing its partition in parallel), what
    ``learner.keep_checkpoints`` of them hold on disk and what a run writes at ``train.save_every``."""
    per_param = DTYPE_BYTES[cfg.learner.precision] + (12 if cfg.learner.optimizer == "adamw" else 4)
    if cfg.learner.precision == "fp32" and cfg.learner.zero_stage == 0:
        per_param -= 4  # no separate master copy
    size = per_param * n
    saves = math.ceil(cfg.train.steps / cfg.train.save_every)
    return {"size_gb": _gb(size), "per_rank_gb": _gb(size / max(ranks, 1)),
            "kept_gb": _gb(size * cfg.learner.keep_checkpoints), "saves_per_run": saves,
            "written_per_run_gb": _gb(size * saves)}


# --------------------------------------------------------------------------- what would make it fit


def _fix_candidates(cfg: WMRLConfig) -> list[dict[str, Any]]:
    """Settings tried in order (cumulatively) when a config does not fit: cheapest first."""
    launch, learner, vllm = cfg.launch, cfg.learner, cfg.generation.vllm
    per_node = max(8, launch.coordinator_gpus)
    inference = vllm.inference_gpus if vllm.placement == "dedicated" else 0
    several_ranks: dict[str, Any] = {"launch.coordinator_gpus": per_node, "launch.coordinator_tasks_per_node": per_node}
    if cfg.generation.backend == "vllm" and vllm.placement == "colocated":  # one engine beside every rank
        several_ranks["generation.vllm.tensor_parallel_size"] = 1
    elif cfg.generation.backend == "vllm":  # several ranks beside vLLM's own GPUs
        several_ranks = {"launch.coordinator_gpus": per_node,
                         "launch.coordinator_tasks_per_node": per_node - max(inference, 1),
                         "generation.vllm.inference_gpus": max(inference, 1),
                         "generation.vllm.gpu_memory_utilization": 0.9}
    return [
        {"launch.coordinator_tasks_per_node": max(launch.coordinator_gpus - inference,
                                                  launch.coordinator_tasks_per_node)},
        {"learner.gradient_checkpointing": True},
        {"learner.micro_batch_size": 1},
        {"learner.zero_stage": 3},
        {"learner.loss_chunk_tokens": min(learner.loss_chunk_tokens, 2048)},
        {"learner.offload_optimizer": True},
        {"learner.loss_chunk_tokens": min(learner.loss_chunk_tokens, 1024)},
        {"generation.vllm.gpu_memory_utilization": round(min(0.9, vllm.gpu_memory_utilization + 0.2), 2)},
        several_ranks,
        {"learner.offload_params": True},
    ]


def _set(cfg: WMRLConfig, key: str, value: Any) -> None:
    *path, last = key.split(".")
    target: Any = cfg
    for part in path:
        target = getattr(target, part)
    setattr(target, last, value)


def _get(cfg: WMRLConfig, key: str) -> Any:
    target: Any = cfg
    for part in key.split("."):
        target = getattr(target, part)
    return target


def suggest_fixes(cfg: WMRLConfig, counts: ParameterCounts) -> list[str] | None:
    """``key=value`` overrides that make ``cfg`` fit (tried cumulatively, kept only where they help);
    None when even all of them together do not."""
    trial = copy.deepcopy(cfg)
    chosen: dict[str, Any] = {}
    current = plan(trial, counts)
    if current.fits:
        return []
    for candidate in _fix_candidates(cfg):
        if all(_get(trial, k) == v for k, v in candidate.items()):
            continue
        saved = {k: _get(trial, k) for k in candidate}
        for k, v in candidate.items():
            _set(trial, k, v)
        after = plan(trial, counts)
        if after.fits or _pressure(after) < _pressure(current):
            chosen.update(candidate)
            current = after
        else:
            for k, v in saved.items():
                _set(trial, k, v)
        if not current.fits and all(x.startswith(HOST_PROBLEM) for x in current.problems):
            # What is left is host memory: ask Slurm for enough (in steps of 50 GB).
            need = max(ph.host_total for ph in (current.learner, current.generation) if ph is not None)
            chosen["launch.coordinator_mem_gb"] = 50 * math.ceil(need / GIB / 50)
            _set(trial, "launch.coordinator_mem_gb", chosen["launch.coordinator_mem_gb"])
            current = plan(trial, counts)
        if current.fits:
            return [f"{k}={_literal(v)}" for k, v in _prune(cfg, trial, chosen, counts).items()
                    if _get(cfg, k) != v]
    return None


def _prune(cfg: WMRLConfig, trial: WMRLConfig, chosen: dict[str, Any], counts: ParameterCounts) -> dict[str, Any]:
    """``chosen`` without the overrides a later one made unnecessary (the plan still fits without them)."""
    kept = dict(chosen)
    for key in list(chosen):
        if key.startswith("launch.coordinator_"):
            continue  # the allocation's keys go together
        _set(trial, key, _get(cfg, key))
        if plan(trial, counts).fits:
            del kept[key]
        else:
            _set(trial, key, chosen[key])
    return kept


def _pressure(p: Plan) -> tuple[int, int]:
    """How far a plan is from fitting: problems, then the largest overshoot in bytes."""
    over = 0
    if p.gpu_memory is not None:
        over = max(ph.gpu_total - int(HEADROOM * p.gpu_memory) for ph in (p.learner, p.generation) if ph is not None)
        over = max(over, p.kv_cache_needed - (p.generation.gpu.get("kv_cache", 0) if p.generation else 0))
    return (len(p.problems), over)


def _literal(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def plan_with_fixes(cfg: WMRLConfig) -> Plan:
    """:func:`plan`, and for a config that does not fit, the overrides that would make it fit."""
    model, counts = model_counts(cfg)
    result = plan(cfg, counts, model)
    if not result.fits:
        fixes = suggest_fixes(cfg, counts)
        result.fixes = fixes if fixes is not None else []
        if fixes is None:
            result.notes.append("no combination of the keys `wmrl plan` tries makes this fit: a smaller "
                                "model, shorter trajectories or more GPU memory is needed")
    return result


def render(p: Plan) -> str:
    """The plan as the text `wmrl plan` prints."""
    lines = [
        (f"model:     {p.model} ({p.counts.total / 1e9:.3f} B parameters, largest layer "
        f"{p.counts.largest_layer / 1e6:.0f} M, vocabulary {p.counts.vocab_size:,})"),
        (f"layout:    {p.nodes} node(s), {p.gpus} GPU(s) of "
        f"{'-' if p.gpu_memory is None else _gb(p.gpu_memory)} GB, {p.learner_ranks} learner rank(s), "
        f"vLLM {p.placement} ({p.engines} engine(s))"),
        f"step:      {p.trajectories} trajectories of up to {p.tokens:,} tokens ({p.generated:,} generated)",
        (f"deepspeed: {p.deepspeed['function']}: {p.deepspeed['gpu_gb']} GB per GPU, "
        f"{p.deepspeed['cpu_gb_per_node']} GB host per node (model states)"),
    ]
    for name, phase in (("learner", p.learner), ("generation", p.generation)):
        if phase is None:
            continue
        lines.append(f"{name} phase, per {phase.gpu_role}: {_gb(phase.gpu_total)} GB")
        lines += [f"  {k:<26} {_gb(v):>8.2f} GB" for k, v in phase.gpu.items()]
        if name == "generation":
            lines.append(f"  {'(kv cache needed)':<26} {_gb(p.kv_cache_needed):>8.2f} GB")
        lines.append(f"  host memory per node:      {_gb(phase.host_total):>8.2f} GB "
                     f"({', '.join(f'{k} {_gb(v)}' for k, v in phase.host.items())})")
    c = p.checkpoint
    lines.append(f"checkpoint: {c['size_gb']} GB ({c['per_rank_gb']} GB per rank, written in parallel); "
                 f"{c['kept_gb']} GB kept; {c['saves_per_run']} saves = {c['written_per_run_gb']} GB per run")
    lines += [f"note:      {n}" for n in p.notes]
    if p.fits:
        lines.append("fits:      yes")
    else:
        lines += [f"DOES NOT FIT: {problem}" for problem in p.problems]
        if p.fixes:
            lines.append("would fit with: " + " ".join(p.fixes))
    return "\n".join(lines)
