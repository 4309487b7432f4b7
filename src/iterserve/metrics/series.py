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
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from iterserve.metrics.event_scan import build_timelines
from iterserve.metrics.events import Event
from iterserve.metrics.timeline import RequestTimeline


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
