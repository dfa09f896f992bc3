"""The vLLM backend's calls, against stand-in ``vllm`` modules that record them (no GPU or vLLM here).

The calls are the ones a cluster makes: the engine's constructor arguments, one SamplingParams per
request, and the weight-transfer sequence for ``ipc`` and ``nccl``.
"""

from __future__ import annotations

import os
import sys
import types
from dataclasses import dataclass, field

import pytest
import torch
from models_support import build_tiny
from torch.multiprocessing.reductions import rebuild_tensor

from wmrl.config_checks import ConfigError
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


# The worker side's dataclass fields in the two layouts of vLLM's API that wmrl supports, read from the
# released sources (vllm/distributed/weight_transfer/{nccl_common,nccl_engine,ipc_engine}.py): vLLM
# builds each dataclass from the dict it is sent, so an unknown key fails the call.
FIELDS = {
    (0, 27): {"nccl_init": {"master_address", "master_port", "rank_offset", "world_size"},
              "nccl_update": {"names", "dtype_names", "shapes", "packed", "packed_buffer_size_bytes",
                              "packed_num_buffers"}},
    (0, 33): {"nccl_init": {"master_address", "master_port", "rank_offset", "world_size", "nccl_unique_id_b64",
                            "packed", "packed_buffer_size_bytes", "packed_num_buffers"},
              "nccl_update": {"names", "dtype_names", "shapes"}},
}
IPC_INIT = {"packed"}
# The EngineArgs fields wmrl passes to vllm.LLM, present in both releases (vllm/engine/arg_utils.py); LLM
# hands its keyword arguments to EngineArgs, which refuses unknown ones.
ENGINE_ARGS = {"model", "tokenizer", "dtype", "seed", "tensor_parallel_size", "gpu_memory_utilization",
               "max_model_len", "enforce_eager", "enable_prefix_caching", "enable_sleep_mode",
               "weight_transfer_config", "language_model_only"}
# LLM.wake_up(tags): "Values must be in ("weights", "kv_cache", "scheduling")" (vllm/entrypoints/llm.py).
WAKE_TAGS = {"weights", "kv_cache", "scheduling"}
GIB = 2**30
IPC_UPDATE = {"names", "dtype_names", "shapes", "ipc_handles", "ipc_handles_pickled", "tensor_sizes"}


def _check_keys(what: str, info: dict, allowed: set[str]) -> None:
    unknown = set(info) - allowed
    if unknown:
        raise ValueError(f"Invalid {what}: unexpected keyword argument(s) {sorted(unknown)}")


