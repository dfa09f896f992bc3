"""Requests that share a token prefix are prefilled once (the ``transformers`` backend).

The world model's checks of one submission share their whole prompt up to ``CHECK:`` (system prompt,
task overview, numbered code: about 90% of the tokens on the tiny default), and the submissions of one
group share the system prompt and the overview. :class:`SharedPrefixGenerator` puts a batch's prompts
in a prefix tree (every distinct token span once) and prefills it level by level: a node's own tokens
run once, after a copy of its parent's KV-cache rows. This is transformers' documented prompt-cache
re-use (prefill the shared prefix once, copy the cache for each continuation), batched: the copy is an
index over the batch dimension. Then every request decodes together in
:meth:`~wmrl.generation.hf.TransformersGenerator.decode`, the plain generator's own loop. Requests with
the same prompt and seed are generated once.

Each request gets the tokens of prefilling its prompt whole: greedy decoding takes the argmax of the same
logits, and sampling draws from the request's own seeded ``torch.Generator`` in the same order, up to
the float rounding of a different padding layout (as between two batch compositions of the plain
generator). tests/test_generation_shared_prefix.py checks identical world-model verdicts.

Rows are padded in the middle ([parent's tokens][padding][own span]), which a plain attention layer
masks exactly; the cache of any other layer (sliding window, linear attention such as Qwen3.5's
Gated DeltaNet) would see the padding, so such models fall back to the plain generator.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import Cache, DynamicLayer

from wmrl.generation.base import Generation, Generator, SamplingParams
from wmrl.generation.hf import TransformersGenerator, request_seeds


@dataclass
class PrefixNode:
    """One span of the tree: tokens ``[start, end)`` of every prompt below it (``prompt`` is one of them)."""

    start: int
    end: int
    prompt: int
    parent: int  # index of the parent node, -1 for a root
    depth: int
    ends_here: list[int] = field(default_factory=list)  # prompts whose last token ends this span


def prefix_tree(prompts: Sequence[Sequence[int]]) -> list[PrefixNode]:
    """The compressed prefix tree of non-empty ``prompts``: parents before children, every distinct span once."""
    nodes: list[PrefixNode] = []
    todo: list[tuple[list[int], int, int, int]] = [(list(range(len(prompts))), 0, -1, 0)]
    while todo:
        members, start, parent, depth = todo.pop()
        shared = len(os.path.commonprefix([list(prompts[m][start:]) for m in members]))
        if shared == 0:  # only at the top: prompts that share not even their first token
            todo.extend(_by_next_token(prompts, members, start, parent, depth))
            continue
        end = start + shared
        nodes.append(PrefixNode(start, end, members[0], parent, depth,
                                [m for m in members if len(prompts[m]) == end]))
        longer = [m for m in members if len(prompts[m]) > end]
        todo.extend(_by_next_token(prompts, longer, end, len(nodes) - 1, depth + 1))
    return nodes


def _by_next_token(prompts: Sequence[Sequence[int]], members: list[int], start: int, parent: int,
                   depth: int) -> list[tuple[list[int], int, int, int]]:
    groups: dict[int, list[int]] = {}
    for m in members:
        groups.setdefault(prompts[m][start], []).append(m)
    return [(group, start, parent, depth) for group in groups.values()]


def sharing_prefixes(generator: Generator, max_rows: int | None = None) -> Generator:
    """``generator`` with shared prefixes prefilled once where it is a transformers one (vLLM has its own
    prefix cache)."""
    return SharedPrefixGenerator(generator, max_rows) if isinstance(generator, TransformersGenerator) else generator


def plain_attention_only(model: Any) -> bool:
    """Whether every layer's cache is a plain (full-attention) KV cache, which masks middle padding exactly."""
    return all(type(layer) is DynamicLayer for layer in DynamicCache(config=model.config).layers)


