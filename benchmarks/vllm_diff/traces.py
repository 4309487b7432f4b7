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
    priority: bool = False
    prompt_range: tuple[int, int] = (4, 48)
    output_range: tuple[int, int] = (1, 24)
    extra: dict[str, int] = field(default_factory=dict)


REGIMES: tuple[Regime, ...] = (
    Regime("chunked-prefill pressure", 32, 8, 4096, 16, prompt_range=(16, 120)),
    Regime("long-prefill threshold", 32, 8, 4096, 16, long_prefill_token_threshold=8,
           prompt_range=(8, 80)),
    Regime("FCFS recompute preemption", 64, 8, 24, 4),
    Regime("priority preemption", 64, 8, 24, 4, priority=True),
    Regime("max_num_seqs binding", 256, 2, 4096, 16),
)


def make_trace(regime: Regime, seed: int) -> list[TraceRequest]:
    rng = random.Random(seed)
    num = rng.randint(20, 60)
    return [TraceRequest(f"r{i:03d}", rng.randint(*regime.prompt_range),
                         rng.randint(*regime.output_range),
                         rng.randint(0, 3) if regime.priority else 0)
            for i in range(num)]