@pytest.fixture(params=["0.27.0", "0.33.0"])
def fake_vllm(request, monkeypatch):
    """A stand-in for vLLM of the given release: records every call and checks each request as its
    worker does (fields, start before update); the NCCL group and broadcast are recorded, not run."""
    rec = Recorder()
    version = request.param
    fields = FIELDS[tuple(int(x) for x in version.split(".")[:2])]

    class LLM:
        def __init__(self, **kwargs):
            _check_keys("EngineArgs", kwargs, ENGINE_ARGS)
            rec.calls.append(("LLM", kwargs))
            rec.visible_at_start = os.environ.get("CUDA_VISIBLE_DEVICES")
            self.backend = kwargs["weight_transfer_config"].backend
            self.sleep_mode = kwargs.get("enable_sleep_mode", False)
            self.sleeping: set[str] = set()
            self.active = False
            self.packed = False

        def sleep(self, level=1, mode="abort"):
            # vLLM's executor: level 1 offloads the weights, level 2 discards them; both free the KV
            # cache (and sleep mode must be on, or the cumem allocator never tagged the memory).
            if not self.sleep_mode:
                raise RuntimeError("sleep mode is not enabled (enable_sleep_mode=False)")
            assert level in (1, 2) and mode == "abort"
            self.sleeping = {"weights", "kv_cache"}
            rec.calls.append(("sleep", level))

        def wake_up(self, tags=None):
            unknown = set(tags or ()) - WAKE_TAGS
            if unknown:
                raise ValueError(f"unknown wake_up tags {sorted(unknown)}")
            self.sleeping -= set(tags) if tags else set(self.sleeping)
            rec.calls.append(("wake_up", list(tags) if tags else None))

        def generate(self, prompts, params, use_tqdm=True):
            assert not self.sleeping, f"generate while {self.sleeping} sleep"
            rec.calls.append(("generate", (prompts, params)))
            outs = []
            for p in prompts:
                ids = [5, 6, 2] if len(p["prompt_token_ids"]) % 2 else [7, 8, 9]
                done = types.SimpleNamespace(token_ids=ids, text="abc", finish_reason="stop" if ids[-1] == 2 else "length",
                                             logprobs=[{t: FakeLogprob(-0.5 * (k + 1))} for k, t in enumerate(ids)])
                outs.append(types.SimpleNamespace(outputs=[done]))
            return outs

        def init_weight_transfer_engine(self, request):
            info = request["init_info"]
            _check_keys("init_info", info, fields["nccl_init"] if self.backend == "nccl" else IPC_INIT)
            self.packed = info.get("packed", False)
            rec.calls.append(("init_weight_transfer_engine", request))

        def start_weight_update(self):
            self.active = True
            rec.calls.append(("start_weight_update", None))

        def update_weights(self, request):
            if not self.active:
                raise RuntimeError("start_weight_update must be called before update_weights.")
            info = request["update_info"]
            _check_keys("update_info", info, fields["nccl_update"] if self.backend == "nccl" else IPC_UPDATE)
            if self.backend == "ipc":
                # The worker rebuilds each tensor from the handle's argument tuple (on a GPU with
                # rebuild_cuda_tensor after pointing args[6] at its device; here the CPU rebuild).
                info["rebuilt"] = [rebuild_tensor(*h["GPU-test-uuid"]) for h in info["ipc_handles"]]
            rec.calls.append(("update_weights", request))

        def finish_weight_update(self):
            self.active = False
            rec.calls.append(("finish_weight_update", None))

        def reset_prefix_cache(self):
            rec.calls.append(("reset_prefix_cache", None))

    def sampling_params(**kwargs):
        return types.SimpleNamespace(**kwargs)

    class WeightTransferConfig:
        def __init__(self, backend):
            self.backend = backend

    def trainer_init(info):
        assert set(info) == {"master_address", "master_port", "world_size"}
        rec.calls.append(("trainer_init", info))
        return "group"

    def packed_nccl_broadcast_producer(iterator, group, src, post_iter_func):
        rec.calls.append(("broadcast", ([n for n, _ in iterator], group, src)))

    modules = {
        "vllm": types.SimpleNamespace(LLM=LLM, SamplingParams=sampling_params, __version__=version),
        "vllm.config": types.SimpleNamespace(WeightTransferConfig=WeightTransferConfig),
        "vllm.distributed.weight_transfer.nccl_common": types.SimpleNamespace(trainer_init=trainer_init),
        "vllm.distributed.weight_transfer.packed_tensor": types.SimpleNamespace(
            packed_nccl_broadcast_producer=packed_nccl_broadcast_producer),
    }
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(vllm_engine, "gpu_uuid", lambda device: "GPU-test-uuid")
    # Two 80 GB GPUs with 70 GB free each (the engine's start-up check reads them; there is no GPU here).
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (70 * GIB, 80 * GIB))
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    monkeypatch.setenv("SLURMD_NODENAME", "gpu-node-17")
    monkeypatch.delenv("VLLM_ALLOW_INSECURE_SERIALIZATION", raising=False)
    rec.version = version
    return rec


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny(tmp_path_factory.mktemp("cache"))


def names(rec: Recorder) -> list[str]:
    return [name for name, _ in rec.calls]


