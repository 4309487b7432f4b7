"""The event-object read of an event log: the oracle the product's read
(:mod:`iterserve.metrics.event_scan`, whose tokens skip the event object and
whose token runs go in whole) is pinned equal to.

Every fact goes through :meth:`SortedTimelines.add` as its event object, one
at a time: the lifecycle rules checked in one place, with the errors that
name them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from iterserve.metrics.events import Event
from iterserve.metrics.timeline import RequestTimeline, SortedTimelines


def timelines_of_sorted(events: Iterable[Event], *, end_s: float = math.inf,
                        ) -> dict[str, RequestTimeline]:
    """The timelines of ``events`` read in the order given (an event earlier
    than its predecessor raises), facts stamped before ``end_s`` kept."""
    timelines = SortedTimelines(end_s=end_s)
    for event in events:
        timelines.add(event)
    return timelines.finish()


def timelines_of(events: Iterable[Event], *, end_s: float = math.inf,
                 ) -> dict[str, RequestTimeline]:
    """:func:`timelines_of_sorted` of the events stably sorted by time."""
    return timelines_of_sorted(sorted(events, key=lambda event: event.time_s), end_s=end_s)
