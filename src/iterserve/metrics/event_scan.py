"""One streaming pass over an events.jsonl file (0x07) for a long run's report.

A long run's event log does not fit in memory as event objects (one per
output token); its report needs the per-request timelines (compact: one
8-byte float per token in an ``array('d')``), the first and last fact (the
default window) and the preemption and resume facts (the run summary). :func:`scan_events` reads the file once, one
line at a time, validates the whole log (the lifecycle contract of
:mod:`iterserve.metrics.timeline` and a non-decreasing clock) and keeps only
those. The figures are the ones the event-list path computes: the same
facts in the same order.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from iterserve.metrics.events import Event, PreemptEvent, ResumeEvent, iter_jsonl
from iterserve.metrics.slo import ObservationWindow
from iterserve.metrics.timeline import RequestTimeline, build_sorted_timelines


@dataclass(frozen=True, slots=True)
class EventScan:
    """What a report keeps of an events file. ``timelines`` hold the facts
    stamped before ``end_s``."""

    timelines: dict[str, RequestTimeline]
    end_s: float
    num_events: int
    first_s: float
    last_s: float
    preempts: tuple[tuple[float, str], ...]  # (time, mode)
    resume_s: tuple[float, ...]

    def default_window(self) -> ObservationWindow:
        """From the first fact to just after the last (the window is
        half-open: its end is the next float after the last event's time)."""
        if not self.num_events:
            raise ValueError("no events: nothing arrived")
        return ObservationWindow(self.first_s, math.nextafter(self.last_s, math.inf))

    def covers(self, window: ObservationWindow) -> bool:
        """Whether ``timelines`` are the ones ``window`` observes."""
        return self.end_s == window.end_s or (self.end_s > self.last_s
                                               and window.end_s > self.last_s)

    def preempt_modes(self, window: ObservationWindow) -> list[str]:
        return [mode for time_s, mode in self.preempts if window.contains(time_s)]

    def num_resumes(self, window: ObservationWindow) -> int:
        return sum(window.contains(time_s) for time_s in self.resume_s)


@dataclass(slots=True)
class _Tally:
    num_events: int = 0
    first_s: float = math.nan
    last_s: float = math.nan


def scan_events(path: Path, *, end_s: float = math.inf, compact: bool = False) -> EventScan:
    """Read ``path`` once: every event is validated; timelines keep the facts
    stamped before ``end_s``; ``compact`` ones hold their emission times in
    an ``array('d')`` (a long run's report: 8 bytes a token)."""
    tally = _Tally()
    preempts: list[tuple[float, str]] = []
    resume_s: list[float] = []
    timelines = build_sorted_timelines(_tallied(iter_jsonl(path), tally, preempts, resume_s),
                                       end_s=end_s, compact=compact)
    return EventScan(timelines, end_s, tally.num_events, tally.first_s, tally.last_s,
                     tuple(preempts), tuple(resume_s))


def _tallied(events: Iterator[Event], tally: _Tally, preempts: list[tuple[float, str]],
             resume_s: list[float]) -> Iterator[Event]:
    for event in events:
        if not tally.num_events:
            tally.first_s = event.time_s
        tally.num_events += 1
        tally.last_s = event.time_s
        if isinstance(event, PreemptEvent):
            preempts.append((event.time_s, event.mode))
        elif isinstance(event, ResumeEvent):
            resume_s.append(event.time_s)
        yield event
