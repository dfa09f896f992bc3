"""SFT examples and their packing into training rows.

Many examples share their prompt (one task overview with different reference replies) or a long
prompt head (the world model's system prompt and check header), and prompts are most of the tokens.
A *row* therefore holds a shared prefix followed by several segments (the rest of one example's
prompt, then its target); a 4-D attention mask lets each segment see the prefix and its own earlier
tokens only, and every segment gets the positions it would have right after the prefix. The loss of
a row equals the sum of the losses of its examples processed one by one (tested), at the price of
reading the shared prefix once.
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


def _common_prefix(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


@dataclass(frozen=True)
class Row:
    """One forward pass: a shared ``prefix`` and the examples packed after it (indices into the list).

    Each member contributes the rest of its prompt (``prompt_ids[len(prefix):]``) and its target."""

    prefix: tuple[int, ...]
    members: tuple[int, ...]

    def length(self, examples: Sequence[SFTExample]) -> int:
        return len(self.prefix) + sum(
            len(examples[i].prompt_ids) - len(self.prefix) + len(examples[i].target_ids) for i in self.members
        )


def pack_rows(examples: Sequence[SFTExample], max_tokens: int, seed: int) -> list[Row]:
    """One epoch's rows, at most ``max_tokens`` each, in an order shuffled by ``seed``.

    Examples are sorted by prompt, so that those sharing a prompt (one task's replies) or a long
    prompt head (the system prompt and check header of world-model checks) are neighbours, and a row
    grows greedily while the shared part keeps the row shorter than the examples one by one would be.
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
    rng.shuffle(order)  # ties (identical prompts) keep a seeded order
    order.sort(key=lambda i: examples[i].prompt_ids)
    rows: list[Row] = []
    prefix: tuple[int, ...] = ()
    members: list[int] = []
    used = 0  # sum of prompt + target lengths of the members
    for i in order:
        ex = examples[i]
        size = len(ex.prompt_ids) + len(ex.target_ids)
        if members:
            shared = _common_prefix(prefix, ex.prompt_ids)
            # Row length if i joins: the shared prefix once, everything else per member.
            joined = used + size - shared * len(members)
            if shared > 0 and joined <= max_tokens:
                prefix, members, used = prefix[:shared], [*members, i], used + size
                continue
            rows.append(Row(prefix, tuple(members)))
        prefix, members, used = ex.prompt_ids, [i], size
    if members:
        rows.append(Row(prefix, tuple(members)))
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
    shared = len(row.prefix)
    ids = list(row.prefix)
    positions = list(range(shared))
    spans: list[tuple[int, int]] = []  # [start, end) of each member's segment (rest of prompt + target)
    logit_index: list[int] = []
    labels: list[int] = []
    kinds: list[str] = []
    for i in row.members:
        ex = examples[i]
        segment = ex.prompt_ids[shared:] + ex.target_ids
        start = len(ids)
        ids.extend(segment)
        positions.extend(range(shared, shared + len(segment)))
        spans.append((start, len(ids)))
        # Target token k is predicted from the position before it: the last prompt token (in the
        # shared prefix when the member has no prompt of its own left) or the previous target token.
        first = start + len(ex.prompt_ids) - shared  # row index of the first target token
        logit_index.extend([first - 1 if first > start else shared - 1, *range(first, first + len(ex.target_ids) - 1)])
        labels.extend(ex.target_ids)
        kinds.extend([ex.kind] * len(ex.target_ids))
    total = len(ids)
    allowed = torch.zeros(total, total, dtype=torch.bool)
    allowed[:shared, :shared] = torch.ones(shared, shared, dtype=torch.bool).tril()
    for start, end in spans:
        allowed[start:end, :shared] = True
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
