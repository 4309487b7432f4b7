"""The immutable scheduler state published at each cut (0x01A).

A state is never mutated: :func:`iterserve.records.transition.advance` and the
queue events in :mod:`iterserve.records.events` build successors with a higher
``state_version``. ``views`` holds every live request and the requests that
became terminal at this cut; retired terminal requests leave the state.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from iterserve.records.view import RequestView


@dataclass(frozen=True, slots=True)
class CapacityFacts:
    """Capacity facts published by the memory owner, never by a policy (0x0A).

    ``kv_rows_total``/``kv_rows_free`` are logical KV rows (None: unbounded).
    """

    kv_rows_total: int | None = None
    kv_rows_free: int | None = None


@dataclass(frozen=True, slots=True)
class SchedulerState:
    """What every policy decides from at cut ``decision_id``.

    Queues hold request ids in their declared order; each live id appears in
    exactly one of waiting/running/suspended. ``service`` is completed token
    service per client, debited only from validated results (0x09A).
    """

    decision_id: int
    state_version: int
    now: float
    waiting: tuple[str, ...]
    running: tuple[str, ...]
    suspended: tuple[str, ...]
    finished: tuple[str, ...]
    views: Mapping[str, RequestView]
    token_budget: int
    sequence_budget: int
    capacity: CapacityFacts = CapacityFacts()
    service: Mapping[str, int] = field(default_factory=dict)

    def view(self, request_id: str) -> RequestView:
        return self.views[request_id]

    @property
    def num_live(self) -> int:
        return len(self.waiting) + len(self.running) + len(self.suspended)

    @property
    def has_live(self) -> bool:
        return bool(self.waiting or self.running or self.suspended)
