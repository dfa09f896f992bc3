"""The ``vllm`` generation backend (GPU clusters; ``pip install 'wmrl[gpu]'``).

One offline ``vllm.LLM`` in the coordinator serves the policy. After every learner step the new
weights reach it through vLLM's native weight-transfer API (vLLM >= 0.16), never a reload from disk:

- ``ipc`` (the learner shares vLLM's GPU): CUDA IPC handles of the learner's own tensors go to the
  vLLM workers, which copy from them; nothing crosses PCIe. Needs a vLLM release with the IPC engine.
- ``nccl`` (vLLM on other GPUs of the node): a NCCL group of the trainer (rank 0) and the vLLM workers
  (ranks 1..tp) is set up once (``init_weight_transfer_engine`` beside ``trainer_init``); each update
  broadcasts the tensors, packed, while ``update_weights`` receives them.

Each update is ``start_weight_update`` -> ``update_weights`` -> ``finish_weight_update`` (the first and
last only where the installed vLLM has them). Names are the Hugging Face parameter names, which
vLLM maps onto its own layout (Qwen3 and Qwen3.5 included). This module imports vLLM only when a
generator is built, and resolves every vLLM name through :func:`_module`, so a test can stand in for
vLLM with modules that record the calls; the calls are the ones a cluster makes.
"""

from __future__ import annotations

import importlib
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch

from wmrl.generation.base import Generation, SamplingParams
from wmrl.generation.config import VLLMConfig
from wmrl.generation.hf import request_seeds, stop_token_ids


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


def gpu_uuid() -> str:
    """The physical id vLLM's IPC engine keys handles by (logical indices differ between processes)."""
    return str(torch.cuda.get_device_properties(torch.cuda.current_device()).uuid)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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


def _metadata(named: list[tuple[str, torch.Tensor]]) -> dict[str, list[Any]]:
    return {
        "names": [n for n, _ in named],
        "dtype_names": [str(t.dtype).removeprefix("torch.") for _, t in named],
        "shapes": [list(t.shape) for _, t in named],
    }


class VLLMGenerator:
    """A :class:`~wmrl.generation.base.Generator` on an offline ``vllm.LLM``."""

    def __init__(self, path: str, cfg: VLLMConfig, colocated: bool = True, seed: int = 0) -> None:
        from wmrl.models.loading import load_tokenizer

        self.transfer = resolve_transfer(cfg.weight_transfer, colocated)
        if self.transfer == "ipc":
            # The IPC handles are pickled on their way to the engine-core process.
            os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
        vllm = _module("vllm")
        transfer_config = _module("vllm.config").WeightTransferConfig
        try:
            weight_transfer = transfer_config(backend=self.transfer)
        except Exception as err:  # pydantic rejects a backend this release does not have
            raise RuntimeError(
                f"this vLLM ({getattr(vllm, '__version__', '?')}) has no '{self.transfer}' weight transfer; "
                "set generation.vllm.weight_transfer=nccl or install a newer vLLM"
            ) from err
        self.tp = cfg.tensor_parallel_size
        self.llm = vllm.LLM(
            model=path,
            tokenizer=path,
            dtype=cfg.dtype,
            seed=seed,
            tensor_parallel_size=cfg.tensor_parallel_size,
            gpu_memory_utilization=cfg.gpu_memory_utilization,
            max_model_len=cfg.max_model_len,
            enforce_eager=cfg.enforce_eager,
            enable_prefix_caching=cfg.enable_prefix_caching,
            weight_transfer_config=weight_transfer,
        )
        self.tokenizer = load_tokenizer(path)
        self.stop_ids = stop_token_ids(self.tokenizer)
        self._nccl_group: Any = None

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

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        named = [(name, tensor.detach().contiguous()) for name, tensor in named_tensors]
        if hasattr(self.llm, "start_weight_update"):
            self.llm.start_weight_update()
        if self.transfer == "ipc":
            self._send_ipc(named)
        else:
            self._send_nccl(named)
        if hasattr(self.llm, "finish_weight_update"):
            self.llm.finish_weight_update()

    def _send_ipc(self, named: list[tuple[str, torch.Tensor]]) -> None:
        from torch.multiprocessing.reductions import reduce_tensor

        uuid = gpu_uuid()
        # ``named`` keeps the tensors alive until the workers have copied them (update_weights blocks).
        handles = [{uuid: reduce_tensor(tensor)} for _, tensor in named]
        self.llm.update_weights({"update_info": {**_metadata(named), "ipc_handles": handles}})

    def _init_nccl(self) -> None:
        engine = _module("vllm.distributed.weight_transfer.nccl_engine").NCCLWeightTransferEngine
        address, port, world = "127.0.0.1", _free_port(), self.tp + 1  # trainer + one rank per vLLM worker
        join = _in_thread(lambda: self.llm.init_weight_transfer_engine(
            {"init_info": {"master_address": address, "master_port": port, "rank_offset": 1, "world_size": world}}
        ))
        self._nccl_group = engine.trainer_init({"master_address": address, "master_port": port, "world_size": world})
        join()

    def _send_nccl(self, named: list[tuple[str, torch.Tensor]]) -> None:
        nccl = _module("vllm.distributed.weight_transfer.nccl_engine")
        if self._nccl_group is None:
            self._init_nccl()
        join = _in_thread(lambda: self.llm.update_weights({"update_info": {**_metadata(named), "packed": True}}))
        args_cls = getattr(nccl, "NCCLTrainerSendWeightsArgs", None)
        args = args_cls(group=self._nccl_group, packed=True) if args_cls else {"group": self._nccl_group, "packed": True}
        nccl.NCCLWeightTransferEngine.trainer_send_weights(iterator=iter(named), trainer_args=args)
        join()
