"""The vLLM backend's calls, against stand-in ``vllm`` modules that record them (no GPU or vLLM here).

The calls are the ones a cluster makes: the engine's constructor arguments, one SamplingParams per
request, and the weight-transfer sequence for ``ipc`` and ``nccl``.
"""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass, field

import pytest
import torch
from models_support import build_tiny

from wmrl.generation import vllm_engine
from wmrl.generation.base import SamplingParams
from wmrl.generation.config import GenerationConfig, VLLMConfig
from wmrl.generation.factory import build_generator
from wmrl.generation.hf import request_seeds


@dataclass
class Recorder:
    calls: list[tuple[str, object]] = field(default_factory=list)


class FakeLogprob:
    def __init__(self, value: float) -> None:
        self.logprob = value


@pytest.fixture
def fake_vllm(monkeypatch):
    rec = Recorder()

    class LLM:
        def __init__(self, **kwargs):
            rec.calls.append(("LLM", kwargs))

        def generate(self, prompts, params, use_tqdm=True):
            rec.calls.append(("generate", (prompts, params)))
            outs = []
            for p in prompts:
                ids = [5, 6, 2] if len(p["prompt_token_ids"]) % 2 else [7, 8, 9]
                done = types.SimpleNamespace(token_ids=ids, text="abc", finish_reason="stop" if ids[-1] == 2 else "length",
                                             logprobs=[{t: FakeLogprob(-0.5 * (k + 1))} for k, t in enumerate(ids)])
                outs.append(types.SimpleNamespace(outputs=[done]))
            return outs

        def init_weight_transfer_engine(self, request):
            rec.calls.append(("init_weight_transfer_engine", request))

        def start_weight_update(self):
            rec.calls.append(("start_weight_update", None))

        def update_weights(self, request):
            rec.calls.append(("update_weights", request))

        def finish_weight_update(self):
            rec.calls.append(("finish_weight_update", None))

    def sampling_params(**kwargs):
        return types.SimpleNamespace(**kwargs)

    class WeightTransferConfig:
        def __init__(self, backend):
            if backend not in ("nccl", "ipc"):
                raise ValueError(backend)
            self.backend = backend

    class NCCLWeightTransferEngine:
        @staticmethod
        def trainer_init(info):
            rec.calls.append(("trainer_init", info))
            return "group"

        @staticmethod
        def trainer_send_weights(iterator, trainer_args):
            rec.calls.append(("trainer_send_weights", ([n for n, _ in iterator], trainer_args)))

    modules = {
        "vllm": types.SimpleNamespace(LLM=LLM, SamplingParams=sampling_params, __version__="stand-in"),
        "vllm.config": types.SimpleNamespace(WeightTransferConfig=WeightTransferConfig),
        "vllm.distributed.weight_transfer.nccl_engine": types.SimpleNamespace(
            NCCLWeightTransferEngine=NCCLWeightTransferEngine,
            NCCLTrainerSendWeightsArgs=lambda **kw: dict(kw, cls="NCCLTrainerSendWeightsArgs")),
    }
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(vllm_engine, "gpu_uuid", lambda: "GPU-test-uuid")
    monkeypatch.delenv("VLLM_ALLOW_INSECURE_SERIALIZATION", raising=False)
    return rec


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny(tmp_path_factory.mktemp("cache"))


def names(rec: Recorder) -> list[str]:
    return [name for name, _ in rec.calls]


def test_engine_is_built_from_the_config_with_native_weight_transfer(fake_vllm, tiny):
    cfg = GenerationConfig(backend="vllm", vllm=VLLMConfig(gpu_memory_utilization=0.3, max_model_len=8192))
    gen = build_generator(tiny, cfg, colocated=True)
    (_, kwargs), = fake_vllm.calls
    assert kwargs["model"] == str(tiny) and kwargs["tokenizer"] == str(tiny)
    assert kwargs["weight_transfer_config"].backend == "ipc"
    assert (kwargs["gpu_memory_utilization"], kwargs["max_model_len"], kwargs["tensor_parallel_size"]) == (0.3, 8192, 1)
    assert gen.tokenizer.eos_token == "<|im_end|>"
    import os

    assert os.environ["VLLM_ALLOW_INSECURE_SERIALIZATION"] == "1"  # IPC handles are pickled


