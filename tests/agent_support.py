"""Test helpers for the agent and the world model: a tokenizer trained here with HF ``tokenizers`` and
a ChatML template, a tiny real ``Qwen3ForCausalLM``, a plain transformers sampler, and a scripted
generator that replies with given texts (for the parsing and token bookkeeping paths)."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from wmrl.generation.base import Generation, SamplingParams

CHATML = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
CORPUS = [
    "import pandas as pd\nimport numpy as np\nfrom sklearn.ensemble import RandomForestClassifier\n",
    "train = pd.read_csv(f'{DATA_DIR}/train.csv')\nsub.to_csv(SUBMISSION_PATH, index=False)\n",
    "We fit a random forest on all features. The target is `label`. Then we write the submission.",
    '{"reason": "fine", "verdict": "pass", "confidence": 0.9, "error_type": null, "error_line": null}',
    "Execution finished (status: ok). Valid submission. Position Score 0.5. Traceback KeyError line",
] * 20


@functools.lru_cache(maxsize=1)
def tokenizer() -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS, trainer=trainer)
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                 additional_special_tokens=["<|im_start|>", "<|im_end|>"], model_max_length=100000)
    hf.chat_template = CHATML
    return hf


def tiny_model(seed: int = 0, vocab: int = 600, hidden: int = 32, layers: int = 1, initializer_range: float = 0.02):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    config = Qwen3Config(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=8192,
                         initializer_range=initializer_range, tie_word_embeddings=True)
    return Qwen3ForCausalLM(config).eval()


class HFGenerator:
    """A plain (unbatched) transformers sampler: greedy at temperature 0, else seeded sampling."""

    def __init__(self, model, tok) -> None:
        self.model, self.tokenizer = model, tok

    @torch.no_grad()
    def generate(self, prompts: Sequence[list[int]], params: SamplingParams,
                 seeds: Sequence[int] | None = None) -> list[Generation]:
        start = time.perf_counter()
        out = []
        for k, prompt in enumerate(prompts):
            gen = torch.Generator().manual_seed(int(seeds[k]) if seeds else params.seed)
            ids, logps, past = list(prompt), [], None
            new: list[int] = []
            finish = "length"
            for _ in range(params.max_new_tokens):
                inp = torch.tensor([ids if past is None else ids[-1:]])
                res = self.model(input_ids=inp, past_key_values=past, use_cache=True)
                past = res.past_key_values
                logits = res.logits[0, -1].float()
                if params.temperature == 0:
                    token = int(logits.argmax())
                    logp = torch.log_softmax(logits, -1)[token]
                else:
                    probs = torch.softmax(logits / params.temperature, -1)
                    token = int(torch.multinomial(probs, 1, generator=gen))
                    logp = torch.log(probs[token])
                ids.append(token)
                new.append(token)
                logps.append(float(logp))
                if token == self.tokenizer.eos_token_id:
                    finish = "stop"
                    break
            out.append(Generation(new, logps, self.tokenizer.decode(new, skip_special_tokens=True), finish, 0.0))
        seconds = (time.perf_counter() - start) / max(len(out), 1)
        for g in out:
            g.seconds = seconds
        return out

    def update_weights(self, named_tensors) -> None:  # pragma: no cover - not used by these tests
        raise NotImplementedError


class ScriptedGenerator:
    """Replies with ``reply(prompt_ids, call_index)`` texts, tokenised and ended with ``<|im_end|>``;
    records every call's prompts so tests can check what the model was really shown."""

    def __init__(self, reply: Callable[[list[int], int], str], tok=None, end: bool = True) -> None:
        self.tokenizer = tok or tokenizer()
        self.reply = reply
        self.end = end
        self.calls: list[list[list[int]]] = []

    def generate(self, prompts, params, seeds=None) -> list[Generation]:
        self.calls.append([list(p) for p in prompts])
        out = []
        for prompt in prompts:
            text = self.reply(list(prompt), len(self.calls) - 1)
            ids = list(self.tokenizer.encode(text, add_special_tokens=False))
            ids = ids[: params.max_new_tokens]
            finish = "length"
            if self.end and len(ids) < params.max_new_tokens:
                ids.append(self.tokenizer.eos_token_id)
                finish = "stop"
            out.append(Generation(ids, [-0.5] * len(ids), self.tokenizer.decode(ids, skip_special_tokens=True),
                                  finish, 0.01))
        return out

    def update_weights(self, named_tensors) -> None:  # pragma: no cover
        raise NotImplementedError