class SharedPrefixGenerator:
    """A :class:`~wmrl.generation.hf.TransformersGenerator` that prefills shared prefixes once.

    ``max_rows`` requests form one tree and decode together (default: the generator's ``batch_size``);
    a batch is cut in prompt order, so the requests that share a prefix stay together.
    """

    def __init__(self, generator: TransformersGenerator, max_rows: int | None = None) -> None:
        self.inner = generator
        self.max_rows = max_rows or generator.batch_size
        self.shares = plain_attention_only(generator.model)

    @property
    def tokenizer(self) -> Any:
        return self.inner.tokenizer

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        self.inner.update_weights(named_tensors)

    def generate(self, prompts: Sequence[list[int]], params: SamplingParams,
                 seeds: Sequence[int] | None = None) -> list[Generation]:
        if not self.shares:
            return self.inner.generate(prompts, params, seeds)
        if any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token")
        all_seeds = request_seeds(params, len(prompts), seeds)
        unique: dict[tuple[tuple[int, ...], int], int] = {}  # (prompt, seed) -> its generation
        of_request = [unique.setdefault((tuple(p), s), len(unique)) for p, s in zip(prompts, all_seeds, strict=True)]
        keys = list(unique)
        order = sorted(range(len(keys)), key=lambda u: keys[u])  # shared prefixes sit side by side
        out: list[Generation | None] = [None] * len(keys)
        for begin in range(0, len(order), self.max_rows):
            chunk = order[begin: begin + self.max_rows]
            gens = self._chunk([list(keys[u][0]) for u in chunk], params, [keys[u][1] for u in chunk])
            for u, gen in zip(chunk, gens, strict=True):
                out[u] = gen
        return [out[u] for u in of_request]  # type: ignore[misc]

    @torch.no_grad()
    def _chunk(self, prompts: list[list[int]], params: SamplingParams, seeds: list[int]) -> list[Generation]:
        started = time.perf_counter()
        gen = self.inner
        nodes = prefix_tree(prompts)
        waves: list[list[int]] = []  # the nodes of each depth: a wave's parents are all in the one before
        for i, node in enumerate(nodes):
            if node.depth == len(waves):
                waves.append([])
            waves[node.depth].append(i)
        parts: list[_Rows | None] = []  # the prefilled batches; None once no row of it is read again
        where: dict[int, tuple[int, int]] = {}  # node -> (its batch in parts, row)
        wave_parts: list[range] = []  # the batches of each wave, in parts
        for depth, wave in enumerate(waves):
            first_part = len(parts)
            for batch in _batches(wave, [nodes[i].end - nodes[i].start for i in wave]):
                spans = [nodes[i] for i in batch]
                room = max(node.end - node.start for node in spans)
                base = None
                if depth:  # one copy of each parent's row, with room for the span
                    parents = [where[node.parent] for node in spans]
                    base = _gathered(parts, parents, max(node.start for node in spans), room)
                for r, i in enumerate(batch):
                    where[i] = (len(parts), r)
                parts.append(self._prefill(spans, prompts, base))
            wave_parts.append(range(first_part, len(parts)))
            if depth:  # the wave before has been continued: keep only its rows that end a prompt
                _keep_ends(parts, wave_parts[depth - 1], waves[depth - 1], nodes, where)
        ends = {p: where[i] for i, node in enumerate(nodes) for p in node.ends_here}
        rows = _gathered(parts, [ends[p] for p in range(len(prompts))], max(map(len, prompts)), params.max_new_tokens)
        last = torch.tensor([[len(p) - 1] for p in prompts], device=gen.device)
        return gen.decode(rows.cache, rows.logits, rows.mask, last, params, seeds, started)

    def _prefill(self, spans: list[PrefixNode], prompts: list[list[int]], base: _Rows | None) -> _Rows:
        """Each node's span after its parent's row (``base``: one row per node, right-aligned)."""
        gen = self.inner
        device = gen.device
        tokens = [prompts[node.prompt][node.start: node.end] for node in spans]
        width = max(len(t) for t in tokens)
        # Each span right-aligned, so that the last column holds every row's last token.
        ids = torch.tensor([[gen.pad_id] * (width - len(t)) + list(t) for t in tokens], device=device)
        own = torch.tensor([[0] * (width - len(t)) + [1] * len(t) for t in tokens], device=device)
        mask = own if base is None else torch.cat([base.mask, own], dim=1)
        positions = torch.tensor([[node.start] for node in spans], device=device) + (own.cumsum(-1) - 1).clamp(min=0)
        cache = base.cache if base is not None else DynamicCache(config=gen.model.config)
        logits = gen.extend(ids, mask, positions, cache, logits_to_keep=1)
        return _Rows(cache, mask, logits)


@dataclass
class _Rows:
    """Cache rows of one batch (``cache.layers[j].keys``: [rows, heads, columns, dim]), the attention
    mask over their columns, the next token's logits."""

    cache: Any
    mask: torch.Tensor
    logits: torch.Tensor


def _batches(members: list[int], lengths: list[int], slack: float = 1.25) -> list[list[int]]:
    """``members`` cut into prefill batches of similar span lengths, each at most ``slack`` times its real
    tokens in padded columns: a long span (an overview) does not pad a wave of short ones (checks)."""
    out: list[list[int]] = []
    longest = real = 0
    for length, member in sorted(zip(lengths, members, strict=True), key=lambda lm: -lm[0]):
        if out and (len(out[-1]) + 1) * longest <= slack * (real + length):
            out[-1].append(member)
            real += length
        else:
            out.append([member])
            longest = real = length
    return out


