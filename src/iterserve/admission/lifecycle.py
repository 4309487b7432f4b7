"""Preemption lifecycle with an explicit transition table (0x0C).

::

    RUNNING -> PREEMPT_PENDING -> SUSPENDED_PRESERVED | SUSPENDED_RECOMPUTE
    SUSPENDED_* -> RESUME_PENDING -> RUNNING
    any non-terminal -> CANCELLED

PREEMPT_PENDING is not free capacity (only a matching READY release result
is), and RESUME_PENDING is not runnable work (it waits for the readiness
conjunction). CANCELLED is terminal.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType


class Lifecycle(enum.Enum):
    RUNNING = "running"
    PREEMPT_PENDING = "preempt_pending"
    SUSPENDED_PRESERVED = "suspended_preserved"
    SUSPENDED_RECOMPUTE = "suspended_recompute"
    RESUME_PENDING = "resume_pending"
    CANCELLED = "cancelled"


_L = Lifecycle
TRANSITIONS: Mapping[Lifecycle, frozenset[Lifecycle]] = MappingProxyType({
    _L.RUNNING: frozenset({_L.PREEMPT_PENDING, _L.CANCELLED}),
    _L.PREEMPT_PENDING: frozenset({_L.SUSPENDED_PRESERVED, _L.SUSPENDED_RECOMPUTE,
                                   _L.CANCELLED}),
    _L.SUSPENDED_PRESERVED: frozenset({_L.RESUME_PENDING, _L.CANCELLED}),
    _L.SUSPENDED_RECOMPUTE: frozenset({_L.RESUME_PENDING, _L.CANCELLED}),
    _L.RESUME_PENDING: frozenset({_L.RUNNING, _L.CANCELLED}),
    _L.CANCELLED: frozenset(),
})

SUSPENDED: frozenset[Lifecycle] = frozenset({_L.SUSPENDED_PRESERVED, _L.SUSPENDED_RECOMPUTE})


class IllegalTransitionError(ValueError):
    """A lifecycle move not in :data:`TRANSITIONS`."""

    def __init__(self, source: Lifecycle, target: Lifecycle) -> None:
        allowed = ", ".join(sorted(s.name for s in TRANSITIONS[source])) or "none (terminal)"
        super().__init__(f"illegal lifecycle transition {source.name} -> {target.name}; "
                         f"allowed from {source.name}: {allowed}")
        self.source = source
        self.target = target


def can_transition(source: Lifecycle, target: Lifecycle) -> bool:
    return target in TRANSITIONS[source]


def check_transition(source: Lifecycle, target: Lifecycle) -> Lifecycle:
    """Return ``target`` when the move is legal, else raise :class:`IllegalTransitionError`."""
    if not can_transition(source, target):
        raise IllegalTransitionError(source, target)
    return target
