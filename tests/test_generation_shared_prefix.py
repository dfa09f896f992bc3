"""Shared prefixes prefilled once (wmrl/generation/shared_prefix.py): the same answers as prefilling every
prompt whole, every distinct span prefilled once, a fallback for caches that would see the padding."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from models_support import build_tiny

from wmrl.generation.base import SamplingParams
from wmrl.generation.config import GenerationConfig
from wmrl.generation.factory import build_generator
from wmrl.generation.hf import TransformersGenerator
from wmrl.generation.shared_prefix import (
    ReservedLayer,
    SharedPrefixGenerator,
    _batches,
    plain_attention_only,
    prefix_tree,
    sharing_prefixes,
)
from wmrl.rollout import Submission
from wmrl.sandbox.probe import table_runtime
from wmrl.world_model.backends import InProcessBackend
from wmrl.world_model.config import WorldModelConfig
from wmrl.world_model.env import TaskCase, WorldModelEnvironment
from wmrl.world_model.precheck import DataInventory


@pytest.fixture(scope="module")
def generator(tmp_path_factory) -> TransformersGenerator:
    torch.set_num_threads(1)  # shared 2-core machine: one thread is faster than two fighting
    path = build_tiny(tmp_path_factory.mktemp("cache"), max_position_embeddings=4096)
    return build_generator(path, GenerationConfig(device="cpu", batch_size=4))


def test_the_tree_holds_every_distinct_span_once_parents_first():
    prompts = [[1, 2, 3, 4], [1, 2, 3, 5, 6], [1, 2, 7], [1, 2, 3, 4], [9]]
    nodes = prefix_tree(prompts)
    distinct_prefixes = {tuple(p[:k]) for p in prompts for k in range(1, len(p) + 1)}
    assert sum(n.end - n.start for n in nodes) == len(distinct_prefixes)
    for i, node in enumerate(nodes):
        assert node.parent < i and (node.parent == -1 or nodes[node.parent].end == node.start)
        assert node.depth == (0 if node.parent == -1 else nodes[node.parent].depth + 1)
    ends = {p: i for i, n in enumerate(nodes) for p in n.ends_here}
    assert sorted(ends) == list(range(len(prompts))) and ends[0] == ends[3]  # the same prompt ends once
    for p, i in ends.items():
        assert nodes[i].end == len(prompts[p]) and prompts[nodes[i].prompt][:nodes[i].end] == prompts[p]


def test_prefill_batches_keep_padding_within_the_slack():
    lengths = [644, 323, 290, 282, 282, 70, 70, 60, 1, 1]
    batches = _batches(list(range(len(lengths))), lengths, slack=1.25)
    assert sorted(m for b in batches for m in b) == list(range(len(lengths)))
    for batch in batches:
        longest = max(lengths[m] for m in batch)
        assert len(batch) * longest <= 1.25 * sum(lengths[m] for m in batch)
    assert [0] in batches  # the one long span is prefilled alone


def chat(generator, system: str, user: str) -> list[int]:
    tok = generator.tokenizer
    text = tok.apply_chat_template([{"role": "system", "content": system}, {"role": "user", "content": user}],
                                   add_generation_prompt=True, tokenize=False)
    return tok.encode(text, add_special_tokens=False)


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_tokens_and_logprobs_match_prefilling_every_prompt_whole(generator, temperature):
    system = "You predict what running the code prints. " * 3
    prompts = [chat(generator, system, f"Task {t}: predict {c} of the code print({t * 7}).")
               for t in ("iris", "wine", "digits") for c in ("errors", "score", "output")]
    prompts.append(chat(generator, "Another system prompt.", "Something else entirely."))
    params = SamplingParams(temperature=temperature, top_p=0.9 if temperature else 1.0, max_new_tokens=10, seed=3)
    seeds = [11 + i for i in range(len(prompts))]
    whole = generator.generate(prompts, params, seeds)
    shared = SharedPrefixGenerator(generator, max_rows=64).generate(prompts, params, seeds)
    assert [g.token_ids for g in shared] == [g.token_ids for g in whole]
    for a, b in zip(shared, whole, strict=True):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
        assert (a.text, a.finish_reason) == (b.text, b.finish_reason)


def test_the_same_prompt_and_seed_is_generated_once(generator, monkeypatch):
    a, b = chat(generator, "S.", "Code one."), chat(generator, "S.", "Code two, longer.")
    rows: list[int] = []
    decode = generator.decode
    monkeypatch.setattr(generator, "decode", lambda cache, logits, *rest: rows.append(len(logits)) or
                        decode(cache, logits, *rest))
    params = SamplingParams(temperature=0.0, max_new_tokens=4)
    out = SharedPrefixGenerator(generator).generate([a, b, a, a], params, seeds=[0, 0, 0, 5])
    assert rows == [3]  # a with seed 0 twice, once decoded; a with seed 5 is another request
    assert out[0].token_ids == out[2].token_ids
    assert [g.token_ids for g in out] == [g.token_ids for g in generator.generate([a, b, a, a], params, [0, 0, 0, 5])]


def test_rows_beyond_max_rows_go_in_further_trees(generator):
    prompts = [chat(generator, "S.", f"Case {i}.") for i in range(7)]
    params = SamplingParams(temperature=0.0, max_new_tokens=5)
    assert ([g.token_ids for g in SharedPrefixGenerator(generator, max_rows=3).generate(prompts, params)]
            == [g.token_ids for g in generator.generate(prompts, params)])


def test_a_reserved_layer_writes_into_its_room_then_appends():
    like = torch.zeros(2, 1, 0, 4)
    layer = ReservedLayer.empty(2, 3, 2, like)
    layer.put(0, 1, torch.ones(1, 2, 4), torch.ones(1, 2, 4))
    assert layer.get_seq_length() == 3 and layer.keys[0, 0, :, 0].tolist() == [0, 1, 1]
    keys, _ = layer.update(torch.full((2, 1, 2, 4), 2.0), torch.full((2, 1, 2, 4), 2.0))
    assert keys.shape[2] == 5 and keys[1, 0, :, 0].tolist() == [0, 0, 0, 2, 2]
    keys, _ = layer.update(torch.full((2, 1, 1, 4), 3.0), torch.full((2, 1, 1, 4), 3.0))  # past the room
    assert keys.shape[2] == 6 and keys[1, 0, -1, 0] == 3


def test_models_whose_caches_would_see_the_padding_use_the_plain_generator(generator, monkeypatch):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    assert plain_attention_only(generator.model)
    config = Qwen3Config(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=8,
                         layer_types=["sliding_attention", "full_attention"], sliding_window=8, use_sliding_window=True)
    windowed = TransformersGenerator(Qwen3ForCausalLM(config), generator.tokenizer)
    assert not plain_attention_only(windowed.model)
    shared = SharedPrefixGenerator(windowed)
    called = []
    monkeypatch.setattr(windowed, "generate", lambda *a, **k: called.append(1) or [])
    shared.generate([[1, 2, 3]], SamplingParams(max_new_tokens=2))
    assert called == [1]
    assert sharing_prefixes(shared.inner) is not shared.inner and sharing_prefixes(shared) is shared


# ---- the world model's verdicts, with and without the shared prefix (the must-show) ----

CODES = [
    ("import pandas as pd\ntrain = pd.read_csv(f'{DATA_DIR}/train.csv')\n"
    "train[['id', 'y']].to_csv(SUBMISSION_PATH, index=False)\n"),
    ("import pandas as pd\ntrain = pd.read_csv(f'{DATA_DIR}/train.csv')\nprint(len(train))\n"
    "train[['id', 'x']].to_csv(SUBMISSION_PATH, index=False)\n"),
]


def case(tmp: Path, name: str) -> TaskCase:
    public = tmp / name
    public.mkdir()
    (public / "train.csv").write_text("id,x,y\n1,0.5,1\n2,1.5,0\n")
    return TaskCase(f"Competition: {name}\n=== DATA INVENTORY ===\n- train.csv: id, x, y\nBegin.\n",
                    DataInventory.from_dir(public), 40)


def test_world_model_verdicts_are_identical_with_and_without_the_shared_prefix(generator, tmp_path):
    cases = {name: case(tmp_path, name) for name in ("iris", "wine")}
    cfg = WorldModelConfig(prompt_style="short", max_new_tokens=24, checks=["runtime", "submission", "quality"])
    submissions = [Submission(f"0/{g}/{k}/0", task, code) for g, task in enumerate(cases)
                   for k, code in enumerate(CODES + CODES[:1])]  # a group's duplicate submission too

    def feedback(gen):
        env = WorldModelEnvironment(InProcessBackend(gen, cfg.max_new_tokens, cfg.temperature, cfg.seed), cases,
                                    cfg, table_runtime())
        return [(f.key, f.score, f.valid, f.status, f.text, f.tokens, json.dumps(f.details, sort_keys=True))
                for f in env.evaluate(submissions)], env.stats()

    whole, whole_stats = feedback(generator)
    shared, shared_stats = feedback(sharing_prefixes(generator, cfg.batch_size))
    assert whole_stats["calls"] == 3 * len(submissions)
    assert shared == whole and shared_stats == whole_stats
