"""The whole-sequence service formulas: the oracle the time-sliced reads of
:mod:`iterserve.metrics.service_scan` (the product: report, plots, fairness)
are pinned equal to.

Per client, every completed fact (F53: a compute fact's prompt rows times
w_p, an output's w_q, divided by the client weight when one is given) sorted
by (time, amount) and summed left to right: first as point objects (the
plain formula), then as whole float64 arrays (16 bytes a fact).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from iterserve.metrics.series import ServiceWeights, emission_array, emissions_inside
from iterserve.metrics.timeline import RequestTimeline


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