def test_engine_is_built_from_the_config_with_native_weight_transfer(fake_vllm, tiny):
    cfg = GenerationConfig(backend="vllm", vllm=VLLMConfig(gpu_memory_utilization=0.3, max_model_len=8192))
    gen = build_generator(tiny, cfg, colocated=True)
    (_, kwargs), (init, request) = fake_vllm.calls
    assert kwargs["model"] == str(tiny) and kwargs["tokenizer"] == str(tiny)
    assert kwargs["weight_transfer_config"].backend == "ipc"
    assert (kwargs["gpu_memory_utilization"], kwargs["max_model_len"], kwargs["tensor_parallel_size"]) == (0.3, 8192, 1)
    assert (init, request) == ("init_weight_transfer_engine", {"init_info": {"packed": False}})  # one handle per tensor
    assert gen.tokenizer.eos_token == "<|im_end|>"
    import os

    assert os.environ["VLLM_ALLOW_INSECURE_SERIALIZATION"] == "1"  # IPC handles are pickled


def test_auto_transfer_is_nccl_when_vllm_has_its_own_gpus(fake_vllm, tiny):
    gen = vllm_engine.VLLMGenerator(str(tiny), VLLMConfig(tensor_parallel_size=2), colocated=False)
    assert gen.transfer == "nccl" and fake_vllm.calls[0][1]["weight_transfer_config"].backend == "nccl"


def test_ipc_with_tensor_parallelism_is_refused(fake_vllm, tiny):
    with pytest.raises(ConfigError, match="weight_transfer=ipc needs generation.vllm.tensor_parallel_size=1"):
        GenerationConfig(vllm=VLLMConfig(weight_transfer="ipc", tensor_parallel_size=2)).validate()
    with pytest.raises(ValueError, match="tensor_parallel_size=1"):
        vllm_engine.VLLMGenerator(str(tiny), VLLMConfig(tensor_parallel_size=2), colocated=True)


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
    assert names(fake_vllm)[2:] == ["start_weight_update", "update_weights", "finish_weight_update",
                                    "reset_prefix_cache"]  # no KV block of the old weights is reused
    info = fake_vllm.calls[3][1]["update_info"]
    assert info["names"] == ["model.norm.weight", "lm_head.weight"]
    assert info["dtype_names"] == ["float32", "bfloat16"] and info["shapes"] == [[4], [3, 2]]
    assert [list(h) for h in info["ipc_handles"]] == [["GPU-test-uuid"], ["GPU-test-uuid"]]
    assert torch.equal(info["rebuilt"][0], torch.ones(4))  # a handle to the very tensor
    assert torch.equal(info["rebuilt"][1], torch.zeros(3, 2, dtype=torch.bfloat16))


def test_nccl_update_sets_up_the_group_once_then_broadcasts_packed(fake_vllm, tiny):
    gen = vllm_engine.VLLMGenerator(str(tiny), VLLMConfig(weight_transfer="nccl", tensor_parallel_size=2))
    weights = [("model.norm.weight", torch.ones(4))]
    gen.update_weights(weights)
    gen.update_weights(weights)
    order = names(fake_vllm)[1:]
    assert order.count("init_weight_transfer_engine") == 1 and order.count("trainer_init") == 1
    assert order.index("trainer_init") < order.index("start_weight_update")  # the group exists before an update
    assert order.count("update_weights") == 2 and order.count("broadcast") == 2
    init = dict(fake_vllm.calls)["init_weight_transfer_engine"]["init_info"]
    trainer = dict(fake_vllm.calls)["trainer_init"]
    assert (init["rank_offset"], init["world_size"], trainer["world_size"]) == (1, 3, 3)
    assert init["master_port"] == trainer["master_port"]
    update = next(a for n, a in fake_vllm.calls if n == "update_weights")["update_info"]
    # The `packed` flag: in each update's info up to vLLM 0.27, in the init info from 0.28.
    packed_at_init = fake_vllm.version != "0.27.0"
    assert init.get("packed") is (True if packed_at_init else None)
    assert update.get("packed") is (None if packed_at_init else True)
    assert update["names"] == ["model.norm.weight"]
    assert next(a for n, a in fake_vllm.calls if n == "broadcast") == (["model.norm.weight"], "group", 0)
    assert order[-2:] == ["finish_weight_update", "reset_prefix_cache"]


