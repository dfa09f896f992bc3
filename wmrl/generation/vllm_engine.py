"""The ``vllm`` generation backend (GPU clusters; ``pip install 'wmrl[gpu]'``, vLLM 0.27-0.33).

One offline ``vllm.LLM`` in the coordinator serves the policy. After every learner step the new
weights reach it through vLLM's native weight-transfer API, never a reload from disk. Each update is
``start_weight_update`` -> ``update_weights`` -> ``finish_weight_update``, then the prefix cache is
dropped (vLLM keeps KV blocks computed with the old weights; the next step's prompts share prefixes).

- ``ipc`` (the learner shares vLLM's GPU; tensor_parallel_size 1): one CUDA IPC handle per parameter,
  keyed by the GPU's UUID, goes to the vLLM worker, which copies from the learner's own tensor.
  The handle is the argument tuple of ``torch.multiprocessing.reductions.reduce_tensor``.
- ``nccl`` (vLLM on other GPUs): a NCCL group of the trainer (rank 0, on the learner's GPU) and the
  vLLM workers (ranks 1..tp) is set up once, before the first update; each update broadcasts the
  tensors packed into buffers while ``update_weights`` receives them. vLLM 0.28 moved the ``packed``
  flag from each update's info to the init info; both layouts are sent by version.

Placement (``generation.vllm.placement``, docs/cluster.md): *colocated*, the engine is built with
``enable_sleep_mode`` on the learner's GPU and :mod:`wmrl.generation.colocation` puts it to sleep
(``LLM.sleep(level)``) while the learner trains and wakes it (``LLM.wake_up(tags)``: ``["weights"]``
before a weight update, ``["kv_cache"]`` before generation), its engine-core process seeing only the
rank's GPU (``CUDA_VISIBLE_DEVICES`` while it starts: one engine per learner rank, each on its own GPU);
*dedicated*, the engine-core process sees
only the last ``inference_gpus`` GPUs of the allocation (``CUDA_VISIBLE_DEVICES`` while it starts) and
weights go over NCCL to the trainer's address in the allocation (:func:`transfer_address`). Before the
engine starts, :func:`check_gpu_memory` does vLLM's own start-up check (free memory >=
``gpu_memory_utilization`` x total memory, vllm/v1/worker/utils.py) with an error that names the key.

Names are the learner's Hugging Face names. A released Qwen3.5 checkpoint is a vision-language
``Qwen3_5ForConditionalGeneration``: the learner holds its text model (``model.layers.*``, see
:mod:`wmrl.models.vision_language`), and vLLM, serving the checkpoint, expects the checkpoint's names
(``model.language_model.layers.*``), so the text names are mapped back before sending. vLLM starts
such a checkpoint text-only (``language_model_only``): no vision tower, no image inputs, no vision
profiling.

Written against the sources of vLLM 0.27-0.33 (0.27 is the first release that registers
``Qwen3_5ForCausalLM``; the IPC handle format changed in 0.22 and the NCCL trainer side in 0.28) and
not yet run on a GPU. This module imports vLLM only when a generator is built, and resolves every
vLLM name through :func:`_module`, so a test can stand in for vLLM with modules that record the
calls; the calls are the ones a cluster makes.
"""

from __future__ import annotations

import contextlib
import importlib
import itertools
import math
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import torch

from wmrl.generation.base import Generation, SamplingParams
from wmrl.generation.config import VLLMConfig
from wmrl.generation.hf import request_seeds, stop_token_ids
from wmrl.learner.devices import physical_gpus, visible_gpus
from wmrl.models.loading import load_tokenizer

# One naming rule for the learner, the sync and vLLM (the names are re-exported for this module's callers).
from wmrl.models.vision_language import checkpoint_name
from wmrl.models.vision_language import is_composite_dir as is_composite

SUPPORTED_VLLM = ((0, 27), (0, 34))  # [lowest, first unsupported) (major, minor): the `gpu` extra's pin
NCCL_PACKED_AT_INIT = (0, 28)  # from this release the NCCL `packed` flag is an init_info key
# generation.vllm keys that are vLLM EngineArgs fields of the same name, passed through as they are.
ENGINE_ARGS = ("dtype", "tensor_parallel_size", "gpu_memory_utilization", "max_model_len", "enforce_eager",
               "enable_prefix_caching")
SEND_CHUNK_BYTES = 512 * 2**20  # weights handed to vLLM per update_weights call


