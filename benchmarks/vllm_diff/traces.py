"""Seeded traces and the regimes of the differential conformance check
(issue 13, 0x0D). Plain data: both drivers read the same trace."""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class TraceRequest:
    request_id: str
    prompt_tokens: int
    output_tokens: int
    priority: int = 0


@dataclass(frozen=True, slots=True)
class Regime:
    """One scheduler configuration; every request arrives at step 0."""

    name: str
    max_num_batched_tokens: int
    max_num_seqs: int
    num_blocks: int  # usable KV blocks (vLLM gets one more: its null block)
    block_size: int
    long_prefill_token_threshold: int = 0  # 0: off, as in vLLM
    adaptive: bool = False  # long_prefill_token_threshold_adaptive
    priority: bool = False
    prompt_range: tuple[int, int] = (4, 48)
    output_range: tuple[int, int] = (1, 24)
    num_requests_range: tuple[int, int] = (20, 60)
    first_prompt_range: tuple[int, int] | None = None  # the first request's prompt, if apart
    extra: dict[str, int] = field(default_factory=dict)


REGIMES: tuple[Regime, ...] = (
    Regime("chunked-prefill pressure", 32, 8, 4096, 16, prompt_range=(16, 120)),
    Regime("long-prefill threshold", 32, 8, 4096, 16, long_prefill_token_threshold=8,
           prompt_range=(8, 80)),
    Regime("FCFS recompute preemption", 64, 8, 24, 4),
    Regime("priority preemption", 64, 8, 24, 4, priority=True),
    Regime("max_num_seqs binding", 256, 2, 4096, 16),
    # one long prompt alone: vLLM lifts the threshold when running + waiting == 1
    Regime("lone long prefill", 32, 8, 4096, 16, long_prefill_token_threshold=8,
           prompt_range=(100, 400), num_requests_range=(1, 1)),
    # a long prompt outlives a few short requests, then prefills alone
    Regime("long prefill left alone", 32, 8, 4096, 16, long_prefill_token_threshold=8,
           prompt_range=(4, 12), output_range=(1, 4), num_requests_range=(2, 5),
           first_prompt_range=(200, 500)),
    # the opt-in floor max(threshold, max_num_batched_tokens // (running + waiting))
    Regime("adaptive threshold floor", 64, 8, 4096, 16, long_prefill_token_threshold=4,
           adaptive=True, prompt_range=(16, 160), num_requests_range=(2, 12)),
)


def make_trace(regime: Regime, seed: int) -> list[TraceRequest]:
    rng = random.Random(seed)
    num = rng.randint(*regime.num_requests_range)
    trace = [TraceRequest(f"r{i:03d}", rng.randint(*regime.prompt_range),
                          rng.randint(*regime.output_range),
                          rng.randint(0, 3) if regime.priority else 0)
             for i in range(num)]
    if regime.first_prompt_range is not None:
        first = trace[0]
        trace[0] = TraceRequest(first.request_id, rng.randint(*regime.first_prompt_range),
                                first.output_tokens, first.priority)
    return trace