def test_a_vision_language_checkpoint_gets_its_language_model_names_back(tiny, tmp_path):
    from transformers import Qwen3_5Config

    Qwen3_5Config().save_pretrained(tmp_path)  # a released Qwen3.5 checkpoint's config (vision + text)
    assert vllm_engine.is_composite(str(tmp_path)) and not vllm_engine.is_composite(str(tiny))
    assert vllm_engine.checkpoint_name("model.layers.0.mlp.up_proj.weight", True) == \
        "model.language_model.layers.0.mlp.up_proj.weight"
    assert vllm_engine.checkpoint_name("lm_head.weight", True) == "lm_head.weight"
    assert vllm_engine.checkpoint_name("model.layers.0.mlp.up_proj.weight", False) == "model.layers.0.mlp.up_proj.weight"


@pytest.mark.parametrize("version", ["0.26.1", "0.34.0"])
def test_an_unsupported_vllm_is_named_with_the_supported_range(fake_vllm, tiny, monkeypatch, version):
    monkeypatch.setattr(sys.modules["vllm"], "__version__", version)
    with pytest.raises(RuntimeError, match=rf"vLLM {version} is not supported: .*0.27 <= vLLM < 0.34"):
        vllm_engine.VLLMGenerator(str(tiny), VLLMConfig())


def test_the_gpu_extra_pins_the_supported_range():
    from pathlib import Path

    import tomllib

    project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    low, high = (".".join(map(str, v)) for v in vllm_engine.SUPPORTED_VLLM)
    # the extra also holds the Qwen3.5 kernels (tests/test_containers_pins.py); vLLM's entry is this range
    assert [r for r in project["project"]["optional-dependencies"]["gpu"] if r.startswith("vllm")] == \
        [f"vllm>={low},<{high}"]


def test_missing_vllm_says_how_to_install_it(monkeypatch, tiny):
    monkeypatch.setitem(sys.modules, "vllm", None)
    with pytest.raises(RuntimeError, match=r"pip install 'wmrl\[gpu\]'"):
        vllm_engine.VLLMGenerator(str(tiny), VLLMConfig())


def test_a_colocated_engine_has_sleep_mode_and_sleeps_and_wakes_by_tag(fake_vllm, tiny):
    gen = vllm_engine.VLLMGenerator(str(tiny), VLLMConfig(placement="colocated", sleep_level=2))
    assert fake_vllm.calls[0][1]["enable_sleep_mode"] is True
    gen.sleep()
    gen.wake_up(["weights"])
    gen.wake_up(["kv_cache"])
    gen.generate([[1, 2]], SamplingParams())
    assert [c for c in fake_vllm.calls if c[0] in ("sleep", "wake_up")] == [
        ("sleep", 2), ("wake_up", ["weights"]), ("wake_up", ["kv_cache"])]


