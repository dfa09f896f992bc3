"""SFT examples and their packing into training rows.

Many examples share one prompt (the same task overview with different reference replies), and the
prompt is most of the tokens. A *row* therefore holds one prompt followed by several targets; a
4-D attention mask lets each target see the prompt and its own earlier tokens only, and every target
gets the positions it would have right after the prompt. The loss of a row equals the sum of the
losses of its examples processed one by one (tested), at the price of reading the prompt once.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SFTExample:
    """Train ``target_ids`` given ``prompt_ids`` (loss on the target tokens only).

    ``target_ids`` should end with the end-of-turn token (``<|im_end|>``) so that the model learns to
    stop. ``kind`` labels the stream ("agent", "world_model", ...): losses are reported per kind.
    """

    prompt_ids: tuple[int, ...]
    target_ids: tuple[int, ...]
    kind: str = "agent"

    def __init__(self, prompt_ids: Sequence[int], target_ids: Sequence[int], kind: str = "agent") -> None:
        object.__setattr__(self, "prompt_ids", tuple(int(i) for i in prompt_ids))
        object.__setattr__(self, "target_ids", tuple(int(i) for i in target_ids))
        object.__setattr__(self, "kind", str(kind))
        if not self.prompt_ids or not self.target_ids:
            raise ValueError("an SFTExample needs a non-empty prompt and a non-empty target")


def examples_digest(examples: Sequence[SFTExample]) -> str:
    """sha256 over the examples in order (ids and kinds): the data part of the SFT cache key."""
    digest = hashlib.sha256()
    for ex in examples:
        for part in (ex.kind.encode("utf-8"), repr(ex.prompt_ids).encode(), repr(ex.target_ids).encode()):
            digest.update(len(part).to_bytes(8, "little") + part)
    return digest.hexdigest()


@dataclass(frozen=True)
class Row:
    """One forward pass: a prompt and the targets that share it (indices into the example list)."""

    prompt: tuple[int, ...]
    members: tuple[int, ...]

    def length(self, examples: Sequence[SFTExample]) -> int:
        return len(self.prompt) + sum(len(examples[i].target_ids) for i in self.members)


def pack_rows(examples: Sequence[SFTExample], max_tokens: int, seed: int) -> list[Row]:
    """One epoch's rows: examples grouped by prompt, shuffled by ``seed``, at most ``max_tokens`` each.

    A pure function of its arguments, so a resumed run sees exactly the rows it would have seen.
    """
    for i, ex in enumerate(examples):
        if len(ex.prompt_ids) + len(ex.target_ids) > max_tokens:
            raise ValueError(
                f"SFT example {i} ({ex.kind}) has {len(ex.prompt_ids)} prompt + {len(ex.target_ids)} target "
                f"tokens > sft.pack_tokens={max_tokens}; raise sft.pack_tokens or shorten the example"
            )
    rng = random.Random(seed)
    order = list(range(len(examples)))
    rng.shuffle(order)
    groups: dict[tuple[int, ...], list[int]] = {}
    for i in order:  # groups in order of first appearance after the shuffle, members shuffled too
        groups.setdefault(examples[i].prompt_ids, []).append(i)
    rows: list[Row] = []
    for prompt, members in groups.items():
        current: list[int] = []
        used = len(prompt)
        for i in members:
            size = len(examples[i].target_ids)
            if current and used + size > max_tokens:
                rows.append(Row(prompt, tuple(current)))
                current, used = [], len(prompt)
            current.append(i)
            used += size
        rows.append(Row(prompt, tuple(current)))
    rng.shuffle(rows)
    return rows


@dataclass
class PackedRow:
    """Tensors for one row: ``input_ids``/``position_ids`` (1, T), additive ``attention_mask``
    (1, 1, T, T), and the loss terms: logits at ``logit_index`` predict ``labels``."""

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    attention_mask: torch.Tensor
    logit_index: torch.Tensor
    labels: torch.Tensor
    kinds: list[str]  # kind of each loss term


def build_row(row: Row, examples: Sequence[SFTExample], dtype: torch.dtype = torch.float32) -> PackedRow:
    prompt_len = len(row.prompt)
    ids = list(row.prompt)
    positions = list(range(prompt_len))
    spans: list[tuple[int, int]] = []  # [start, end) of each target in the row
    logit_index: list[int] = []
    labels: list[int] = []
    kinds: list[str] = []
    for i in row.members:
        target = examples[i].target_ids
        start = len(ids)
        ids.extend(target)
        positions.extend(range(prompt_len, prompt_len + len(target)))
        spans.append((start, len(ids)))
        # The first target token is predicted from the prompt's last position, the rest from their
        # predecessor inside the same target.
        logit_index.extend([prompt_len - 1, *range(start, start + len(target) - 1)])
        labels.extend(target)
        kinds.extend([examples[i].kind] * len(target))
    total = len(ids)
    allowed = torch.zeros(total, total, dtype=torch.bool)
    allowed[:prompt_len, :prompt_len] = torch.ones(prompt_len, prompt_len, dtype=torch.bool).tril()
    for start, end in spans:
        allowed[start:end, :prompt_len] = True
        allowed[start:end, start:end] = torch.ones(end - start, end - start, dtype=torch.bool).tril()
    mask = torch.zeros(total, total, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)
    return PackedRow(
        input_ids=torch.tensor([ids]),
        position_ids=torch.tensor([positions]),
        attention_mask=mask[None, None],
        logit_index=torch.tensor(logit_index),
        labels=torch.tensor(labels),
        kinds=kinds,
    )
