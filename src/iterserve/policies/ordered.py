"""One plan shape for ordering rules: running, resume, waiting (0x09A, 0x0D).

The client-fair and priority policies differ only in the order they give;
this module composes the shared mechanism of :mod:`iterserve.policies.base`
(legal intervals, ledgers, the preemption step) in one place:

1. running requests in the policy's order, each its legal interval; on a KV
   shortfall the shared preemption step takes victims from the tail of that
   order (the least favoured); after any preemption there is no waiting pass;
2. preserved requests resume, oldest suspension first;
3. waiting requests in the order the policy picks them, until one does not
   fit (head-of-line: the pick is not skipped for a smaller one).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from iterserve.policies.base import (
    PlanBuilder,
    add_or_preempt,
    fcfs_victim,
    resume_suspended,
    views_of,
)
from iterserve.records.state import SchedulerState
from iterserve.records.view import Lifecycle, RequestView

Order = Callable[[list[RequestView]], list[RequestView]]


def schedule_ordered(builder: PlanBuilder, state: SchedulerState, running_order: Order,
                     waiting_picks: Callable[[list[RequestView]], Iterable[RequestView]]) -> None:
    """Fill ``builder``: running in ``running_order``, then resumes, then the
    waiting requests ``waiting_picks`` yields (it may react to each admission:
    the next pick is drawn only after the previous one was admitted)."""
    if running_pass(builder, running_order(views_of(state, state.running))):
        return
    if resume_suspended(builder, state) < len(state.suspended):
        return  # preserved requests go before new work
    ready = [view for view in views_of(state, state.waiting) if view.is_ready]
    for view in waiting_picks(ready):
        if not builder.can_add() or not builder.admit(view):
            break


def running_pass(builder: PlanBuilder, running: list[RequestView]) -> bool:
    """Schedule running requests in order; True when any was preempted."""
    queue = list(running)
    gone: set[str] = set()
    for view in running:
        if view.request_id in gone:
            continue
        rows = min(builder.legal_rows(view), builder.tokens_left)
        if rows <= 0 or builder.seqs_left == 0:
            break
        if not add_or_preempt(builder, view, rows, queue, gone, fcfs_victim):
            break
    return bool(gone)


def schedule_ranked(builder: PlanBuilder, ranked: list[RequestView]) -> None:
    """Legal intervals in rank order over every live request: waiting ones
    are admitted and suspended ones resumed when they fit (else skipped);
    running ones preempt the lowest-ranked running requests on a KV
    shortfall, and the pass stops when one preempts itself."""
    victims = [view for view in ranked if view.lifecycle is Lifecycle.RUNNING]
    gone: set[str] = set()
    for view in ranked:
        if not builder.can_add():
            break
        if view.request_id in gone:
            continue
        if view.lifecycle is Lifecycle.WAITING:
            builder.admit(view)
        elif view.lifecycle is not Lifecycle.RUNNING:
            builder.resume(view)
        else:
            rows = min(builder.legal_rows(view), builder.tokens_left)
            if not add_or_preempt(builder, view, rows, victims, gone, fcfs_victim):
                break