def test_a_dedicated_engine_starts_on_the_last_gpus_without_sleep_mode(fake_vllm, tiny, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")
    gen = vllm_engine.VLLMGenerator(str(tiny), VLLMConfig(placement="dedicated", inference_gpus=1))
    kwargs = fake_vllm.calls[0][1]
    assert kwargs["enable_sleep_mode"] is False and gen.transfer == "nccl"
    assert fake_vllm.visible_at_start == "5"  # the engine's processes see only the inference GPU
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "4,5"  # restored for the learner's ranks


def test_dedicated_needs_a_gpu_left_for_the_learner(fake_vllm, tiny):
    with pytest.raises(ValueError, match="inference_gpus=2 needs more GPUs than that in the allocation"):
        vllm_engine.VLLMGenerator(str(tiny), VLLMConfig(placement="dedicated", inference_gpus=2,
                                                          tensor_parallel_size=2))


def test_the_nccl_transfer_address_comes_from_the_allocation_not_loopback(fake_vllm, tiny, monkeypatch):
    gen = vllm_engine.VLLMGenerator(str(tiny), VLLMConfig(placement="dedicated", inference_gpus=1))
    gen.update_weights([("model.norm.weight", torch.ones(4))])
    init = dict(fake_vllm.calls)["init_weight_transfer_engine"]["init_info"]
    assert init["master_address"] == dict(fake_vllm.calls)["trainer_init"]["master_address"] == "gpu-node-17"
    monkeypatch.setenv("MASTER_ADDR", "10.1.2.3")
    assert vllm_engine.transfer_address() == "10.1.2.3"


def test_gpu_memory_utilization_above_the_free_memory_is_refused_before_vllm_starts(fake_vllm, tiny, monkeypatch):
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (20 * GIB, 80 * GIB))
    with pytest.raises(ValueError, match=r"generation.vllm.gpu_memory_utilization=0.4 reserves 32.0 GiB .*"
                                         r"only 20.0 GiB is free.*at most 0.25"):
        vllm_engine.VLLMGenerator(str(tiny), VLLMConfig(gpu_memory_utilization=0.4))
    assert not fake_vllm.calls  # the engine never started


@pytest.mark.parametrize(("changes", "message"), [
    ({"placement": "dedicated"}, "placement=dedicated needs generation.vllm.inference_gpus >= "),
    ({"placement": "dedicated", "inference_gpus": 1, "weight_transfer": "ipc"}, "weight_transfer=ipc needs the"),
    ({"inference_gpus": 1}, "inference_gpus=1 is only for placement=dedicated"),
    ({"placement": "remote"}, "placement"),
    ({"sleep_level": 3}, "sleep_level"),
])
def test_placement_settings_are_checked_at_load(changes, message):
    with pytest.raises(ConfigError, match=message):
        GenerationConfig(vllm=VLLMConfig(**changes)).validate()


def test_the_factory_follows_the_configured_placement(fake_vllm, tiny):
    cfg = GenerationConfig(backend="vllm", vllm=VLLMConfig(placement="dedicated", inference_gpus=1))
    assert build_generator(tiny, cfg).transfer == "nccl"
    assert build_generator(tiny, GenerationConfig(backend="vllm")).transfer == "ipc"


def test_an_update_streams_in_chunks_between_one_start_and_one_finish(fake_vllm, tiny, monkeypatch):
    monkeypatch.setattr(vllm_engine, "SEND_CHUNK_BYTES", 32)  # 8 fp32 values per chunk
    gen = vllm_engine.VLLMGenerator(str(tiny), VLLMConfig(weight_transfer="nccl"))
    consumed: list[tuple[str, int]] = []  # (tensor, chunks already sent when the learner produced it)

    def stream():
        for i in range(3):
            consumed.append((f"w{i}", names(fake_vllm).count("update_weights")))
            yield f"model.w{i}", torch.ones(8)

    gen.update_weights(stream())
    order = names(fake_vllm)[1:]
    assert order.count("start_weight_update") == 1 and order.count("finish_weight_update") == 1
    assert order.count("update_weights") == 3 and order.count("broadcast") == 3
    updates = [a["update_info"]["names"] for n, a in fake_vllm.calls if n == "update_weights"]
    assert updates == [["model.w0"], ["model.w1"], ["model.w2"]]
    assert consumed == [("w0", 0), ("w1", 0), ("w2", 1)]  # read lazily: w0 was sent before w2 was made
