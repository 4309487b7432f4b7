"""One plan shape for ordering rules: running, resume, waiting (0x09A, 0x0D).

The client-fair, priority and prefix-group policies differ only in the order
they give; this composes the shared passes of :mod:`iterserve.plan.passes`:

1. running requests in the policy's order, each its legal interval; on a KV
   shortfall the shared preemption step takes victims from the tail of that
   order (the least favoured); after any preemption there is no waiting pass;
2. preserved requests resume, oldest suspension first;
3. waiting requests in the order the policy picks them, until one does not
   fit (head-of-line: the pick is not skipped for a smaller one).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from iterserve.plan import PlanBuilder, views_of
from iterserve.plan.builder import iter_views
from iterserve.plan.passes import resume_suspended, running_pass
from iterserve.plan.victims import fcfs_victim
from iterserve.records.state import SchedulerState
from iterserve.records.view import RequestView

Order = Callable[[list[RequestView]], list[RequestView]]


def schedule_ordered(builder: PlanBuilder, state: SchedulerState, running_order: Order,
                     waiting_picks: Callable[[Iterable[RequestView]], Iterable[RequestView]]) -> None:
    """Fill ``builder``: running in ``running_order``, then resumes, then the
    waiting requests ``waiting_picks`` yields (it may react to each admission:
    the next pick is drawn only after the previous one was admitted). It is
    given the ready waiting views lazily, in queue order (a policy that
    keeps its own order of them need not read them)."""

    def rows_of(view: RequestView) -> int:
        return builder.rows_within_tokens(view)

    running = running_order(views_of(state, state.running))
    if running_pass(builder, running, rows_of, fcfs_victim).gone:
        return
    if resume_suspended(builder, state) < len(state.suspended):
        return  # preserved requests go before new work
    ready = (view for view in iter_views(state, state.waiting) if view.is_ready)
    for view in waiting_picks(ready):
        if not builder.can_add() or not builder.admit(view):
            break
