"""Time series derived from the event log: per-client service and queue depth.

Per-client service follows the 0x09A accounting contract: the protected
identity is ``client_id``; service is published only by completed work;
prompt rows cost ``prompt_weight`` each and emitted outputs ``output_weight``
each (F52, F53). Rebuild rows earn nothing (0x0C); planned work (schedule
events) earns nothing (DESIGN rule 1).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from iterserve.metrics.events import Event
from iterserve.metrics.timeline import RequestTimeline, build_timelines


@dataclass(frozen=True, slots=True)
class ServiceWeights:
    """Declared per-token costs w_p (prompt rows) and w_q (outputs). Equal by
    default; 0x09A's fixtures use w_p=1, w_q=2 to make unlike service visible."""

    prompt_weight: float = 1.0
    output_weight: float = 1.0

    def __post_init__(self) -> None:
        for name in ("prompt_weight", "output_weight"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"ServiceWeights.{name} must be finite and >= 0")

    def to_dict(self) -> dict[str, float]:
        return {"prompt_weight": self.prompt_weight, "output_weight": self.output_weight}


@dataclass(frozen=True, slots=True)
class ServicePoint:
    time_s: float
    cumulative_service: float


def service_increments(
    timeline: RequestTimeline, weights: ServiceWeights
) -> list[tuple[float, float]]:
    """(time, weighted service) for each completed fact of one request."""
    increments = [(time_s, weights.prompt_weight * rows) for time_s, rows in timeline.compute_s]
    increments.extend((time_s, weights.output_weight) for time_s in timeline.emission_s)
    return increments


def service_increment_arrays(
    timeline: RequestTimeline, weights: ServiceWeights
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`service_increments` as two float64 arrays (times, service)."""
    times = np.array(timeline.emission_s, dtype=np.float64)
    amounts = np.full(len(times), weights.output_weight, dtype=np.float64)
    if timeline.compute_s:
        rows = np.array(timeline.compute_s, dtype=np.float64)
        times = np.concatenate([rows[:, 0], times])
        amounts = np.concatenate([weights.prompt_weight * rows[:, 1], amounts])
    return times, amounts


def client_service_series(
    timelines: Iterable[RequestTimeline],
    weights: ServiceWeights,
    *,
    start_s: float = -math.inf,
) -> Mapping[str, tuple[ServicePoint, ...]]:
    """Cumulative weighted service per client, counting facts at or after
    ``start_s`` (truncate the timelines for an end bound)."""
    increments: dict[str, list[tuple[float, float]]] = {}
    for timeline in timelines:
        steps = [step for step in service_increments(timeline, weights) if step[0] >= start_s]
        increments.setdefault(timeline.client_id, []).extend(steps)
    series: dict[str, tuple[ServicePoint, ...]] = {}
    for client in sorted(increments):
        total = 0.0
        points = []
        for time_s, amount in sorted(increments[client]):
            total += amount
            points.append(ServicePoint(time_s, total))
        series[client] = tuple(points)
    return series


def client_service_arrays(
    timelines: Iterable[RequestTimeline],
    weights: ServiceWeights,
    *,
    start_s: float = -math.inf,
) -> Mapping[str, tuple[np.ndarray, np.ndarray]]:
    """:func:`client_service_series` as two float64 arrays per client (times,
    cumulative service): the same order (time, then amount) and the same
    left-to-right sums (``cumsum`` adds in sequence), 16 bytes per completed
    fact instead of a point object, for runs with millions of tokens."""
    increments = client_increment_arrays(timelines, weights, start_s=start_s)
    return {client: (times, np.cumsum(amounts, out=amounts))  # in place: no second array
            for client, (times, amounts) in sorted(increments.items())}


def client_increment_arrays(
    timelines: Iterable[RequestTimeline],
    weights: ServiceWeights,
    *,
    start_s: float = -math.inf,
    end_s: float = math.inf,
    client_weights: Mapping[str, float] | None = None,
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per client (in order of first appearance), the service increments
    stamped in [start_s, end_s), each divided by the client's weight when
    ``client_weights`` is given (1 for a client it does not name), sorted by
    (time, amount): two float64 arrays, 16 bytes a completed fact."""
    parts: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
    for timeline in timelines:
        times, amounts = service_increment_arrays(timeline, weights)
        inside = (times >= start_s) & (times < end_s)
        if client_weights is not None:
            amounts = amounts / client_weights.get(timeline.client_id, 1.0)
        parts.setdefault(timeline.client_id, []).append((times[inside], amounts[inside]))
    arrays: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for client in list(parts):
        pieces = parts.pop(client)  # each client's pieces go as its arrays come
        times = np.concatenate([t for t, _ in pieces])
        amounts = np.concatenate([a for _, a in pieces])
        del pieces
        order = np.lexsort((amounts, times))
        arrays[client] = (times[order], amounts[order])
    return arrays


def client_service_totals(
    timelines: Iterable[RequestTimeline], weights: ServiceWeights, *, start_s: float = -math.inf
) -> Mapping[str, float]:
    series = client_service_arrays(timelines, weights, start_s=start_s)
    return {
        client: float(cumulative[-1]) if len(cumulative) else 0.0
        for client, (_, cumulative) in series.items()
    }


@dataclass(frozen=True, slots=True)
class ResourceSample:
    """One sample of queue depth and KV block usage, as the engine observed it.
    ``num_waiting`` counts every request not running, suspended (preempted)
    ones included; ``num_suspended`` is that suspended subset."""

    time_s: float
    num_waiting: int
    num_running: int
    num_kv_blocks_used: int
    num_kv_blocks_total: int
    num_suspended: int = 0

    def __post_init__(self) -> None:
        if min(self.num_waiting, self.num_running, self.num_kv_blocks_used,
               self.num_suspended) < 0:
            raise ValueError("counts must be >= 0")
        if self.num_suspended > self.num_waiting:
            raise ValueError("num_suspended is a subset of num_waiting")
        if not 0 <= self.num_kv_blocks_used <= self.num_kv_blocks_total:
            raise ValueError("need 0 <= num_kv_blocks_used <= num_kv_blocks_total")

    @property
    def kv_usage_fraction(self) -> float | None:
        if self.num_kv_blocks_total == 0:
            return None
        return self.num_kv_blocks_used / self.num_kv_blocks_total


def queue_depth_from_events(events: Iterable[Event]) -> tuple[tuple[float, int], ...]:
    """(time, requests waiting for admission) after each change: a request
    waits from arrival until admitted (explicitly or by emitting), rejected
    or cancelled."""
    changes: list[tuple[float, int]] = []
    for timeline in build_timelines(events).values():
        changes.append((timeline.arrival_s, +1))
        left_s = _left_queue_s(timeline)
        if left_s is not None:
            changes.append((left_s, -1))
    depth = 0
    series: list[tuple[float, int]] = []
    for time_s, delta in sorted(changes):
        depth += delta
        if series and series[-1][0] == time_s:
            series[-1] = (time_s, depth)
        else:
            series.append((time_s, depth))
    return tuple(series)


def _left_queue_s(timeline: RequestTimeline) -> float | None:
    candidates = [
        timeline.admit_s,
        timeline.reject_s,
        timeline.cancel_s,
        timeline.emission_s[0] if timeline.emission_s else None,
    ]
    known = [time_s for time_s in candidates if time_s is not None]
    return min(known) if known else None
