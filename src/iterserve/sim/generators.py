"""Seeded synthetic workload generators (no global RNG: STYLE habit 5)."""

from __future__ import annotations

import random
from dataclasses import dataclass

from iterserve.records.spec import (
    Capacity,
    HiddenTruth,
    OnlineWorkload,
    RequestSpec,
    WorkloadManifest,
)


@dataclass(frozen=True, slots=True)
class RandomWorkloadConfig:
    """Uniform prompt/output lengths, Poisson-ish arrivals on the run's clock."""

    num_requests: int = 32
    min_prompt_tokens: int = 1
    max_prompt_tokens: int = 64
    min_output_tokens: int = 1
    max_output_tokens: int = 32
    mean_interarrival: float = 1.0
    num_clients: int = 3
    num_priorities: int = 3

    def __post_init__(self) -> None:
        if self.num_requests < 1:
            raise ValueError("num_requests must be >= 1")
        if not 1 <= self.min_prompt_tokens <= self.max_prompt_tokens:
            raise ValueError("need 1 <= min_prompt_tokens <= max_prompt_tokens")
        if not 1 <= self.min_output_tokens <= self.max_output_tokens:
            raise ValueError("need 1 <= min_output_tokens <= max_output_tokens")


def random_workload(config: RandomWorkloadConfig, capacity: Capacity, seed: int,
                    clock: str = "iteration") -> WorkloadManifest:
    rng = random.Random(seed)
    now = 0.0
    requests = []
    realized = {}
    for i in range(config.num_requests):
        now += rng.expovariate(1.0 / config.mean_interarrival) if config.mean_interarrival else 0.0
        rid = f"req-{i:04d}"
        max_out = rng.randint(config.min_output_tokens, config.max_output_tokens)
        requests.append(RequestSpec(
            request_id=rid,
            arrival=round(now, 6),
            num_prompt_tokens=rng.randint(config.min_prompt_tokens, config.max_prompt_tokens),
            max_output_tokens=max_out,
            client_id=f"client-{rng.randrange(config.num_clients)}",
            priority=rng.randrange(config.num_priorities),
        ))
        realized[rid] = rng.randint(1, max_out)
    online = OnlineWorkload(f"random-{seed}", clock, capacity, tuple(requests))
    return WorkloadManifest(online, HiddenTruth(realized))
