"""The LM head of the loss: token log-probs and entropies at the generated positions, chunk by chunk.

A full head materialises ``tokens x vocabulary`` logits in fp32 (and a log-softmax, its exp and their
product for the entropy): about 20 bytes x V per token in forward + backward (measured,
results/bench_loss_head.md), 120 GB for a 24k-token trajectory at V = 248k. Here the model returns
its final hidden states (``output_hidden_states=-1`` with no logits: ``logits_to_keep`` is empty),
the hidden states at the loss positions are gathered, and the LM head runs over them
``chunk_tokens`` rows at a time:

- the **policy** chunk runs under ``torch.utils.checkpoint`` (non-reentrant), so a chunk's logits
  live only while that chunk is computed, in the forward and again when backward recomputes it: peak
  memory grows with ``chunk_tokens x V``, not with the sequence. Non-reentrant, the recompute is part
  of the one backward pass, so a weight used by several chunks (and the tied embedding) receives one
  accumulated gradient, as ZeRO's per-parameter gradient hooks require. Within a chunk, the gradient
  of log-prob and entropy w.r.t. the logits is computed in place (``_TokenLogProbs``);
- the **reference** chunk runs under ``no_grad`` and returns log-probs only.

The head is called as a module (``lm_head(hidden)``), never through its ``weight``: under ZeRO-3 the
module's forward hooks gather the partitioned weight (in the forward and in the recompute), and a
tied embedding is the same parameter either way. Each call is then a collective: with several ZeRO-3
ranks every rank must call the head as often as the others (``n_chunks``: the busiest rank's chunk
count; a rank with fewer loss positions, or an idle one, runs padding chunks on a zero row whose output
enters the loss times 0, so that their backward recomputes, and gathers, too).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.checkpoint import checkpoint


def at_least_fp32(x: torch.Tensor) -> torch.Tensor:
    """``x`` in fp32, or in its own dtype if wider (float64 checks stay float64)."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


def token_log_probs(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-prob of each target token and the full-vocabulary entropy at each position (>= fp32)."""
    logp_all = torch.log_softmax(at_least_fp32(logits), dim=-1)
    logp = logp_all.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy


@dataclass(frozen=True)
class PolicyTokens:
    """Per loss position (1-D, in the order of the gathered positions)."""

    logp: torch.Tensor  # log pi_T(token): the tempered policy, differentiable
    entropy: torch.Tensor  # entropy of pi_T at the position, differentiable
    raw_logp: torch.Tensor  # log softmax(logits)(token) before temperature, detached (the sampler's scale)
    padding: torch.Tensor  # 0, attached to the padding chunks' graph: add it to the loss


def chunk_count(n_rows: int, chunk_tokens: int) -> int:
    """How many head calls ``n_rows`` loss positions take (0 for none)."""
    return -(-n_rows // chunk_tokens)


def _padding_rows(hidden: torch.Tensor, n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``n`` one-row chunks of zeros (target 0): head calls that only keep the ranks' collectives in step."""
    # Attached to ``hidden`` where it has a row, so padding chunks sit in the graph where real ones do.
    row = hidden[:1] * 0.0 if len(hidden) else hidden.new_zeros((1, hidden.shape[-1]))
    target = torch.zeros(1, dtype=torch.long, device=hidden.device)
    return [(row, target)] * n


def output_head(model: Any) -> torch.nn.Module:
    """The LM head module of a Hugging Face causal LM, or of a DeepSpeed engine wrapping one."""
    return getattr(model, "module", model).get_output_embeddings()


def final_hidden_states(
    model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, positions: torch.Tensor
) -> torch.Tensor:
    """``(N, H)`` final (normed) hidden states at the ``True`` entries of ``positions`` ``(B, T-1)``.

    Position t predicts token t+1, so ``positions`` is the shifted loss mask. ``model`` is called as
    a whole (a DeepSpeed engine's forward hooks its outputs for backward) with no logits computed.
    """
    out = model(
        input_ids=input_ids, attention_mask=attention_mask, use_cache=False,
        output_hidden_states=-1,  # transformers >= 5 keeps only the last (older ones keep all)
        logits_to_keep=torch.empty(0, dtype=torch.long, device=input_ids.device),
    )
    return out.hidden_states[-1][:, :-1][positions]


def _chunks(n: int, size: int) -> list[slice]:
    return [slice(i, min(i + size, n)) for i in range(0, n, size)]


class _TokenLogProbs(torch.autograd.Function):
    """``(log pi_T(target), H(pi_T), log pi(target))`` per row of raw ``logits``, ``pi_T = softmax(z / T)``.

    Forward and backward each hold the logits and two ``rows x vocab`` fp32 buffers (the log-softmax,
    turned into the gradient in place, and the probabilities), where autograd's would keep the
    log-softmax, its exp, their product and a gradient for each (about twice as much); the gradient:
    ``d log pi_T(t) / dz = (onehot_t - pi_T) / T`` and ``d H / dz = -pi_T (log pi_T + H) / T``.
    """

    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, targets: torch.Tensor, temperature: float) -> Any:
        z = at_least_fp32(logits)  # before dividing: a bf16 division would round the logits
        raw = None
        if temperature != 1.0:
            raw = torch.log_softmax(z, dim=-1).gather(-1, targets[:, None])[:, 0]
            z = z / temperature
        # token_log_probs, with the entropy's product in place (no graph here): one buffer fewer.
        logp_all = torch.log_softmax(z, dim=-1)
        del z
        logp = logp_all.gather(-1, targets[:, None])[:, 0]
        entropy = -logp_all.exp().mul_(logp_all).sum(-1)
        del logp_all
        raw = logp.clone() if raw is None else raw
        ctx.save_for_backward(logits, targets, entropy)
        ctx.temperature = temperature
        ctx.mark_non_differentiable(raw)
        return logp, entropy, raw

    @staticmethod
    def backward(ctx: Any, g_logp: torch.Tensor, g_entropy: torch.Tensor, _: Any) -> Any:
        logits, targets, entropy = ctx.saved_tensors
        z = at_least_fp32(logits)
        if ctx.temperature != 1.0:
            z = z / ctx.temperature
        grad = torch.log_softmax(z, dim=-1)
        del z
        p = grad.exp()
        grad.add_(entropy[:, None]).mul_(p).mul_(-g_entropy[:, None])  # the entropy's term
        grad.sub_(p.mul_(g_logp[:, None]))  # the log-prob's term, without its one-hot part
        del p
        grad.scatter_add_(-1, targets[:, None], g_logp[:, None].to(grad.dtype))
        if ctx.temperature != 1.0:
            grad.div_(ctx.temperature)
        return grad.to(logits.dtype), None, None


