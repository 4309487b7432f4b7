"""The one read of an event log (0x07): a JSONL file or a list, in one pass.

A report needs the per-request timelines (validated by the lifecycle
contract of :mod:`iterserve.metrics.timeline` and a non-decreasing clock),
the first and last fact (the default window) and the preemption and resume
facts (the run summary). :func:`scan_events` reads them from an events.jsonl
file one line at a time: a long run's log does not fit in memory as event
objects (one per output token), so its tokens go to the timelines without
one, and ``compact`` timelines hold one 8-byte float per token in an
``array('d')``. :func:`scan_event_list` reads a list the same way (a valid
token through the same shortcut, any other event through
:meth:`SortedTimelines.add`, which raises the error naming it).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from iterserve.metrics.events import (
    TOKENS_LINE_KIND,
    Event,
    EventLogError,
    PreemptEvent,
    ResumeEvent,
    TokenEvent,
    event_at,
    share_time,
    token_events_at,
    token_run_at,
)
from iterserve.metrics.slo import ObservationWindow
from iterserve.metrics.timeline import RequestTimeline, SortedTimelines
from iterserve.records.jsonl import json_objects


@dataclass(frozen=True, slots=True)
class EventScan:
    """What a report keeps of an event log. ``timelines`` hold the facts
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


class _Scan:
    """What a scan keeps while it reads (an :class:`EventScan` once
    finished): the timelines and the count, first and last time, preemptions
    and resumes of every event."""

    __slots__ = ("timelines", "num_events", "first_s", "last_s", "preempts", "resume_s", "end_s")

    def __init__(self, end_s: float, compact: bool) -> None:
        self.timelines = SortedTimelines(end_s=end_s, compact=compact)
        self.end_s = end_s
        self.num_events, self.first_s, self.last_s = 0, math.nan, math.nan
        self.preempts: list[tuple[float, str]] = []
        self.resume_s: list[float] = []

    def count(self, time_s: float, num_events: int = 1) -> None:
        if not self.num_events:
            self.first_s = time_s
        self.num_events += num_events
        self.last_s = time_s

    def add(self, event: Event) -> None:
        """An event the timelines' token shortcut did not take: checked by
        :meth:`SortedTimelines.add`, which raises the error naming it."""
        if isinstance(event, PreemptEvent):
            self.preempts.append((event.time_s, event.mode))
        elif isinstance(event, ResumeEvent):
            self.resume_s.append(event.time_s)
        self.timelines.add(event)

    def finish(self) -> EventScan:
        return EventScan(self.timelines.finish(), self.end_s, self.num_events, self.first_s,
                         self.last_s, tuple(self.preempts), tuple(self.resume_s))


def scan_event_list(events: Iterable[Event], *, end_s: float = math.inf) -> EventScan:
    """:func:`scan_events` of an event list (a held run, a bench client's
    log): the events stably sorted by time first (equal-time events keep
    their order), then read as the file's lines are, a valid token through
    the timelines' shortcut (:meth:`SortedTimelines.add_token`) and any
    other event, or a token it refuses, through :meth:`SortedTimelines.add`."""
    scan = _Scan(end_s, compact=False)
    add_token = scan.timelines.add_token
    for event in sorted(events, key=lambda item: item.time_s):
        if not (type(event) is TokenEvent
                and add_token(event.time_s, event.request_id, event.token_index)):
            scan.add(event)
        scan.count(event.time_s)
    return scan.finish()


def build_timelines(events: Iterable[Event], *, end_s: float = math.inf,
                    ) -> dict[str, RequestTimeline]:
    """The per-request timelines of an event list (:func:`scan_event_list`),
    keeping only facts stamped before ``end_s``. Raises
    :class:`EventLogError` on any lifecycle violation."""
    return scan_event_list(events, end_s=end_s).timelines


def scan_events(path: Path, *, end_s: float = math.inf, compact: bool = False) -> EventScan:
    """Read ``path`` once: every event is validated; timelines keep the facts
    stamped before ``end_s``; ``compact`` ones hold their emission times in
    an ``array('d')`` (a long run's report: 8 bytes a token). A token line
    whose fields are plainly valid goes to the timelines without an event
    object (:meth:`SortedTimelines.add_token`); any other line, or a token
    that breaks a rule, is read as :func:`iter_jsonl` reads it (the same
    errors, naming the line)."""
    scan = _Scan(end_s, compact)
    add_token, last_time = scan.timelines.add_token, None
    request_id: str = ""
    index: int = 0
    for number, record in json_objects(path, EventLogError):
        last_time = time_s = share_time(record, last_time)
        if record.get("kind") == TOKENS_LINE_KIND:  # a run of tokens at one time
            scan.count(time_s, _scan_tokens(scan.timelines, path, number, record))
            continue
        # a token line TokenEvent accepts as it stands (its four fields only, a
        # finite float time >= 0, a non-empty id, an int index >= 1; an int
        # time or a bool index takes the event path) skips the event object
        if record.get("kind") == "token" and len(record) == 4:
            request_id, index = record.get("request_id", ""), record.get("token_index", 0)
            is_plain = (_is_plain_time(time_s)
                        and type(request_id) is str and request_id != ""
                        and type(index) is int and index >= 1)
        else:
            is_plain = False
        if not (is_plain and add_token(time_s, request_id, index)):
            scan.add(event_at(path, number, record))
        scan.count(time_s)
    return scan.finish()


def _scan_tokens(timelines: SortedTimelines, path: Path, number: int,
                 record: dict[str, object]) -> int:
    """Add the token facts of ``tokens`` line ``number``; returns how many.
    Plainly valid entries go straight to the timelines
    (:meth:`SortedTimelines.add_tokens`); an entry that is not, or that
    breaks a rule, is added as its event object (which raises the error
    that names the line and the entry, or is added)."""
    time_s, request_ids, indices = token_run_at(path, number, record)
    count = len(request_ids)
    plain_time = _is_plain_time(time_s)
    start = timelines.add_tokens(time_s, request_ids, indices) if plain_time else 0
    if start < count:  # the event path from here, one entry at a time
        events = token_events_at(path, number, record)
        while start < count:
            timelines.add(events[start])
            start += 1
            if plain_time:
                start = timelines.add_tokens(time_s, request_ids, indices, start)
    return count


def _is_plain_time(time_s: object) -> bool:
    """A time TokenEvent takes as it stands: a finite float >= 0 (an int
    time takes the event path, which keeps its type)."""
    return type(time_s) is float and 0.0 <= time_s < math.inf
