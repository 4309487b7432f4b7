"""Sampling parameters and a batch sampler with per-request reproducibility.

Randomness never comes from a global RNG: each sampled row draws from its own
`torch.Generator` seeded from (request seed, output index), so a request's
tokens depend only on its own logits, seed and position in its output, never
on which other requests share the iteration or in what order.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from iterserve.records.sampling_params import SamplingParams

__all__ = ["SampleRow", "SampledToken", "SamplingParams", "greedy_token_ids", "row_seed",
           "sample", "sample_ids"]

_MASK_64 = (1 << 64) - 1


@dataclass(frozen=True, slots=True)
class SampleRow:
    """What the sampler needs for one logits row.

    seed: the request's resolved seed (params.seed, or one drawn by the engine).
    output_index: 0-based index of the output token being sampled.
    """

    params: SamplingParams
    seed: int
    output_index: int


@dataclass(frozen=True, slots=True)
class SampledToken:
    """A sampled token and its log-probability under the raw model distribution
    (before temperature, top-k and top-p)."""

    token_id: int
    logprob: float


def row_seed(seed: int, output_index: int) -> int:
    """A well-mixed 63-bit generator seed for (request seed, output index) (splitmix64)."""
    z = (seed * 0x9E3779B97F4A7C15 + output_index + 1) & _MASK_64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK_64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK_64
    return (z ^ (z >> 31)) >> 1


def sample(logits: torch.Tensor, rows: Sequence[SampleRow]) -> list[SampledToken]:
    """Sample one token per row of logits [S, V]; `rows[i]` describes row i."""
    token_ids, logprobs = sample_ids(logits, rows)
    return [SampledToken(token_id=t, logprob=lp)
            for t, lp in zip(token_ids, logprobs, strict=True)]


def sample_ids(logits: torch.Tensor, rows: Sequence[SampleRow]) -> tuple[list[int], list[float]]:
    """:func:`sample` as two plain lists (token ids, logprobs), one entry per
    row: what the executor's hot path reads, without an object per row."""
    if logits.shape[0] != len(rows):
        raise ValueError(f"{logits.shape[0]} logits rows but {len(rows)} sample rows")
    logits = logits.float()
    token_ids = greedy_token_ids(logits)
    random_rows = [i for i, row in enumerate(rows) if not row.params.is_greedy]
    if random_rows:
        index = torch.tensor(random_rows, device=logits.device)
        drawn = _sample_random(logits.index_select(0, index), [rows[i] for i in random_rows])
        token_ids = token_ids.index_copy(0, index, drawn.to(token_ids.device))
    logprobs = torch.log_softmax(logits, dim=-1).gather(1, token_ids[:, None])[:, 0]
    return token_ids.tolist(), logprobs.tolist()


def greedy_token_ids(logits: torch.Tensor) -> torch.Tensor:
    """``logits.argmax(dim=-1)``, the first maximum of each row (NaN counts as
    the maximum, as in torch). On the CPU numpy's vectorised argmax is an
    order of magnitude cheaper than torch's for a [S, V] batch and starts no
    intra-op threads; elsewhere torch's."""
    if logits.device.type != "cpu":
        return logits.argmax(dim=-1)
    return torch.from_numpy(logits.numpy().argmax(axis=-1).astype(np.int64, copy=False))


def _sample_random(logits: torch.Tensor, rows: Sequence[SampleRow]) -> torch.Tensor:
    """Temperature, then top-k, then top-p, then one seeded draw per row.

    Draws always happen over vocabulary order, so a row's token does not
    depend on whether other rows in the batch needed the sorted filter path.
    """
    temperatures = torch.tensor([r.params.temperature for r in rows], device=logits.device)
    scaled = logits / temperatures[:, None]
    if any(r.params.top_k is not None or r.params.top_p < 1.0 for r in rows):
        sorted_logits, sorted_ids = scaled.sort(dim=-1, descending=True)
        filtered = _filter_sorted(sorted_logits, rows)
        scaled = torch.empty_like(scaled).scatter_(1, sorted_ids, filtered)
    probs = torch.softmax(scaled, dim=-1).cpu()
    picks = []
    for i, row in enumerate(rows):
        generator = torch.Generator().manual_seed(row_seed(row.seed, row.output_index))
        picks.append(int(torch.multinomial(probs[i], 1, generator=generator)))
    return torch.tensor(picks, device=logits.device)


def _filter_sorted(sorted_logits: torch.Tensor, rows: Sequence[SampleRow]) -> torch.Tensor:
    """Mask descending-sorted logits outside each row's top-k, then outside the
    top-p nucleus of what remains.

    The most likely token always survives, so every row keeps a valid distribution.
    """
    vocab_size = sorted_logits.shape[1]
    device = sorted_logits.device
    ranks = torch.arange(vocab_size, device=device)[None, :]
    top_ks = torch.tensor([r.params.top_k or vocab_size for r in rows], device=device)
    # top_p == 1 must keep everything even when the float cumsum overshoots 1.
    top_ps = torch.tensor(
        [r.params.top_p if r.params.top_p < 1.0 else math.inf for r in rows], device=device
    )
    outside_top_k = ranks >= top_ks[:, None]
    outside_top_k[:, 0] = False
    top_k_logits = sorted_logits.masked_fill(outside_top_k, float("-inf"))
    probs = torch.softmax(top_k_logits, dim=-1)  # top-p applies to the top-k renormalised mass
    outside_top_p = probs.cumsum(dim=-1) - probs >= top_ps[:, None]
    outside_top_p[:, 0] = False
    return top_k_logits.masked_fill(outside_top_p, float("-inf"))
