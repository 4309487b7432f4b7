"""The preemption lifecycle (0x0C) is the records layer's one lifecycle.

::

    RUNNING -> PREEMPT_PENDING -> SUSPENDED_PRESERVED | SUSPENDED_RECOMPUTE
    SUSPENDED_* -> RESUME_PENDING -> RUNNING
    any non-terminal -> CANCELLED

PREEMPT_PENDING is not free capacity (only a matching READY release result
is), and RESUME_PENDING is not runnable work (it waits for the readiness
conjunction). This module re-exports the single table in
:mod:`iterserve.records.view` so the admission records and the scheduler can
never disagree about a transition.
"""

from __future__ import annotations

from iterserve.records.view import TRANSITIONS, Lifecycle, check_transition
from iterserve.records.view import IllegalTransition as IllegalTransitionError

SUSPENDED: frozenset[Lifecycle] = frozenset(
    {Lifecycle.SUSPENDED_PRESERVED, Lifecycle.SUSPENDED_RECOMPUTE}
)


def can_transition(source: Lifecycle, target: Lifecycle) -> bool:
    return target in TRANSITIONS[source]


__all__ = ["SUSPENDED", "TRANSITIONS", "IllegalTransitionError", "Lifecycle", "can_transition",
           "check_transition"]
