"""Time series derived from the event log: per-client service and queue depth.

Per-client service follows the 0x09A accounting contract: the protected
identity is ``client_id``; service is published only by completed work;
prompt rows cost ``prompt_weight`` each and emitted outputs ``output_weight``
each (F52, F53). Rebuild rows earn nothing (0x0C); planned work (schedule
events) earns nothing (DESIGN rule 1).
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left
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
    (time, amount): two float64 arrays (the real and imaginary views of one
    complex array), 16 bytes a completed fact.

    Two passes, so nothing per request is allocated: the first counts each
    client's facts inside the bounds (a request's emission times ascend, so
    those inside are one slice), the second fills arrays of that size in the
    order :func:`service_increments` gives (compute facts, then
    emissions, request after request)."""
    timelines = list(timelines)
    sizes: dict[str, int] = {}
    for timeline in timelines:
        num_computes = sum(start_s <= time_s < end_s for time_s, _ in timeline.compute_s)
        low, high = emissions_inside(timeline, start_s, end_s)
        sizes[timeline.client_id] = sizes.get(timeline.client_id, 0) + num_computes + high - low
    # one complex128 per fact, (time + amount j): numpy sorts complex numbers
    # by real part, then imaginary part, so an in-place sort is the
    # (time, amount) order with no index array and no sorted copies
    facts = {client: np.empty(size, dtype=np.complex128) for client, size in sizes.items()}
    filled = dict.fromkeys(sizes, 0)
    for timeline in timelines:
        client = timeline.client_id
        phi = 1.0 if client_weights is None else client_weights.get(client, 1.0)
        times, amounts = facts[client].real, facts[client].imag
        at = filled[client]
        for time_s, rows in timeline.compute_s:
            if start_s <= time_s < end_s:
                amount = weights.prompt_weight * float(rows)
                times[at], amounts[at] = time_s, amount if client_weights is None else amount / phi
                at += 1
        low, high = emissions_inside(timeline, start_s, end_s)
        times[at:at + high - low] = emission_array(timeline)[low:high]
        output = weights.output_weight
        amounts[at:at + high - low] = output if client_weights is None else output / phi
        filled[client] = at + high - low
    arrays: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for client, values in facts.items():
        values.sort()
        arrays[client] = (values.real, values.imag)  # views: 16 bytes a fact in all
    return arrays


def emission_array(timeline: RequestTimeline) -> np.ndarray:
    """A request's emission times as float64 (a view of a compact timeline's)."""
    emissions = timeline.emission_s
    if isinstance(emissions, array):
        return np.frombuffer(emissions, dtype=np.float64)
    return np.asarray(emissions, dtype=np.float64)


def emissions_inside(timeline: RequestTimeline, start_s: float, end_s: float) -> tuple[int, int]:
    """The slice ``[low, high)`` of the timeline's ascending emission times
    that lies in [start_s, end_s) (``np.searchsorted(..., side="left")`` of
    both bounds, ``high`` at least ``low``), searched as they are held (a
    compact timeline's ``array('d')``, else a tuple): no numpy array is made,
    and a request whose emissions all lie inside (most of a long run's) takes
    two compares. A report reads every request's several times."""
    emissions = timeline.emission_s
    size = len(emissions)
    low = 0 if not size or emissions[0] >= start_s else bisect_left(emissions, start_s)
    high = size if not size or emissions[-1] < end_s else bisect_left(emissions, end_s, low)
    return low, max(low, high)


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
