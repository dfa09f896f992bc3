"""A byte-level BPE tokenizer trained locally with HF ``tokenizers``, saved as a Qwen-style HF tokenizer.

Byte-level BPE encodes any text (every byte is in the base alphabet), so nothing is ever out of
vocabulary; the merges are learned on the texts the tiny model will read and write (task overviews,
reference solutions, prompts). Unlike GPT-2/Qwen, the pre-tokenizer splits only after newlines, so a
merge may span words and a frequent line of code becomes one token: on the built-in pool a reference
solution is ~42 tokens instead of ~464 with the word-level split, which is what makes SFT and sampling
fit on two CPU cores. The special tokens and the ChatML
chat template are Qwen's, so the prompt rendering code is the same for the tiny model and for a real
Qwen3/Qwen3.5 checkpoint.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

ENDOFTEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = (ENDOFTEXT, IM_START, IM_END)  # ids 0, 1, 2 in that order

# Qwen2.5/Qwen3 ChatML without the tool-calling and thinking branches (the tiny model uses neither).
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def train_bpe(texts: Iterable[str], vocab_size: int, min_frequency: int = 2) -> Tokenizer:
    """Train a byte-level BPE on ``texts``. The same texts in the same order give the same merges."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex("\n"), behavior="merged_with_previous"),  # pieces are lines
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def wrap_hf(tok: Tokenizer, model_max_length: int) -> PreTrainedTokenizerFast:
    """The HF tokenizer around ``tok`` with Qwen's special tokens: EOS ``<|im_end|>``, pad ``<|endoftext|>``."""
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=IM_END,
        pad_token=ENDOFTEXT,
        additional_special_tokens=[IM_START, IM_END],
        model_max_length=model_max_length,
        clean_up_tokenization_spaces=False,
    )
    hf.chat_template = CHAT_TEMPLATE
    return hf


def save_tokenizer(hf: PreTrainedTokenizerFast, out: Path) -> None:
    """``tokenizer.json``, ``chat_template.jinja`` and a ``tokenizer_config.json`` that transformers 4
    and 5 both read (vLLM releases pin either): the class is the generic fast tokenizer (transformers 5
    writes its own ``TokenizersBackend``, unknown to 4.x), the special tokens are a list under their
    4.x key, and the chat template is also inside the config for loaders that ignore the .jinja file."""
    hf.save_pretrained(str(out))
    path = Path(out) / "tokenizer_config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    config.pop("extra_special_tokens", None)
    config.pop("backend", None)
    config.update(
        tokenizer_class="PreTrainedTokenizerFast",
        additional_special_tokens=[IM_START, IM_END],
        bos_token=None,
        chat_template=CHAT_TEMPLATE,
    )
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