def _module(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as err:
        raise RuntimeError(
            "generation.backend=vllm needs vLLM on a GPU machine: pip install 'wmrl[gpu]' "
            "(or use generation.backend=transformers)"
        ) from err


def resolve_transfer(choice: str, colocated: bool) -> str:
    """``auto``: ``ipc`` when the learner shares vLLM's GPU, else ``nccl``."""
    if choice == "auto":
        return "ipc" if colocated else "nccl"
    return choice


def gpu_uuid(device: torch.device) -> str:
    """The physical id vLLM's IPC engine keys handles by (logical indices differ between processes)."""
    return str(torch.cuda.get_device_properties(device).uuid)


def vllm_release(vllm: Any) -> tuple[int, int]:
    """``(major, minor)`` of the installed vLLM; a clear error outside the supported range."""
    from packaging.version import Version

    version = Version(str(getattr(vllm, "__version__", "0")))
    release = (version.major, version.minor)
    low, high = SUPPORTED_VLLM
    if not low <= release < high:
        raise RuntimeError(f"vLLM {version} is not supported: wmrl's weight transfer needs {low[0]}.{low[1]} <= "
                           f"vLLM < {high[0]}.{high[1]} (pip install 'wmrl[gpu]')")
    return release


# vLLM 0.27-0.33 EngineArgs.language_model_only (engine/arg_utils.py: 0.27 l. 560, 0.33 l. 651): every
# modality's limit becomes 0 (config/multimodal.py, 0.33 l. 696-701), so the vision tower is built as a
# StageMissingLayer (models/interfaces.py _mark_tower_model, 0.33 l. 347-392), its weights are skipped
# (models/utils.py l. 382), and neither the multimodal processor is built nor the multimodal profiling run
# (config/model.py l. 954-968 "running in text-only mode"; renderers/base.py l. 184-199;
# v1/worker/gpu_model_runner.py l. 6074). A text-only model has no multimodal config and vLLM ignores the
# flag there (config/model.py l. 831).
TEXT_ONLY = {"language_model_only": True}


def _on(device: torch.device) -> contextlib.AbstractContextManager[Any]:
    """The trainer's NCCL calls run on the learner's GPU (vLLM builds its group on the current device)."""
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


def transfer_address() -> str:
    """The trainer's address for the NCCL weight transfer, as the vLLM workers reach it: ``MASTER_ADDR``
    when the launch sets it, else this node's name in the Slurm allocation (``SLURMD_NODENAME``), else
    this host's fully qualified name. Never a loopback address: vLLM may run on another node."""
    for name in ("MASTER_ADDR", "SLURMD_NODENAME"):
        if os.environ.get(name):
            return os.environ[name]
    return socket.getfqdn()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def check_gpu_memory(utilization: float, devices: Sequence[int],
                     key: str = "generation.vllm.gpu_memory_utilization") -> None:
    """vLLM's start-up check, up front and with the key named: on each of ``devices`` it reserves
    ``utilization`` of the GPU's *total* memory and refuses to start when less than that is free."""
    for device in devices:
        free, total = torch.cuda.mem_get_info(device)
        needed = math.ceil(total * utilization)
        if free < needed:
            gib = 2.0**30
            raise ValueError(
                f"{key}={utilization} reserves {needed / gib:.1f} GiB ({utilization} of GPU {device}'s total "
                f"{total / gib:.1f} GiB; the fraction is of the total, not of the free memory), but only "
                f"{free / gib:.1f} GiB is free and vLLM refuses to start below it. Lower it to at most "
                f"{math.floor(free / total * 100) / 100:.2f}, or free the GPU (colocated: the learner's states "
                "must be in host memory before vLLM starts)")


def inference_devices(cfg: VLLMConfig) -> list[int]:
    """This process's CUDA indices vLLM runs on: the learner's (the current device) colocated, the last
    ``inference_gpus`` of the visible GPUs dedicated."""
    if cfg.placement != "dedicated":
        return [torch.cuda.current_device()]
    count = torch.cuda.device_count()
    if count <= cfg.inference_gpus:
        raise ValueError(f"generation.vllm.placement=dedicated with inference_gpus={cfg.inference_gpus} needs more "
                         f"GPUs than that in the allocation (the learner keeps the others); {count} visible")
    return list(range(count - cfg.inference_gpus, count))


@contextlib.contextmanager
def _visible_to_children(devices: Sequence[int]) -> Iterator[None]:
    """``CUDA_VISIBLE_DEVICES`` narrowed to ``devices`` for the processes started meanwhile (vLLM's engine
    core and workers, which run on their CUDA index 0..tp-1); this process's CUDA context, already made,
    keeps seeing every GPU."""
    before = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(physical_gpus(devices, visible_gpus(os.environ)))
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = before


def _in_thread(fn: Callable[[], Any]) -> Callable[[], None]:
    """Start ``fn`` in a thread; the returned join re-raises its exception (both sides of a NCCL
    rendezvous block until the other arrives, so one of them must run beside the other)."""
    failure: list[BaseException] = []

    def body() -> None:
        try:
            fn()
        except BaseException as err:  # noqa: BLE001 - handed to the joining thread
            failure.append(err)

    thread = threading.Thread(target=body, daemon=True)
    thread.start()

    def join() -> None:
        thread.join()
        if failure:
            raise failure[0]

    return join


def _chunks(named: Iterator[tuple[str, torch.Tensor]], limit: int) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """Consecutive runs of at most ``limit`` bytes (a larger tensor is a run of its own), read lazily."""
    chunk: list[tuple[str, torch.Tensor]] = []
    size = 0
    for name, tensor in named:
        nbytes = tensor.numel() * tensor.element_size()
        if chunk and size + nbytes > limit:
            yield chunk
            chunk, size = [], 0
        chunk.append((name, tensor))
        size += nbytes
    if chunk:
        yield chunk


def _metadata(named: list[tuple[str, torch.Tensor]]) -> dict[str, list[Any]]:
    return {
        "names": [n for n, _ in named],
        "dtype_names": [str(t.dtype).removeprefix("torch.") for _, t in named],
        "shapes": [list(t.shape) for _, t in named],
    }


class VLLMGenerator:
    """A :class:`~wmrl.generation.base.Generator` on an offline ``vllm.LLM``."""

    def __init__(self, path: str, cfg: VLLMConfig, colocated: bool | None = None, seed: int = 0) -> None:
        if colocated is None:
            colocated = cfg.placement == "colocated"
        self.transfer = resolve_transfer(cfg.weight_transfer, colocated)
        if self.transfer == "ipc" and cfg.tensor_parallel_size > 1:
            raise ValueError("weight transfer by CUDA IPC needs tensor_parallel_size=1 (the handles are of the "
                             "learner's one GPU); set generation.vllm.weight_transfer=nccl")
        if self.transfer == "ipc":
            # The IPC handles are pickled on their way to the engine-core process.
            os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
        vllm = _module("vllm")
        self.release = vllm_release(vllm)
        weight_transfer = _module("vllm.config").WeightTransferConfig(backend=self.transfer)
        self.tp = cfg.tensor_parallel_size
        # Sleep mode (vLLM's cumem allocator) only where the engine takes turns with the learner.
        self.sleeps = colocated and cfg.placement == "colocated" and cfg.sleep_level > 0
        self.sleep_level = cfg.sleep_level
        devices = inference_devices(cfg)
        check_gpu_memory(cfg.gpu_memory_utilization, devices)
        if os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING") == "0" and devices[0] != 0:
            raise ValueError(f"vLLM in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0) would take CUDA index 0, not "
                             f"GPU {devices[0]}: unset VLLM_ENABLE_V1_MULTIPROCESSING")
        self.composite = is_composite(path)
        # Both placements: the engine's worker takes its CUDA index 0 (vLLM's uniproc executor), so without
        # this every colocated rank's engine would start on the node's first GPU.
        with _visible_to_children(devices):
            self.llm = vllm.LLM(model=path, tokenizer=path, seed=seed, enable_sleep_mode=self.sleeps,
                                weight_transfer_config=weight_transfer, **(TEXT_ONLY if self.composite else {}),
                                **{name: getattr(cfg, name) for name in ENGINE_ARGS})
        self.tokenizer = load_tokenizer(path)
        self.stop_ids = stop_token_ids(self.tokenizer)
        self._nccl_group: Any = None
        if self.transfer == "ipc":
            self.llm.init_weight_transfer_engine({"init_info": {"packed": False}})

    def generate(
        self, prompts: Sequence[list[int]], params: SamplingParams, seeds: Sequence[int] | None = None
    ) -> list[Generation]:
        vllm = _module("vllm")
        per_request = [
            vllm.SamplingParams(
                temperature=params.temperature,
                top_p=params.top_p,
                max_tokens=params.max_new_tokens,
                seed=seed,
                logprobs=0,  # the sampled token's log-prob only (raw model distribution by default)
                stop_token_ids=self.stop_ids,
                skip_special_tokens=True,
            )
            for seed in request_seeds(params, len(prompts), seeds)
        ]
        started = time.perf_counter()
        outputs = self.llm.generate([{"prompt_token_ids": list(p)} for p in prompts], per_request, use_tqdm=False)
        seconds = (time.perf_counter() - started) / max(len(prompts), 1)
        return [self._generation(out.outputs[0], seconds) for out in outputs]

    def _generation(self, completion: Any, seconds: float) -> Generation:
        ids = [int(t) for t in completion.token_ids]
        logprobs = [float(step[t].logprob) for step, t in zip(completion.logprobs or [], ids)]
        if len(logprobs) != len(ids):
            raise RuntimeError(f"vLLM returned {len(logprobs)} log-probs for {len(ids)} tokens")
        stopped = completion.finish_reason == "stop" or (bool(ids) and ids[-1] in self.stop_ids)
        return Generation(token_ids=ids, logprobs=logprobs, text=completion.text,
                          finish_reason="stop" if stopped else "length", seconds=seconds)

    def sleep(self) -> None:
        """Free the GPU for the learner: ``LLM.sleep(level)`` (level 1: weights to host memory, KV cache
        discarded; level 2: both discarded). vLLM clears its prefix cache as it sleeps."""
        self.llm.sleep(level=self.sleep_level)

    def wake_up(self, tags: Sequence[str]) -> None:
        """``LLM.wake_up(tags)``: ``["weights"]`` before a weight update, ``["kv_cache"]`` before generating
        (both are needed before the engine serves again)."""
        self.llm.wake_up(tags=list(tags))

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Stream ``named_tensors`` in chunks of ``SEND_CHUNK_BYTES``: one ``update_weights`` call per
        chunk between one start and one finish (vLLM's layerwise reload takes the weights as they come),
        so at most a chunk of the learner's tensors is held for the transfer, never the whole model."""
        chunks = _chunks(((checkpoint_name(name, self.composite), tensor.detach().contiguous())
                          for name, tensor in named_tensors), SEND_CHUNK_BYTES)
        first = next(chunks, None)
        if first is None:
            return
        device = first[0][1].device
        if self.transfer == "nccl" and self._nccl_group is None:
            self._init_nccl(device)
        self.llm.start_weight_update()
        for named in itertools.chain([first], chunks):
            if self.transfer == "ipc":
                self._send_ipc(named)
            else:
                self._send_nccl(named, device)
        self.llm.finish_weight_update()
        self.llm.reset_prefix_cache()
        if self.transfer == "ipc" and device.type == "cuda":
            torch.cuda.ipc_collect()  # free the blocks exported for copies made by .contiguous()

    def _send_ipc(self, named: list[tuple[str, torch.Tensor]]) -> None:
        from torch.multiprocessing.reductions import reduce_tensor

        uuid = gpu_uuid(named[0][1].device)  # the learner's one GPU (tensor_parallel_size 1)
        # ``named`` keeps the tensors alive until the workers have copied them (update_weights blocks).
        handles = [{uuid: reduce_tensor(tensor)[1]} for _, tensor in named]
        self.llm.update_weights({"update_info": {**_metadata(named), "ipc_handles": handles}})

    def _init_nccl(self, device: torch.device) -> None:
        common = _module("vllm.distributed.weight_transfer.nccl_common")
        address, port, world = transfer_address(), _free_port(), self.tp + 1  # trainer + one rank per vLLM worker
        init_info: dict[str, Any] = {"master_address": address, "master_port": port, "rank_offset": 1,
                                     "world_size": world}
        if self.release >= NCCL_PACKED_AT_INIT:
            init_info["packed"] = True
        join = _in_thread(lambda: self.llm.init_weight_transfer_engine({"init_info": init_info}))
        with _on(device):
            self._nccl_group = common.trainer_init({"master_address": address, "master_port": port,
                                                    "world_size": world})
        join()

    def _send_nccl(self, named: list[tuple[str, torch.Tensor]], device: torch.device) -> None:
        packed = _module("vllm.distributed.weight_transfer.packed_tensor")
        update_info = _metadata(named)
        if self.release < NCCL_PACKED_AT_INIT:
            update_info["packed"] = True
        join = _in_thread(lambda: self.llm.update_weights({"update_info": update_info}))
        with _on(device):
            packed.packed_nccl_broadcast_producer(iterator=iter(named), group=self._nccl_group, src=0,
                                                  post_iter_func=lambda item: item[1])
        join()
