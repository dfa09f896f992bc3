"""Generation data-parallel over the learner's ranks (wmrl/generation/data_parallel.py): the path the
colocated vLLM placement takes with several learner ranks (one engine per rank), run on CPU with the
transformers backend (``generation.data_parallel``) and 2 gloo ranks under ``torchrun``
(tests/generation_script.py). vLLM's own sleep/wake around each share is the colocation schedule's,
tested in test_generation_colocation.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from learner_support import run_ranks, tiny_model_dir

from wmrl.config import load_config
from wmrl.config_checks import ConfigError
from wmrl.generation.config import GenerationConfig, VLLMConfig
from wmrl.generation.data_parallel import share

SCRIPT = Path(__file__).with_name("generation_script.py")


def test_shares_cover_every_request_once_in_order_sizes_within_one():
    for n in range(12):
        for world in (1, 2, 3, 7):
            parts = [share(n, r, world) for r in range(world)]
            assert [i for p in parts for i in p] == list(range(n))
            assert max(map(len, parts)) - min(map(len, parts)) <= 1


def test_which_placements_are_data_parallel():
    colocated, dedicated = VLLMConfig(), VLLMConfig(placement="dedicated", inference_gpus=1)
    assert GenerationConfig(backend="vllm", vllm=colocated).data_parallel_over(8)
    assert not GenerationConfig(backend="vllm", vllm=colocated).data_parallel_over(1)
    assert not GenerationConfig(backend="vllm", vllm=dedicated).data_parallel_over(8)
    assert not GenerationConfig().data_parallel_over(2)  # transformers: rank 0 alone unless asked
    assert GenerationConfig(data_parallel=True).data_parallel_over(2)
    with pytest.raises(ConfigError, match=r"generation.data_parallel is for the transformers backend"):
        load_config(None, ["generation.backend=vllm", "generation.data_parallel=true"])


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_two_ranks_each_draw_a_share_and_both_engines_serve_the_synced_weights(tmp_path):
    """Before a step, every request's generation from the two ranks equals what one engine draws for it
    with the same seed; after a learner step and the weight sync, too: the follower's engine got the new
    weights (a stale engine would draw its share from the old ones), and they are new (log-probs moved)."""
    model = tiny_model_dir(tmp_path / "model")
    out = tmp_path / "out.json"
    run_ranks(SCRIPT, ["--model", str(model), "--out", str(out)], ranks=2)
    result = json.loads(out.read_text())
    assert result["world_size"] == 2 and result["data_parallel"] == "DataParallelGenerator"
    for call in ("before", "after"):
        assert result[call]["every"] == result[call]["alone"], call
    moved = [abs(a - b) for (_, la), (_, lb) in zip(result["before"]["alone"], result["after"]["alone"])
             for a, b in zip(la, lb)]
    assert max(moved) > 1e-3
