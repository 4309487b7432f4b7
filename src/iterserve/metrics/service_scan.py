"""Per-client completed service (0x09A F53) read a time slice at a time, in bounded memory.

The one reader of a client's completed facts for the report, the service
plot and the fairness measures: one fact per compute fact (prompt rows times
w_p) and per output token (w_q), each divided by the client's weight when
one is given, sorted by (time, amount). Held whole that is 16 bytes a fact,
330 MB for a 100,000-request run, so the readers that only walk the facts in
order (the cumulative service plot, the service totals, the per-client
fairness measures) take them as consecutive slices of the sorted sequence:
each slice covers a half-open time range, so sorting a slice by (time,
amount) and joining the slices in time order gives exactly the whole sorted
sequence, and a running sum carried from slice to slice adds the same floats
in the same order. :func:`client_fact_arrays` joins them when a reader needs
the whole sequence (two clients' facts compared side by side).

The time edges come from the requests' first facts: requests are taken in
order of their first fact in bounds, and a slice ends where the facts of the
requests begun so far reach ``max_facts`` (a slice also holds the tails of
requests begun in earlier slices, so it can run past ``max_facts`` by the
facts of the requests still live at its start).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from iterserve.metrics.series import ServiceWeights, emission_array, emissions_inside
from iterserve.metrics.timeline import RequestTimeline

MAX_FACTS_PER_SLICE = 1 << 16  # 1 MiB of (time, amount) pairs at a time


@dataclass(frozen=True, slots=True)
class FactBounds:
    """Which facts count: stamped in [start_s, end_s), each amount divided by
    its client's weight when ``client_weights`` is given (1 for a client it
    does not name)."""

    weights: ServiceWeights
    start_s: float = -math.inf
    end_s: float = math.inf
    client_weights: Mapping[str, float] | None = None

    def phi(self, client_id: str) -> float:
        return 1.0 if self.client_weights is None else self.client_weights.get(client_id, 1.0)


@dataclass(frozen=True, slots=True)
class _Span:
    """One request's facts in bounds: how many, the first and last time."""

    num_facts: int
    first_s: float
    last_s: float


def client_fact_counts(timelines: Sequence[RequestTimeline], bounds: FactBounds) -> dict[str, int]:
    """Per client (in order of first appearance), its completed facts in bounds."""
    counts: dict[str, int] = {}
    for timeline in timelines:
        num = _span(timeline, bounds.start_s, bounds.end_s).num_facts
        counts[timeline.client_id] = counts.get(timeline.client_id, 0) + num
    return counts


