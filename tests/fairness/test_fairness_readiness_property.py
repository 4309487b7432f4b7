"""The report's F63 figures against a brute-force oracle on a unit grid.

Random logs on integer times: each request arrives, is admitted, then
alternates ready and blocked stretches (``not_ready`` / ``ready`` events,
zero-length blocks included), completes prompt rows only while ready, and is
cancelled or stays live to the window's end. The oracle does not build
intervals: it walks the unit cells [k, k + 1) of the window. A client is
eligible on a cell when one of its requests is live and not blocked over the
whole cell; an unserved stretch grows by one per eligible cell, ends with a
cell that is not eligible, and restarts after a completed fact at the cell's
right end (a fact at time t lies in (s, e] of the eligible interval holding
cell [t - 1, t)). Starved = eligible somewhere and the longest stretch >= H.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from iterserve.metrics.event_scan import build_timelines
from iterserve.metrics.events import (
    AdmitEvent,
    ArrivalEvent,
    CancelEvent,
    ComputeEvent,
    Event,
    NotReadyEvent,
    ReadyEvent,
)
from iterserve.metrics.fairness import evaluate_fairness
from iterserve.metrics.slo import ObservationWindow

WINDOW_END = 60


@dataclass(frozen=True)
class Request:
    rid: str
    client: str
    arrival: int
    # (ready length, blocked length) pairs, then a last ready length
    stretches: tuple[tuple[int, int], ...]
    last_ready: int
    facts: frozenset[int]  # chosen offsets, kept only inside ready stretches
    is_cancelled: bool

    def ready_spans(self) -> list[tuple[int, int]]:
        spans, t = [], self.arrival
        for ready, blocked in self.stretches:
            spans.append((t, t + ready))
            t += ready + blocked
        spans.append((t, t + self.last_ready))
        return spans

    def blocked_spans(self) -> list[tuple[int, int]]:
        spans, t = [], self.arrival
        for ready, blocked in self.stretches:
            spans.append((t + ready, t + ready + blocked))
            t += ready + blocked
        return spans

    @property
    def end(self) -> int:
        return self.ready_spans()[-1][1] if self.is_cancelled else WINDOW_END

    def fact_times(self) -> list[int]:
        return sorted(t for start, end in self.ready_spans() for t in range(start + 1, end + 1)
                      if t - self.arrival in self.facts)

    def events(self) -> list[Event]:
        out: list[Event] = [ArrivalEvent(float(self.arrival), self.rid, client_id=self.client),
                            AdmitEvent(float(self.arrival), self.rid)]
        facts = self.fact_times()
        t = self.arrival
        for ready, blocked in self.stretches:
            out += [ComputeEvent(float(f), self.rid, num_rows=1) for f in facts
                    if t < f <= t + ready]
            out += [NotReadyEvent(float(t + ready), self.rid),
                    ReadyEvent(float(t + ready + blocked), self.rid)]
            t += ready + blocked
        out += [ComputeEvent(float(f), self.rid, num_rows=1) for f in facts if f > t]
        if self.is_cancelled:
            out.append(CancelEvent(float(self.end), self.rid, reason="client"))
        return out


@st.composite
def requests(draw: st.DrawFn) -> list[Request]:
    made = []
    for index in range(draw(st.integers(1, 5))):
        made.append(Request(
            rid=f"r{index}", client=draw(st.sampled_from("AB")),
            arrival=draw(st.integers(0, 12)),
            stretches=tuple(draw(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)),
                                          max_size=3))),
            last_ready=draw(st.integers(0, 6)),
            facts=frozenset(draw(st.sets(st.integers(1, 45), max_size=8))),
            is_cancelled=draw(st.booleans())))
    return made


def _oracle(made: list[Request], client: str, horizon: int) -> tuple[int, int, bool]:
    """(eligible cells, longest unserved stretch, starved) of ``client``."""
    mine = [r for r in made if r.client == client]
    facts = {t for r in mine for t in r.fact_times()}
    eligible_cells = longest = current = 0
    for k in range(WINDOW_END):
        eligible = any(r.arrival <= k and k + 1 <= r.end
                       and not any(b <= k and k + 1 <= e for b, e in r.blocked_spans())
                       for r in mine)
        if not eligible:
            current = 0
            continue
        eligible_cells += 1
        current += 1
        longest = max(longest, current)
        if k + 1 in facts:
            current = 0
    return eligible_cells, longest, eligible_cells > 0 and longest >= horizon


@settings(max_examples=150, deadline=None)
@given(requests(), st.integers(1, 20))
def test_eligible_time_and_starvation_match_the_cell_oracle(made: list[Request],
                                                             horizon: int) -> None:
    events = sorted((e for r in made for e in r.events()), key=lambda e: e.time_s)
    report = evaluate_fairness(build_timelines(events).values(),
                               ObservationWindow(0.0, float(WINDOW_END)), horizon_s=horizon)
    has_blocks = any(r.stretches for r in made)
    assert report.excludes_blocked is has_blocks
    for client in report.per_client:
        cells, longest, starved = _oracle(made, client.client_id, horizon)
        eligible_s = client.eligible_s if has_blocks else client.backlogged_s
        assert (eligible_s, client.longest_unserved_s, client.is_starved) == (
            cells, longest, starved), client.client_id
