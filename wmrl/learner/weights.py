"""The learner's weights as a stream of buckets, for the weight sync into the generator.

Under ZeRO-3 every rank holds 1/N of each parameter. A bucket is a run of consecutive parameters of
at most ``bucket_bytes`` (one oversized parameter is a bucket of its own); it is gathered with one
``deepspeed.zero.GatheredParameters`` that every rank enters (the all-gather is collective: a rank that
skipped a bucket would leave the others waiting), handed out in the generator's dtype, and released
before the next one is gathered. So the sync never holds more than a bucket beyond the partitions,
and takes one all-gather per bucket instead of one per parameter. Below ZeRO-3 every rank has the full
parameters and the buckets are views of them (cast when the generator's dtype differs).

Every rank must drain the stream; only the rank that drives the generator uses it
(:func:`drain` on the others).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import torch

Bucket = list[tuple[str, torch.Tensor]]


def _partitioned(param: torch.nn.Parameter) -> bool:
    return hasattr(param, "ds_id")  # DeepSpeed's ZeRO-3 marks the parameters it partitions


def _nbytes(param: torch.nn.Parameter) -> int:
    numel = param.ds_numel if _partitioned(param) else param.numel()
    return int(numel) * param.element_size()


def plan_buckets(
    named: Iterable[tuple[str, torch.nn.Parameter]], bucket_bytes: int
) -> list[list[tuple[str, torch.nn.Parameter]]]:
    """Consecutive parameters grouped into buckets of at most ``bucket_bytes`` (full sizes)."""
    buckets: list[list[tuple[str, torch.nn.Parameter]]] = []
    current: list[tuple[str, torch.nn.Parameter]] = []
    size = 0
    for name, param in named:
        nbytes = _nbytes(param)
        if current and size + nbytes > bucket_bytes:
            buckets.append(current)
            current, size = [], 0
        current.append((name, param))
        size += nbytes
    if current:
        buckets.append(current)
    return buckets


def gathered_buckets(
    module: torch.nn.Module, bucket_bytes: int, dtype: torch.dtype | None = None
) -> Iterator[Bucket]:
    """``module``'s parameters by name, one gathered bucket at a time (collective under ZeRO-3).

    A bucket's tensors are the gathered (or full) parameters themselves, or their casts to ``dtype``;
    they are detached and stay valid after the next bucket is requested (the consumer decides when to
    drop them, and the memory with them).
    """
    from deepspeed import zero

    for bucket in plan_buckets(module.named_parameters(), bucket_bytes):
        params = [p for _, p in bucket if _partitioned(p)]
        with zero.GatheredParameters(params, enabled=bool(params)):
            yield [(name, _handed_out(p, dtype)) for name, p in bucket]


def _handed_out(param: torch.nn.Parameter, dtype: torch.dtype | None) -> torch.Tensor:
    tensor = param.data.detach()
    if dtype is not None and tensor.dtype != dtype:
        return tensor.to(dtype)
    # A gathered ZeRO-3 parameter's data is released by reassignment on exit (the tensor we hand out
    # keeps its storage); a full parameter is handed out as a view, valid until the next update.
    return tensor


def flatten(buckets: Iterable[Bucket]) -> Iterator[tuple[str, torch.Tensor]]:
    for bucket in buckets:
        yield from bucket


def drain(buckets: Iterable[Bucket]) -> None:
    """Join every bucket's gather without using it (ranks that do not drive a generator)."""
    for _ in buckets:
        pass