def client_fact_slices(timelines: Sequence[RequestTimeline], client_id: str, bounds: FactBounds,
                       ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """``client_id``'s facts in bounds as consecutive (times, amounts) slices
    of their (time, amount)-sorted sequence, about ``MAX_FACTS_PER_SLICE``
    facts each (read when called)."""
    own = [t for t in timelines if t.client_id == client_id]
    spans = [_span(t, bounds.start_s, bounds.end_s) for t in own]
    live = [i for i, span in enumerate(spans) if span.num_facts]
    live.sort(key=lambda i: spans[i].first_s)
    first_s = np.array([spans[i].first_s for i in live], dtype=np.float64)
    last_s = np.array([spans[i].last_s for i in live], dtype=np.float64)
    for low_s, high_s in _edges(live, spans, bounds, MAX_FACTS_PER_SLICE):
        inside = np.flatnonzero((first_s < high_s) & (last_s >= low_s))
        yield _slice([own[live[i]] for i in inside], low_s, high_s, bounds)


def client_fact_arrays(timelines: Sequence[RequestTimeline], client_id: str, bounds: FactBounds,
                       num_facts: int) -> tuple[np.ndarray, np.ndarray]:
    """``client_id``'s ``num_facts`` facts in bounds (its
    :func:`client_fact_counts`), the slices joined: the real and imaginary
    views of one complex128 array, 16 bytes a fact."""
    facts = np.empty(num_facts, dtype=np.complex128)
    at = 0
    for times, amounts in client_fact_slices(timelines, client_id, bounds):
        facts.real[at:at + len(times)] = times
        facts.imag[at:at + len(times)] = amounts
        at += len(times)
    return facts.real, facts.imag


def held_slices(times: np.ndarray, amounts: np.ndarray,
                ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Facts held whole (sorted by time) as consecutive slices (views) of
    about ``MAX_FACTS_PER_SLICE`` facts, each extended to the last fact of
    its last time: cut only between distinct times, as
    :func:`client_fact_slices` cuts, so its readers take these alike."""
    low, size = 0, len(times)
    while low < size:
        high = min(low + MAX_FACTS_PER_SLICE, size)
        high = bisect_right(times, times[high - 1], high)  # ``times`` is a strided view:
        yield times[low:high], amounts[low:high]  # bisect reads two dozen of it, no copy
        low = high


def _edges(live: list[int], spans: list[_Span], bounds: FactBounds,
           max_facts: int) -> Iterator[tuple[float, float]]:
    """Half-open time ranges covering [start_s, end_s), cut at the first
    fact of the request whose facts would take the tally past ``max_facts``."""
    low_s, tally = bounds.start_s, 0
    for i in live:
        span = spans[i]
        if tally and tally + span.num_facts > max_facts and span.first_s > low_s:
            yield low_s, span.first_s
            low_s, tally = span.first_s, 0
        tally += span.num_facts
    yield low_s, bounds.end_s


def _slice(timelines: list[RequestTimeline], low_s: float, high_s: float,
           bounds: FactBounds) -> tuple[np.ndarray, np.ndarray]:
    """The facts of ``timelines`` in [low_s, high_s), sorted by (time, amount):
    one complex128 per fact (time + amount j; numpy sorts complex numbers by
    real part, then imaginary part), returned as its real and imaginary views."""
    size = sum(_num_facts(t, low_s, high_s) for t in timelines)
    facts = np.empty(size, dtype=np.complex128)
    times, amounts = facts.real, facts.imag
    weights, at = bounds.weights, 0
    for timeline in timelines:
        phi = bounds.phi(timeline.client_id)
        for time_s, rows in timeline.compute_s:
            if low_s <= time_s < high_s:
                amount = weights.prompt_weight * float(rows)
                times[at] = time_s
                amounts[at] = amount if bounds.client_weights is None else amount / phi
                at += 1
        low, high = emissions_inside(timeline, low_s, high_s)
        times[at:at + high - low] = emission_array(timeline)[low:high]
        output = weights.output_weight
        amounts[at:at + high - low] = output if bounds.client_weights is None else output / phi
        at += high - low
    facts.sort()
    return facts.real, facts.imag


def _num_facts(timeline: RequestTimeline, low_s: float, high_s: float) -> int:
    """``_span(timeline, low_s, high_s).num_facts`` without the first and last."""
    low, high = emissions_inside(timeline, low_s, high_s)
    return high - low + sum(1 for time_s, _ in timeline.compute_s if low_s <= time_s < high_s)


def _span(timeline: RequestTimeline, low_s: float, high_s: float) -> _Span:
    computes = [time_s for time_s, _ in timeline.compute_s if low_s <= time_s < high_s]
    emissions = timeline.emission_s
    low, high = emissions_inside(timeline, low_s, high_s)
    firsts = computes[:1] + ([float(emissions[low])] if high > low else [])
    lasts = computes[-1:] + ([float(emissions[high - 1])] if high > low else [])
    if not firsts:
        return _Span(0, math.inf, -math.inf)
    return _Span(len(computes) + high - low, min(firsts), max(lasts))


def running_totals(slices: Iterable[tuple[np.ndarray, np.ndarray]],
                   ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(times, cumulative amounts) per slice: ``np.cumsum`` of the whole
    sequence (it adds left to right), each slice's sum starting from the
    last total of the one before."""
    carried: float | None = None
    for times, amounts in slices:
        if not len(amounts):
            continue
        if carried is None:
            cumulative = np.cumsum(amounts)
        else:
            cumulative = np.cumsum(np.append(carried, amounts))[1:]
        carried = float(cumulative[-1])
        yield times, cumulative


def client_service_curves(timelines: Iterable[RequestTimeline], weights: ServiceWeights, *,
                          start_s: float = -math.inf, max_points: int,
                          ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per client (sorted), its (times, cumulative service): every fact's
    point when the client has at most
    ``max_points`` facts, else only the last point of each distinct time (the
    same post-step curve): read a time slice at a time, so a long run holds
    one slice of its per-token facts, not all of them."""
    timelines = list(timelines)
    bounds = FactBounds(weights, start_s)
    curves = {}
    for client, num_facts in sorted(client_fact_counts(timelines, bounds).items()):
        pieces = running_totals(client_fact_slices(timelines, client, bounds))
        if num_facts > max_points:
            pieces = (last_per_x(times, cumulative) for times, cumulative in pieces)
        parts = list(pieces)
        curves[client] = (np.concatenate([np.empty(0)] + [times for times, _ in parts]),
                          np.concatenate([np.empty(0)] + [cumulative for _, cumulative in parts]))
    return curves


def client_service_totals(timelines: Iterable[RequestTimeline], weights: ServiceWeights, *,
                          start_s: float = -math.inf) -> dict[str, float]:
    """Per client (sorted), its cumulative service at the end: the last value
    of :func:`client_service_curves` (0.0 with no facts)."""
    timelines = list(timelines)
    bounds = FactBounds(weights, start_s)
    totals = {}
    for client in sorted(client_fact_counts(timelines, bounds)):
        total = 0.0
        for _, cumulative in running_totals(client_fact_slices(timelines, client, bounds)):
            total = float(cumulative[-1])
        totals[client] = total
    return totals


def last_per_x(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The last point of each run of equal ``x`` (sorted): the same post-step
    curve, one vertex per distinct ``x``."""
    last = np.append(x[1:] != x[:-1], True) if len(x) else np.empty(0, dtype=bool)
    return x[last], y[last]
