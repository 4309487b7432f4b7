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

__all__ = ["SampleRow", "SampledBatch", "SampledToken", "SamplingParams", "greedy_token_ids",
           "row_seed", "sample", "sample_batch", "sample_ids"]

Alternatives = tuple[tuple[int, float], ...]  # (token id, logprob), most likely first

_MASK_64 = (1 << 64) - 1


@dataclass(frozen=True, slots=True)
class SampleRow:
    """What the sampler needs for one logits row.

    seed: the request's resolved seed (params.seed, or one drawn by the engine).
    output_index: 0-based index of the output token being sampled.
    history: the prompt then the outputs so far (read only when the params
    have penalties); its first ``num_prompt_tokens`` are the prompt.
    """

    params: SamplingParams
    seed: int
    output_index: int
    history: Sequence[int] = ()
    num_prompt_tokens: int = 0


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


@dataclass(frozen=True, slots=True)
class SampledBatch:
    """One entry per row: the token, its logprob, and the row's most likely
    alternatives (empty unless its params ask for ``num_top_logprobs``).
    Logprobs are of the raw model distribution, as vLLM's default reports."""

    token_ids: list[int]
    logprobs: list[float]
    alternatives: list[Alternatives]


def sample_ids(logits: torch.Tensor, rows: Sequence[SampleRow]) -> tuple[list[int], list[float]]:
    """:func:`sample` as two plain lists (token ids, logprobs), one entry per
    row, without an object per row."""
    batch = sample_batch(logits, rows)
    return batch.token_ids, batch.logprobs


def sample_batch(logits: torch.Tensor, rows: Sequence[SampleRow],
                 eos_token_ids: Sequence[int] = ()) -> SampledBatch:
    """Penalties and min_tokens masks (rows that ask), then greedy or seeded
    random choice; ``eos_token_ids`` are what ``min_tokens`` holds back."""
    if logits.shape[0] != len(rows):
        raise ValueError(f"{logits.shape[0]} logits rows but {len(rows)} sample rows")
    raw = logits.float()
    logits = _processed(raw, rows, eos_token_ids)
    token_ids = greedy_token_ids(logits)
    random_rows = [i for i, row in enumerate(rows) if not row.params.is_greedy]
    if random_rows:
        index = torch.tensor(random_rows, device=logits.device)
        drawn = _sample_random(logits.index_select(0, index), [rows[i] for i in random_rows])
        token_ids = token_ids.index_copy(0, index, drawn.to(token_ids.device))
    log_probs = torch.log_softmax(raw, dim=-1)
    logprobs = log_probs.gather(1, token_ids[:, None])[:, 0]
    if logits.device.type == "cpu":
        return SampledBatch(token_ids.tolist(), logprobs.tolist(), _alternatives(log_probs, rows))
    # off the CPU: ids and logprobs come back in one device-to-host copy (float64
    # holds every token id exactly), the step's one sync
    ids, values = torch.stack((token_ids.double(), logprobs.double())).tolist()
    return SampledBatch([int(i) for i in ids], values, _alternatives(log_probs, rows))


def _processed(logits: torch.Tensor, rows: Sequence[SampleRow],
               eos_token_ids: Sequence[int]) -> torch.Tensor:
    """``logits`` with each asking row's penalties and min_tokens mask
    applied (a copy; the same tensor when no row asks)."""
    asking = [i for i, row in enumerate(rows) if row.params.wants_logits_processing]
    if not asking:
        return logits
    logits = logits.clone()
    for i in asking:
        _process_row(logits[i], rows[i], eos_token_ids)
    return logits


def _process_row(row_logits: torch.Tensor, row: SampleRow, eos_token_ids: Sequence[int]) -> None:
    """In place, transformers' RepetitionPenaltyLogitsProcessor over prompt
    and outputs, then OpenAI's presence / frequency penalties over outputs,
    then the min_tokens mask."""
    params = row.params
    device = row_logits.device
    if params.repetition_penalty != 1.0 and row.history:
        seen = torch.tensor(sorted(set(row.history)), device=device)
        score = row_logits[seen]
        row_logits[seen] = torch.where(score < 0, score * params.repetition_penalty,
                                       score / params.repetition_penalty)
    outputs = row.history[row.num_prompt_tokens:]
    if outputs and (params.presence_penalty or params.frequency_penalty):
        vocab_size = row_logits.shape[0]
        counts = torch.bincount(torch.tensor(list(outputs), device=device),
                                minlength=vocab_size)[:vocab_size].float()
        row_logits -= params.frequency_penalty * counts + params.presence_penalty * (counts > 0)
    if row.output_index < params.min_tokens:
        held = [*(() if params.ignore_eos else eos_token_ids), *params.stop_token_ids]
        held = [t for t in held if t < row_logits.shape[0]]
        if held:
            row_logits[torch.tensor(held, device=device)] = float("-inf")


def _alternatives(log_probs: torch.Tensor, rows: Sequence[SampleRow]) -> list[Alternatives]:
    max_k = max((row.params.num_top_logprobs for row in rows), default=0)
    if max_k == 0:
        return [()] * len(rows)
    values, ids = log_probs.topk(min(max_k, log_probs.shape[1]), dim=-1)
    values_list, ids_list = values.tolist(), ids.tolist()
    return [tuple(zip(ids_list[i][:row.params.num_top_logprobs],
                      values_list[i][:row.params.num_top_logprobs], strict=True))
            for i, row in enumerate(rows)]


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
