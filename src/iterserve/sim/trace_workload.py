"""A trace as a workload document: slicing, seeded sampling, time scaling.

Order of operations: keep records with ``start_s <= arrival_s < end_s``
(trace seconds, from the trace's first request), then the first ``limit`` of
them, then keep each with probability ``sample_fraction`` (Bernoulli
thinning from ``numpy.random.default_rng(seed)``: the arrival pattern keeps
its shape at a lower rate), then arrivals become ``(arrival_s - start_s) *
time_scale`` seconds (``time_scale`` 0.5 doubles the offered rate).

The trace's output length is the request's realized length: it goes to
``fixture_only_hidden_truth`` only (0x06). The online ``max_output_tokens``
is one declared cap for every request (``max_output_tokens``), never the
realized length; a longer realized output is truncated to the cap and
counted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from iterserve.records.time_units import s_to_ms
from iterserve.sim.traces import TraceRecord


@dataclass(frozen=True, slots=True)
class TraceSelection:
    start_s: float = 0.0
    end_s: float | None = None
    limit: int | None = None
    sample_fraction: float = 1.0
    seed: int = 0
    time_scale: float = 1.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.start_s) and self.start_s >= 0):
            raise ValueError(f"--start must be >= 0, got {self.start_s}")
        if self.end_s is not None and not self.end_s > self.start_s:
            raise ValueError(f"--end must be > --start, got {self.end_s}")
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"--limit must be >= 1, got {self.limit}")
        if not 0.0 < self.sample_fraction <= 1.0:
            raise ValueError(f"--sample must be in (0, 1], got {self.sample_fraction}")
        if not (math.isfinite(self.time_scale) and self.time_scale > 0):
            raise ValueError(f"--time-scale must be > 0, got {self.time_scale}")
        if self.seed < 0:
            raise ValueError(f"--seed must be >= 0, got {self.seed}")


@dataclass(frozen=True, slots=True)
class TraceTarget:
    """What the workload declares besides the trace's requests."""

    workload_id: str
    capacity: dict[str, int]
    max_output_tokens: int
    clock: str = "ms"
    kv: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.max_output_tokens < 1:
            raise ValueError(f"--max-output-tokens must be >= 1, got {self.max_output_tokens}")
        if self.clock != "ms":
            raise ValueError("trace workloads use the ms clock")


def select_records(records: tuple[TraceRecord, ...],
                   selection: TraceSelection) -> list[TraceRecord]:
    end_s = math.inf if selection.end_s is None else selection.end_s
    kept = [r for r in records if selection.start_s <= r.arrival_s < end_s]
    if selection.limit is not None:
        kept = kept[:selection.limit]
    if selection.sample_fraction < 1.0:
        draws = np.random.default_rng(selection.seed).random(len(kept))
        kept = [r for r, u in zip(kept, draws, strict=True) if u < selection.sample_fraction]
    return kept


def trace_document(records: list[TraceRecord], selection: TraceSelection,
                   target: TraceTarget) -> tuple[dict[str, Any], int]:
    """The workload document and how many realized outputs were truncated."""
    if not records:
        raise ValueError("the selection keeps no request (check --start/--end/--limit/--sample)")
    width = max(6, len(str(len(records) - 1)))
    requests, realized, num_truncated = [], {}, 0
    for i, record in enumerate(records):
        rid = f"t{i:0{width}d}"
        arrival_ms = s_to_ms((record.arrival_s - selection.start_s) * selection.time_scale)
        requests.append({
            "request_id": rid, "arrival": round(arrival_ms, 6),
            "prompt_tokens": record.num_prompt_tokens,
            "max_output_tokens": target.max_output_tokens,
            "client_id": record.client_id, "priority": record.priority,
        })
        realized[rid] = min(record.num_output_tokens, target.max_output_tokens)
        num_truncated += record.num_output_tokens > target.max_output_tokens
    document: dict[str, Any] = {"workload_id": target.workload_id, "clock": target.clock,
                                "capacity": target.capacity}
    if target.kv is not None:
        document["kv"] = target.kv
    document["requests"] = requests
    document["fixture_only_hidden_truth"] = {"realized_output_tokens": realized}
    return document, num_truncated