def test_auto_transfer_is_nccl_when_vllm_has_its_own_gpus(fake_vllm, tiny):
    gen = vllm_engine.VLLMGenerator(str(tiny), VLLMConfig(tensor_parallel_size=2), colocated=False)
    assert gen.transfer == "nccl" and fake_vllm.calls[0][1]["weight_transfer_config"].backend == "nccl"


def test_generate_sends_one_seeded_request_per_prompt_and_returns_ids_and_logprobs(fake_vllm, tiny):
    gen = vllm_engine.VLLMGenerator(str(tiny), VLLMConfig())
    params = SamplingParams(temperature=0.7, top_p=0.9, max_new_tokens=33, seed=4)
    out = gen.generate([[1, 2, 3], [1, 2]], params)
    prompts, per_request = fake_vllm.calls[-1][1]
    assert prompts == [{"prompt_token_ids": [1, 2, 3]}, {"prompt_token_ids": [1, 2]}]
    assert [p.seed for p in per_request] == request_seeds(params, 2, None)
    first = per_request[0]
    assert (first.temperature, first.top_p, first.max_tokens, first.logprobs) == (0.7, 0.9, 33, 0)
    assert set(first.stop_token_ids) == {0, 2}  # <|endoftext|>, <|im_end|>
    assert out[0].token_ids == [5, 6, 2] and out[0].logprobs == [-0.5, -1.0, -1.5]
    assert out[0].finish_reason == "stop" and out[1].finish_reason == "length"


def test_ipc_update_sends_handles_keyed_by_gpu_between_start_and_finish(fake_vllm, tiny):
    gen = vllm_engine.VLLMGenerator(str(tiny), VLLMConfig(weight_transfer="ipc"))
    weights = [("model.norm.weight", torch.ones(4)), ("lm_head.weight", torch.zeros(3, 2, dtype=torch.bfloat16))]
    gen.update_weights(weights)
    assert names(fake_vllm)[1:] == ["start_weight_update", "update_weights", "finish_weight_update"]
    info = fake_vllm.calls[2][1]["update_info"]
    assert info["names"] == ["model.norm.weight", "lm_head.weight"]
    assert info["dtype_names"] == ["float32", "bfloat16"] and info["shapes"] == [[4], [3, 2]]
    assert [list(h) for h in info["ipc_handles"]] == [["GPU-test-uuid"], ["GPU-test-uuid"]]
    rebuild, args = info["ipc_handles"][0]["GPU-test-uuid"]
    assert torch.equal(rebuild(*args), torch.ones(4))  # a handle to the very tensor


def test_nccl_update_sets_up_the_group_once_then_broadcasts_packed(fake_vllm, tiny):
    gen = vllm_engine.VLLMGenerator(str(tiny), VLLMConfig(weight_transfer="nccl", tensor_parallel_size=2))
    weights = [("model.norm.weight", torch.ones(4))]
    gen.update_weights(weights)
    gen.update_weights(weights)
    order = names(fake_vllm)[1:]
    assert order.count("init_weight_transfer_engine") == 1 and order.count("trainer_init") == 1
    assert order[order.index("trainer_init") + 1:].count("update_weights") == 2
    init = dict(fake_vllm.calls)["init_weight_transfer_engine"]["init_info"]
    trainer = dict(fake_vllm.calls)["trainer_init"]
    assert (init["rank_offset"], init["world_size"], trainer["world_size"]) == (1, 3, 3)
    assert init["master_port"] == trainer["master_port"]
    update = next(a for n, a in fake_vllm.calls if n == "update_weights")["update_info"]
    assert update["packed"] is True and update["names"] == ["model.norm.weight"]
    sent_names, args = next(a for n, a in fake_vllm.calls if n == "trainer_send_weights")
    assert sent_names == ["model.norm.weight"] and args["group"] == "group" and args["packed"] is True
    assert order[-1] == "finish_weight_update"


def test_missing_vllm_says_how_to_install_it(monkeypatch, tiny):
    monkeypatch.setitem(sys.modules, "vllm", None)
    with pytest.raises(RuntimeError, match=r"pip install 'wmrl\[gpu\]'"):
        vllm_engine.VLLMGenerator(str(tiny), VLLMConfig())
