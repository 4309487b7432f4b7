"""One client's 0x09A figures from its completed facts, a time slice at a time.

The per-client measures of :mod:`iterserve.metrics.fairness` (weighted
service W_i, the number of completed events, the longest eligible stretch
without one) read a client's facts once, in (time, amount) order: here they
come as the consecutive slices of :mod:`iterserve.metrics.service_scan`, so a
long run holds one slice of its per-token facts instead of all of them
(16 bytes a token), or as one slice when the facts are held whole anyway.
The figures do not depend on where the slices are cut:
the service is the same left-to-right sum (a running total carried from slice
to slice), distinct times never straddle two slices, and each backlog
interval's widest gap is the maximum of the same differences.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from iterserve.metrics.service_scan import running_totals

Interval = tuple[float, float]


@dataclass(frozen=True, slots=True)
class ClientService:
    """``service``: the left-to-right sum of the weighted facts (the int 0
    when there are none); ``num_completed_events``: their distinct times;
    ``longest_unserved_s``: the widest gap inside a backlog interval (0.0
    without one)."""

    service: float
    num_completed_events: int
    longest_unserved_s: float


def scan_client_service(slices: Iterable[tuple[np.ndarray, np.ndarray]],
                        backlog: Sequence[Interval]) -> ClientService:
    """One client's figures over its facts, (times, amounts) slices of their
    (time, amount)-sorted sequence, and its merged, ascending backlog
    intervals."""
    service: float = 0
    num_events = 0
    unserved = UnservedScan(backlog)
    for times, cumulative in running_totals(slices):
        service = float(cumulative[-1])
        num_events += int(np.count_nonzero(times[1:] != times[:-1])) + 1
        unserved.feed(np.ascontiguousarray(times))
    return ClientService(service, num_events, unserved.longest_s())


class UnservedScan:
    """The widest gap between ``start``, the fact times in (start, end] and
    ``end`` of each backlog interval, fed ascending times a slice at a time
    (each slice later than the one before)."""

    def __init__(self, intervals: Sequence[Interval]) -> None:
        self._intervals = list(intervals)
        self._widest_s = [-math.inf] * len(self._intervals)
        self._last_s: list[float | None] = [None] * len(self._intervals)
        self._first_open = 0  # intervals before it end before the slices still to come

    def feed(self, times_s: np.ndarray) -> None:
        if not len(times_s):
            return
        latest_s = float(times_s[-1])
        for index in range(self._first_open, len(self._intervals)):
            start_s, end_s = self._intervals[index]
            if start_s >= latest_s:
                break  # (start, end] lies past this slice
            low, high = (int(i) for i in np.searchsorted(times_s, (start_s, end_s), side="right"))
            if high > low:
                self._take(index, times_s[low:high])
        while (self._first_open < len(self._intervals)
               and self._intervals[self._first_open][1] <= latest_s):
            self._first_open += 1

    def _take(self, index: int, inside_s: np.ndarray) -> None:
        last_s = self._last_s[index]
        previous_s = self._intervals[index][0] if last_s is None else last_s
        widest = max(self._widest_s[index], float(inside_s[0] - previous_s))
        if len(inside_s) > 1:
            widest = max(widest, float((inside_s[1:] - inside_s[:-1]).max()))
        self._widest_s[index] = widest
        self._last_s[index] = float(inside_s[-1])

    def longest_s(self) -> float:
        """The widest gap over every interval (an interval without facts is
        one gap), 0.0 without intervals."""
        longest = 0.0
        for (start_s, end_s), widest, last_s in zip(self._intervals, self._widest_s,
                                                    self._last_s, strict=True):
            gap = end_s - start_s if last_s is None else max(widest, end_s - last_s)
            longest = max(longest, gap)
        return longest
