"""The transformers generation backend: seeded, batched sampling with exact log-probs and live weight updates."""

from __future__ import annotations

import pytest
import torch
from models_support import build_tiny

from wmrl.generation.base import SamplingParams
from wmrl.generation.config import GenerationConfig
from wmrl.generation.factory import build_generator
from wmrl.generation.hf import TransformersGenerator, request_seeds


@pytest.fixture(scope="module")
def generator(tmp_path_factory) -> TransformersGenerator:
    torch.set_num_threads(1)  # shared 2-core machine: one thread is faster than two fighting
    path = build_tiny(tmp_path_factory.mktemp("cache"))
    return build_generator(path, GenerationConfig(device="cpu", batch_size=4))


@pytest.fixture(scope="module")
def prompts(generator):
    tok = generator.tokenizer
    texts = ["Solve iris.", "Solve the wine task with a forest.", "Hi", "Write code for digits now please."]
    return [tok.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True, tokenize=False)
            for t in texts]


@pytest.fixture(scope="module")
def prompt_ids(generator, prompts):
    return [generator.tokenizer.encode(p, add_special_tokens=False) for p in prompts]


SAMPLE = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=12, seed=7)


def test_same_seed_gives_the_same_tokens_and_logprobs(generator, prompt_ids):
    a = generator.generate(prompt_ids, SAMPLE)
    b = generator.generate(prompt_ids, SAMPLE)
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    assert [g.logprobs for g in a] == [g.logprobs for g in b]


def test_another_seed_gives_other_tokens(generator, prompt_ids):
    a = generator.generate(prompt_ids, SAMPLE)
    b = generator.generate(prompt_ids, SamplingParams(1.0, 1.0, 12, seed=8))
    assert [g.token_ids for g in a] != [g.token_ids for g in b]


def test_a_request_samples_the_same_alone_or_in_a_batch(generator, prompt_ids):
    batched = generator.generate(prompt_ids, SAMPLE)
    seeds = request_seeds(SAMPLE, len(prompt_ids), None)
    alone = generator.generate([prompt_ids[1]], SAMPLE, seeds=[seeds[1]])
    assert alone[0].token_ids == batched[1].token_ids


def test_logprobs_equal_a_forward_pass_log_softmax_at_the_sampled_tokens(generator, prompt_ids):
    for prompt, gen in zip(prompt_ids, generator.generate(prompt_ids, SAMPLE)):
        ids = torch.tensor([prompt + gen.token_ids])
        with torch.no_grad():
            logp = torch.log_softmax(generator.model(input_ids=ids).logits[0].float(), dim=-1)
        expected = [float(logp[len(prompt) - 1 + k, t]) for k, t in enumerate(gen.token_ids)]
        assert gen.logprobs == pytest.approx(expected, abs=1e-5)


def test_temperature_zero_is_greedy_decoding(generator, prompt_ids):
    gen = generator.generate([prompt_ids[0]], SamplingParams(temperature=0.0, max_new_tokens=8))[0]
    ids = torch.tensor([prompt_ids[0]])
    reference = generator.model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=8,
                                         eos_token_id=generator.stop_ids, pad_token_id=generator.pad_id)
    assert gen.token_ids == reference[0, ids.shape[1]:].tolist()


def test_a_tiny_top_p_keeps_only_the_most_likely_token(generator, prompt_ids):
    greedy = generator.generate(prompt_ids, SamplingParams(temperature=0.0, max_new_tokens=6))
    nucleus = generator.generate(prompt_ids, SamplingParams(temperature=1.0, top_p=1e-6, max_new_tokens=6, seed=3))
    assert [g.token_ids for g in nucleus] == [g.token_ids for g in greedy]


def test_generation_ends_at_max_new_tokens_with_reason_length(generator, prompt_ids):
    gens = generator.generate(prompt_ids, SamplingParams(max_new_tokens=5, seed=1))
    for gen in gens:
        stopped = gen.finish_reason == "stop"
        assert len(gen.token_ids) == 5 or stopped
        assert stopped == (gen.token_ids[-1] in generator.stop_ids)
        assert len(gen.logprobs) == len(gen.token_ids) and gen.seconds > 0


def test_update_weights_changes_outputs_in_place_and_stops_at_end_of_turn(generator, prompt_ids):
    before = generator.generate(prompt_ids, SAMPLE)
    saved = {k: v.clone() for k, v in generator.model.state_dict().items()}
    param = generator.model.model.norm.weight
    try:
        # Zero hidden states give equal logits; the argmax is then id 0, <|endoftext|>: a stop token.
        generator.update_weights([("model.norm.weight", torch.zeros_like(param))])
        assert generator.model.model.norm.weight is param  # the live tensor, not a reloaded model
        after = generator.generate(prompt_ids, SamplingParams(temperature=0.0, max_new_tokens=12))
        assert all(g.token_ids == [0] and g.finish_reason == "stop" and g.text == "" for g in after)
        assert [g.token_ids for g in after] != [g.token_ids for g in before]
    finally:
        generator.model.load_state_dict(saved)
    assert [g.token_ids for g in generator.generate(prompt_ids, SAMPLE)] == [g.token_ids for g in before]


def test_update_weights_names_an_unknown_parameter(generator):
    with pytest.raises(ValueError, match="no parameter named model.bogus.weight"):
        generator.update_weights([("model.bogus.weight", torch.zeros(2))])
