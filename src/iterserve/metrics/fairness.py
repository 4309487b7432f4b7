"""Client fairness and liveness measures from the event log (0x09A, F52-F63).

The five declarations of 0x09A, as every report states them:

- identity: ``client_id``;
- eligibility: a client is backlogged while at least one of its requests
  has arrived and is not terminal (finished, rejected, cancelled); for
  starvation (F63) it is eligible while, besides, at least one of those
  requests is ready: a request blocked on foreign readiness (between its
  ``not_ready`` and ``ready`` events, 0x0C) is not ready scheduler work;
- cost: W_i = (w_p * completed prompt rows + w_q * completed outputs) / phi_i
  (F52, F53; phi_i the client weight, 1 unless declared);
- publication: completed facts only (compute and token events); rebuild rows
  and planned work earn nothing (0x0C, DESIGN rule 1);
- guarantee: none is claimed here; these are measures.

Service published at time t counts for every interval (t1, t2] holding t, so
W is additive over adjacent intervals. The maximum backlogged gap is the
largest |W_f(t1, t2) - W_g(t1, t2)| over pairs f, g and intervals on which
both were continuously backlogged; starvation is F63 with a declared horizon
H: a client is starved when it stayed eligible for H without one completed
event. Jain's index is taken over the service rate each client received
while backlogged (W_i / backlogged time), so a finite-demand client is not
counted as under-served after its demand ends.

A log without readiness events (every log written before the engine
recorded them, and every run in which nothing blocked) has eligible time
equal to backlogged time, and its report keeps the keys it always had. A log
with them adds each client's ``eligible_s`` and ``blocked_on_readiness_s``
and states the exclusion: the starvation figure's denominator stays explicit.
The gap and Jain's index keep the backlogged intervals.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import zip_longest
from typing import Any

import numpy as np

from iterserve.metrics.fairness_scan import ClientService, Interval, scan_client_service
from iterserve.metrics.series import ServiceWeights
from iterserve.metrics.service_scan import (
    FactBounds,
    client_fact_arrays,
    client_fact_counts,
    client_fact_slices,
    held_slices,
)
from iterserve.metrics.slo import ObservationWindow
from iterserve.metrics.timeline import RequestTimeline


@dataclass(frozen=True, slots=True)
class Steps:
    """One client's completed facts: publication times and weighted service,
    sorted by (time, service)."""

    times_s: np.ndarray
    amounts: np.ndarray

    @classmethod
    def empty(cls) -> Steps:
        return cls(np.empty(0), np.empty(0))

    def within(self, start_s: float, end_s: float) -> Steps:
        """The facts in (start_s, end_s]: a slice (views, no copies) since
        the times ascend. ``bisect`` rather than ``np.searchsorted``, which
        copies a strided array (the times are a view of a complex array)."""
        low = bisect.bisect_right(self.times_s, start_s)
        high = max(low, bisect.bisect_right(self.times_s, end_s))
        return Steps(self.times_s[low:high], self.amounts[low:high])


@dataclass(frozen=True, slots=True)
class ServiceGap:
    """The largest shared-backlog service difference and where it happened."""

    value: float
    clients: tuple[str, str]  # (ahead, behind)
    interval_s: Interval

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "clients": list(self.clients),
                "interval_s": list(self.interval_s)}


@dataclass(frozen=True, slots=True)
class ClientFairness:
    client_id: str
    weight: float
    service: float  # normalized by the client weight
    num_completed_events: int
    backlogged_s: float
    longest_unserved_s: float  # longest eligible stretch without a completed event
    is_starved: bool
    # time backlogged with at least one live request ready (F63 eligibility);
    # None when the log records no readiness change (then it is backlogged_s)
    eligible_s: float | None = None

    @property
    def service_rate(self) -> float | None:
        return self.service / self.backlogged_s if self.backlogged_s > 0 else None

    @property
    def blocked_on_readiness_s(self) -> float:
        """Backlogged time with every live request blocked on foreign readiness."""
        return 0.0 if self.eligible_s is None else self.backlogged_s - self.eligible_s

    def to_dict(self) -> dict[str, Any]:
        record: dict[str, Any] = {
            "weight": self.weight, "service": self.service,
            "num_completed_events": self.num_completed_events, "backlogged_s": self.backlogged_s}
        if self.eligible_s is not None:
            record.update(eligible_s=self.eligible_s,
                          blocked_on_readiness_s=self.blocked_on_readiness_s)
        record.update(service_rate_while_backlogged=self.service_rate,
                      longest_unserved_s=self.longest_unserved_s, starved=self.is_starved)
        return record


@dataclass(frozen=True, slots=True)
class FairnessReport:
    weights: ServiceWeights
    client_weights: tuple[tuple[str, float], ...]
    horizon_s: float
    horizon_source: str  # "declared" or "window"
    per_client: tuple[ClientFairness, ...]
    max_backlogged_gap: ServiceGap | None
    jain_index: float | None
    # the log records readiness changes: starvation excludes blocked time
    excludes_blocked: bool = False

    @property
    def starved_clients(self) -> tuple[str, ...]:
        return tuple(client.client_id for client in self.per_client if client.is_starved)

    def to_dict(self) -> dict[str, Any]:
        gap = self.max_backlogged_gap
        starvation: dict[str, Any] = {"predicate": "F63", "horizon_s": self.horizon_s,
                                      "horizon_source": self.horizon_source}
        if self.excludes_blocked:
            starvation.update(eligibility=STARVATION_ELIGIBILITY, blocked_on_readiness_s=sum(
                client.blocked_on_readiness_s for client in self.per_client))
        starvation.update(num_starved=len(self.starved_clients),
                          starved_clients=list(self.starved_clients))
        return {
            "declarations": READINESS_DECLARATIONS if self.excludes_blocked else DECLARATIONS,
            "weights": {**self.weights.to_dict(), "client_weights": dict(self.client_weights)},
            "per_client": {client.client_id: client.to_dict() for client in self.per_client},
            "max_backlogged_gap": None if gap is None else gap.to_dict(),
            "starvation": starvation,
            "jain_index_backlogged": self.jain_index,
        }


DECLARATIONS = {
    "identity": "client_id",
    "eligibility": "a request arrived and not terminal (continuously backlogged)",
    "cost": "(w_p * completed prompt rows + w_q * completed outputs) / client weight (F52)",
    "publication": "completed facts of validated results; rebuild and planned work earn 0",
    "guarantee": "measured, not claimed",
}

#: F63's eligibility where the log records readiness changes (0x0C, 0x09B)
STARVATION_ELIGIBILITY = ("backlogged with at least one live request ready: time with every "
                          "live request blocked on foreign readiness (not_ready to ready) is "
                          "excluded")

#: the declarations of a report whose log records readiness changes
READINESS_DECLARATIONS = {
    **DECLARATIONS,
    "eligibility": "a request arrived and not terminal (continuously backlogged); for "
                   f"starvation (F63): {STARVATION_ELIGIBILITY}",
}


def evaluate_fairness(
    timelines: Iterable[RequestTimeline],
    window: ObservationWindow,
    weights: ServiceWeights | None = None,
    client_weights: Mapping[str, float] | None = None,
    horizon_s: float | None = None,
) -> FairnessReport:
    """Fairness measures of one run over ``window`` (timelines cut at its end)."""
    weights = weights or ServiceWeights()
    phis = dict(client_weights or {})
    timelines = list(timelines)
    backlog = backlog_intervals(timelines, window)
    excludes_blocked = any(timeline.not_ready_s for timeline in timelines)
    eligible = eligible_intervals(timelines, window) if excludes_blocked else backlog
    bounds = FactBounds(weights, window.start_s, window.end_s, phis)
    horizon = window.end_s - window.start_s if horizon_s is None else horizon_s
    # a pair of clients compares their facts side by side: held whole (16 bytes a fact)
    # only when two clients were backlogged, else read a time slice at a time
    steps = client_steps(timelines, bounds) if len(backlog) > 1 else {}

    def facts_of(client: str) -> Iterable[tuple[np.ndarray, np.ndarray]]:
        held = steps.get(client)
        if held is None:
            return client_fact_slices(timelines, client, bounds)
        return held_slices(held.times_s, held.amounts)

    per_client = tuple(
        _client_fairness(client, phis.get(client, 1.0), backlog.get(client, []),
                         eligible.get(client, []) if excludes_blocked else None,
                         scan_client_service(facts_of(client), eligible.get(client, [])),
                         horizon)
        # every client with a timeline, facts in bounds or not (client_fact_counts' keys)
        for client in sorted(set(backlog) | {timeline.client_id for timeline in timelines})
    )
    return FairnessReport(
        weights=weights,
        client_weights=tuple(sorted(phis.items())),
        horizon_s=horizon,
        horizon_source="window" if horizon_s is None else "declared",
        per_client=per_client,
        max_backlogged_gap=max_backlogged_gap(backlog, steps),
        jain_index=jain_index([c.service_rate for c in per_client if c.service_rate is not None]),
        excludes_blocked=excludes_blocked,
    )


def backlog_intervals(
    timelines: Iterable[RequestTimeline], window: ObservationWindow
) -> dict[str, list[Interval]]:
    """Per client, the merged closed intervals during which it was backlogged."""
    raw: dict[str, list[Interval]] = {}
    for timeline in timelines:
        live = _live_interval(timeline, window)
        if live is not None:
            raw.setdefault(timeline.client_id, []).append(live)
    return {client: _merge(intervals) for client, intervals in raw.items()}


def eligible_intervals(
    timelines: Iterable[RequestTimeline], window: ObservationWindow
) -> dict[str, list[Interval]]:
    """Per client, the merged closed intervals during which it was eligible
    (F63): backlogged with at least one live request ready. Each request
    adds its live interval less its blocked stretches, [not_ready, ready)
    (to its end while still blocked); a client none of whose requests ever
    was ready maps to an empty list."""
    raw: dict[str, list[Interval]] = {}
    for timeline in timelines:
        live = _live_interval(timeline, window)
        if live is not None:
            raw.setdefault(timeline.client_id, []).extend(_ready_pieces(timeline, *live))
    return {client: _merge(intervals) for client, intervals in raw.items()}


def _live_interval(timeline: RequestTimeline, window: ObservationWindow) -> Interval | None:
    """From arrival to the terminal fact, inside the window; None when empty."""
    end = _terminal_s(timeline)
    start_s = max(timeline.arrival_s, window.start_s)
    end_s = min(window.end_s if end is None else end, window.end_s)
    return (start_s, end_s) if end_s > start_s else None


def _ready_pieces(timeline: RequestTimeline, start_s: float, end_s: float) -> list[Interval]:
    """[start_s, end_s] less the request's blocked stretches: the ascending,
    non-empty pieces in which it was ready (a request arrives ready)."""
    pieces: list[Interval] = []
    cursor_s = start_s
    for blocked_s, ready_s in zip_longest(timeline.not_ready_s, timeline.ready_s,
                                          fillvalue=math.inf):  # still blocked: to the end
        if blocked_s >= end_s:
            break
        if blocked_s > cursor_s:
            pieces.append((cursor_s, blocked_s))
        cursor_s = max(cursor_s, ready_s)
    if cursor_s < end_s:
        pieces.append((cursor_s, end_s))
    return pieces


def client_steps(timelines: Sequence[RequestTimeline], bounds: FactBounds) -> dict[str, Steps]:
    """Per client, each completed fact in ``bounds`` with its weighted
    service, sorted by (time, service): float64 arrays, 16 bytes a fact (a
    long run publishes one per token)."""
    return {client: Steps(*client_fact_arrays(timelines, client, bounds, num_facts))
            for client, num_facts in client_fact_counts(timelines, bounds).items()}


def max_backlogged_gap(
    backlog: Mapping[str, list[Interval]], steps: Mapping[str, Steps]
) -> ServiceGap | None:
    """max |W_f(t1,t2) - W_g(t1,t2)| over pairs and jointly backlogged intervals."""
    best: ServiceGap | None = None
    clients = sorted(backlog)
    for i, f in enumerate(clients):
        for g in clients[i + 1:]:
            for joint in _intersect(backlog[f], backlog[g]):
                gap = _gap_on(joint, f, g, steps.get(f, Steps.empty()), steps.get(g, Steps.empty()))
                if best is None or gap.value > best.value:
                    best = gap
    return best


def _gap_on(joint: Interval, f: str, g: str, f_steps: Steps, g_steps: Steps) -> ServiceGap:
    """Over (s, e]: the difference D(t) = W_f(s, t) - W_g(s, t) is a walk
    from 0; the widest |D(t2) - D(t1)| is its max minus its min."""
    start, end = joint
    f_in, g_in = f_steps.within(start, end), g_steps.within(start, end)
    times = np.concatenate([f_in.times_s, g_in.times_s])
    amounts = np.concatenate([f_in.amounts, -g_in.amounts])
    order = np.lexsort((amounts, times))
    times, levels = times[order], np.cumsum(amounts[order])  # cumsum adds left to right
    del order, amounts
    # equal-time facts are one publication: the walk is read after each one's last fact
    last = np.append(times[1:] != times[:-1], True) if len(times) else np.empty(0, bool)
    times, levels = times[last], levels[last]
    low, high = (0.0, start), (0.0, start)
    if len(levels):
        lowest, highest = int(np.argmin(levels)), int(np.argmax(levels))  # first of each
        if levels[lowest] < 0.0:
            low = (float(levels[lowest]), float(times[lowest]))
        if levels[highest] > 0.0:
            high = (float(levels[highest]), float(times[highest]))
    if high[1] >= low[1]:  # f pulled ahead after the low point
        return ServiceGap(high[0] - low[0], (f, g), (low[1], high[1]))
    return ServiceGap(high[0] - low[0], (g, f), (high[1], low[1]))


def _client_fairness(client: str, phi: float, backlog: list[Interval],
                     eligible: list[Interval] | None, service: ClientService,
                     horizon_s: float) -> ClientFairness:
    """``eligible``: the client's eligible intervals when the log records
    readiness changes (None: they are its backlog intervals)."""
    longest = service.longest_unserved_s
    return ClientFairness(
        client_id=client,
        weight=phi,
        service=service.service,
        num_completed_events=service.num_completed_events,
        backlogged_s=_length_s(backlog),
        longest_unserved_s=longest,
        is_starved=bool(backlog if eligible is None else eligible) and longest >= horizon_s,
        eligible_s=None if eligible is None else _length_s(eligible),
    )


def _length_s(intervals: list[Interval]) -> float:
    return sum(end - start for start, end in intervals)


def jain_index(values: Sequence[float]) -> float | None:
    """(sum x)^2 / (n sum x^2); None when undefined (no values, all zero)."""
    squares = sum(x * x for x in values)
    if not values or squares == 0:
        return None
    return sum(values) ** 2 / (len(values) * squares)


def _terminal_s(timeline: RequestTimeline) -> float | None:
    ends = [t for t in (timeline.finish_s, timeline.reject_s, timeline.cancel_s) if t is not None]
    return min(ends) if ends else None


def _merge(intervals: list[Interval]) -> list[Interval]:
    merged: list[Interval] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _intersect(a: list[Interval], b: list[Interval]) -> list[Interval]:
    out: list[Interval] = []
    i = j = 0
    while i < len(a) and j < len(b):
        start, end = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if end > start:
            out.append((start, end))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out
