"""Seeded synthetic workload generators (no global RNG: STYLE habit 5).

:func:`generate_document` turns a :class:`~iterserve.sim.workload_spec.GeneratorSpec`
into a workload document in the workload-file schema (``records/workload.py``).
Randomness comes from one ``numpy.random.SeedSequence(spec.seed)`` split into
independent streams, one per purpose (arrivals, client choice, prompt lengths,
realized output lengths, token ids): the realized output lengths, which go to
``fixture_only_hidden_truth`` only, draw from their own stream, so changing the
output-length distribution changes the hidden truth and nothing online (0x06).

:func:`random_workload` is the older uniform generator the policy tests use.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import numpy as np

from iterserve.records.spec import (
    Capacity,
    HiddenTruth,
    OnlineWorkload,
    RequestSpec,
    SloTargets,
    WorkloadManifest,
)
from iterserve.records.workload import parse_workload
from iterserve.sim.arrivals import poisson_gap_s
from iterserve.sim.workload_spec import ClientSpec, GeneratorSpec, PrefixGroup

_STREAMS = ("arrivals", "clients", "prompts", "outputs", "tokens")
_ARRIVAL_DECIMALS = 6


def generate_workload(spec: GeneratorSpec) -> WorkloadManifest:
    return parse_workload(generate_document(spec))


def generate_document(spec: GeneratorSpec) -> dict[str, Any]:
    """The workload document: same spec and seed, same document."""
    streams = dict(zip(_STREAMS, (np.random.default_rng(s) for s in
                                  np.random.SeedSequence(spec.seed).spawn(len(_STREAMS))),
                       strict=True))
    n = spec.num_requests
    arrivals = spec.arrival.times_s(streams["arrivals"], n) / spec.seconds_per_clock_unit
    weights = np.asarray([c.weight for c in spec.clients], dtype=np.float64)
    owners = streams["clients"].choice(len(spec.clients), size=n, p=weights / weights.sum())
    prompts = np.zeros(n, dtype=np.int64)
    outputs = np.zeros(n, dtype=np.int64)
    for index, client in enumerate(spec.clients):
        mine = np.flatnonzero(owners == index)
        prompts[mine] = client.prompt_tokens.sample(streams["prompts"], len(mine))
        outputs[mine] = client.output_tokens.sample(streams["outputs"], len(mine))
    tokens = _TokenSource(streams["tokens"], spec)
    width = max(6, len(str(n - 1)))
    requests, realized = [], {}
    for i in range(n):
        client = spec.clients[int(owners[i])]
        rid = f"r{i:0{width}d}"
        requests.append(_request(rid, round(float(arrivals[i]), _ARRIVAL_DECIMALS), client,
                                 int(prompts[i]), tokens))
        realized[rid] = min(int(outputs[i]), client.max_output_tokens)
    document: dict[str, Any] = {"workload_id": spec.workload_id}
    if spec.description is not None:
        document["description"] = spec.description
    document.update({"clock": spec.clock, "capacity": dict(spec.capacity)})
    if spec.kv is not None:
        document["kv"] = dict(spec.kv)
    if spec.policy_settings is not None:
        document["policy_settings"] = dict(spec.policy_settings)
    document["requests"] = requests
    document["fixture_only_hidden_truth"] = {"realized_output_tokens": realized}
    return document


def _request(rid: str, arrival: float, client: ClientSpec, num_prompt_tokens: int,
             tokens: _TokenSource) -> dict[str, Any]:
    prompt: int | list[int] = num_prompt_tokens
    if client.prefix_group is not None:
        prompt = tokens.prompt(client.prefix_group, num_prompt_tokens)
    request: dict[str, Any] = {
        "request_id": rid, "arrival": arrival, "prompt_tokens": prompt,
        "max_output_tokens": client.max_output_tokens, "client_id": client.client_id,
        "priority": client.priority,
    }
    if client.slo is not None:
        request["slo"] = _slo_json(client.slo)
    return request


def _slo_json(slo: SloTargets) -> dict[str, float]:
    return {k: v for k, v in (("ttft_ms", slo.ttft_ms), ("tbt_ms", slo.tbt_ms)) if v is not None}


class _TokenSource:
    """Token ids for prefix-group prompts: each group's variants are drawn
    once, in group-name order; each prompt is a variant plus a fresh suffix
    of at least one token (a prompt shorter than its prefix is lengthened)."""

    def __init__(self, rng: np.random.Generator, spec: GeneratorSpec) -> None:
        self._rng = rng
        self._vocab_size = spec.vocab_size
        groups = sorted({c.prefix_group.name: c.prefix_group for c in spec.clients
                         if c.prefix_group is not None}.values(), key=lambda g: g.name)
        self._variants = {g.name: [self._ids(g.num_prefix_tokens) for _ in range(g.num_variants)]
                          for g in groups}

    def prompt(self, group: PrefixGroup, num_prompt_tokens: int) -> list[int]:
        variants = self._variants[group.name]
        prefix = variants[int(self._rng.integers(len(variants)))]
        num_suffix = max(1, num_prompt_tokens - len(prefix))
        return prefix + self._ids(num_suffix)

    def _ids(self, n: int) -> list[int]:
        return [int(t) for t in self._rng.integers(0, self._vocab_size, size=n)]


# --- the older uniform generator ---------------------------------------------------------
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
        now += poisson_gap_s(rng, 1.0 / config.mean_interarrival) if config.mean_interarrival else 0.0
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