def _policy_chunk(
    lm_head: torch.nn.Module, hidden: torch.Tensor, targets: torch.Tensor, temperature: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _TokenLogProbs.apply(lm_head(hidden), targets, temperature)


def policy_tokens(
    lm_head: torch.nn.Module, hidden: torch.Tensor, targets: torch.Tensor, temperature: float,
    chunk_tokens: int, n_chunks: int = 0,
) -> PolicyTokens:
    """Tempered log-probs and entropies (with gradients) and raw log-probs of ``targets`` ``(N,)``.

    ``hidden`` is ``(N, H)``; the head runs on ``chunk_tokens`` rows at a time, recomputed in backward,
    and ``n_chunks - chunk_count(N)`` more times on padding rows (module docstring).
    """
    parts = [
        checkpoint(_policy_chunk, lm_head, hidden[s], targets[s], temperature, use_reentrant=False)
        for s in _chunks(len(targets), chunk_tokens)
    ]
    padding = hidden.sum() * 0.0
    for row, target in _padding_rows(hidden, n_chunks - len(parts)):
        logp, entropy, _ = checkpoint(_policy_chunk, lm_head, row, target, temperature, use_reentrant=False)
        padding = padding + (logp.sum() + entropy.sum()) * 0.0
    if not parts:  # no loss position in this micro-batch: empty, still attached to the graph
        empty = hidden.sum(-1)[:0].float()
        return PolicyTokens(empty, empty, empty.detach(), padding)
    logp, entropy, raw = (torch.cat(column) for column in zip(*parts, strict=True))
    return PolicyTokens(logp, entropy, raw, padding)


@torch.no_grad()
def reference_log_probs(
    lm_head: torch.nn.Module, hidden: torch.Tensor, targets: torch.Tensor, temperature: float,
    chunk_tokens: int, n_chunks: int = 0,
) -> torch.Tensor:
    """Tempered log-probs of ``targets`` ``(N,)`` under a frozen model: no entropy, no graph (and
    ``n_chunks - chunk_count(N)`` padding calls, module docstring)."""
    out = torch.empty(len(targets), dtype=torch.promote_types(hidden.dtype, torch.float32), device=hidden.device)
    chunks = _chunks(len(targets), chunk_tokens)
    for s in chunks:
        logits = at_least_fp32(lm_head(hidden[s])) / temperature
        out[s] = torch.log_softmax(logits, dim=-1).gather(-1, targets[s, None])[:, 0]
    for row, _ in _padding_rows(hidden, n_chunks - len(chunks)):
        lm_head(row)
    return out