def _keep_ends(parts: list[_Rows | None], batches: Iterable[int], wave: list[int], nodes: list[PrefixNode],
               where: dict[int, tuple[int, int]]) -> None:
    """Shrink the ``batches`` of ``wave`` (whose children are prefilled) to their rows that end a prompt."""
    for j in batches:
        part = parts[j]
        if part is None:
            continue
        mine = sorted((where[i][1], i) for i in wave if where[i][0] == j)
        ends = [(r, i) for r, i in mine if nodes[i].ends_here]
        if len(ends) == len(mine):
            continue
        if not ends:
            parts[j] = None
            continue
        parts[j] = _gathered([part], [(0, r) for r, _ in ends], part.mask.shape[1], 0)
        for k, (_, i) in enumerate(ends):
            where[i] = (j, k)


def _runs(mask_row: list[int]) -> list[tuple[int, int]]:
    """The [start, end) runs of ones in a 0/1 row."""
    runs: list[tuple[int, int]] = []
    for col, bit in enumerate(mask_row):
        if bit and runs and runs[-1][1] == col:
            runs[-1] = (runs[-1][0], col + 1)
        elif bit:
            runs.append((col, col + 1))
    return runs


def _gathered(parts: list[_Rows | None], picks: list[tuple[int, int]], width: int, room: int) -> _Rows:
    """Copies of the rows ``picks`` ((batch, row) each) in a new cache, each row's real columns (mask 1)
    right-aligned in ``width`` columns (padding left inside a row by its batch goes, so it costs no
    attention later), with ``room`` free columns per layer for the tokens that follow."""
    sources = {j: parts[j] for j, _ in picks}
    any_part = next(iter(sources.values()))
    assert any_part is not None
    layers = [ReservedLayer.empty(len(picks), width, room, layer.keys) for layer in any_part.cache.layers]
    mask = torch.zeros(len(picks), width, dtype=any_part.mask.dtype, device=any_part.mask.device)
    as_lists = {j: part.mask.tolist() for j, part in sources.items() if part is not None}
    for out_row, (j, r) in enumerate(picks):
        source = sources[j]
        assert source is not None, "a row read after its batch was released"
        runs = _runs(as_lists[j][r])
        column = width - sum(end - start for start, end in runs)
        mask[out_row, column:] = 1
        for start, end in runs:
            for out, layer in zip(layers, source.cache.layers, strict=True):
                out.put(out_row, column, layer.keys[r, :, start:end], layer.values[r, :, start:end])
            column += end - start
    logits = torch.stack([sources[j].logits[r] for j, r in picks])  # type: ignore[union-attr]
    return _Rows(Cache(layers=layers), mask, logits)


class ReservedLayer(DynamicLayer):
    """A plain KV-cache layer with room reserved for the tokens that follow.

    transformers' ``DynamicLayer`` appends by concatenation, copying the whole cache of every layer at
    every decoded token: two thirds of the decoding time on 84 rows of ~700 tokens. Here each token is
    written into the room and attention reads a view of the filled part (the same values, so the same
    logits, bit for bit). Past the room it appends like its parent."""

    @classmethod
    def empty(cls, rows: int, length: int, room: int, like: torch.Tensor) -> ReservedLayer:
        """``length`` zero columns (to be filled with :meth:`put`) and ``room`` free ones."""
        layer = cls()
        # Zeros, not garbage: a masked column's key still enters q.k before the mask applies.
        layer._keys = like.new_zeros(rows, like.shape[1], length + room, like.shape[3])
        layer._values = like.new_zeros(rows, like.shape[1], length + room, like.shape[3])
        layer._fill(length)
        layer.device, layer.is_initialized = like.device, True
        return layer

    def put(self, row: int, column: int, keys: torch.Tensor, values: torch.Tensor) -> None:
        self._keys[row, :, column: column + keys.shape[1]] = keys
        self._values[row, :, column: column + values.shape[1]] = values

    def _fill(self, length: int) -> None:
        self.length = length
        self.keys, self.values = self._keys[:, :, :length], self._values[:, :, :length]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        end = self.length + key_states.shape[-2]
        if end > self._keys.shape[2]:
            return super().update(key_states, value_states, *args, **kwargs)
        self._keys[:, :, self.length: end] = key_states
        self._values[:, :, self.length: end] = value_states
        self._fill(end)
        return self.keys, self.values
