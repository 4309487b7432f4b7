"""Victim choice and the preemption step (0x0C, 0x0D).

A victim chooser picks one request from the running candidates (the queue
in its policy's order); :func:`add_or_preempt` preempts victims, in the
run's preemption mode, until a running request's rows fit the KV ledger.
Each preempt intent carries a :class:`~iterserve.records.victim.VictimScore`:
the chooser, its score inputs and tie-break as fields, so the decision log
shows why this victim.
"""

from __future__ import annotations

from collections.abc import Callable

from iterserve.plan.builder import PlanBuilder
from iterserve.records.plan import IntentKind
from iterserve.records.preemption import PreemptionCause
from iterserve.records.victim import VictimScore
from iterserve.records.view import RequestView

VictimChooser = Callable[[list[RequestView]], RequestView]


def fcfs_victim(candidates: list[RequestView]) -> RequestView:
    """vLLM FCFS: the tail of the running queue (0x0D)."""
    return candidates[-1]


def priority_victim(candidates: list[RequestView]) -> RequestView:
    """vLLM PRIORITY: max of (priority, arrival): least favoured, later
    arrival breaking ties (lower priority value = more urgent, 0x0D)."""
    return max(candidates, key=lambda v: (v.priority, v.arrival, v.arrival_order))


def _least_urgent(candidates: list[RequestView]) -> RequestView:
    """Deadline policies: the tail of the candidates in urgency order (the
    decision log names this chooser ``_least_urgent``)."""
    return fcfs_victim(candidates)


least_urgent_victim: VictimChooser = _least_urgent


def add_or_preempt(builder: PlanBuilder, view: RequestView, num_rows: int,
                   queue: list[RequestView], gone: set[str],
                   choose_victim: VictimChooser, kind: IntentKind | None = None) -> bool:
    """Schedule ``num_rows`` of a running request, preempting victims from
    ``queue`` (victims leave it and join ``gone``) on a KV shortfall.

    Victims are preempted until the free blocks and the blocks their
    releases free cover the request's need. A memory owner that releases at
    once frees them for this plan (vLLM's synchronous free, 0x0D); with any
    other, PREEMPT_PENDING is not free capacity (0x0C): the request waits
    for the READY releases (it keeps its place and the blocks are held for
    it) and runs in a later plan. A request short of blocks that releases
    already in flight cover waits instead, with no victim (0x06
    TEMPORARILY_UNAVAILABLE), for at most the run's bound of consecutive
    decisions (``kv.extension_wait_max_iterations``); at the bound it is
    FAILED: the preemption step runs, each victim record naming the cause
    ``extension_wait_bound`` and the waits. ``kind`` overrides the
    run's preemption mode (default: the workload's). Returns False when
    ``view`` itself was chosen as the victim: the running pass must stop
    (vLLM v0.23.0 ``can_schedule = False``, 0x0D).
    """
    if builder.add_if_fits(view, num_rows):  # the common case: no victim needed
        return True
    name = getattr(choose_victim, "__name__", "policy")
    cause = PreemptionCause.KV_EXHAUSTED
    waited: int | None = None  # the waits, when the bound made the shortfall FAILED
    if builder.waits_for_release(view, num_rows):  # blocks in flight cover it (0x06)
        num_waits = builder.num_release_waits(view)
        if num_waits < builder.max_release_waits:  # TEMPORARILY_UNAVAILABLE: wait
            builder.wait_on_release(view)
            return True
        # waited the run's bound: FAILED, the preemption step below, saying why
        cause, waited = PreemptionCause.EXTENSION_WAIT_BOUND, num_waits
    while not builder.fits_after_release(view, num_rows):
        victim = choose_victim(queue)
        score = VictimScore(name, queue.index(victim), len(queue), victim.priority,
                            victim.arrival, victim.num_computed, cause, release_waits=waited)
        queue.remove(victim)
        gone.add(victim.request_id)
        builder.preempt(victim, kind, victim=score)
        if victim.request_id == view.request_id:
            return False
    if builder.fits_memory(view, num_rows):  # the shortfall was a budget, not memory
        builder.add(view, num_rows)
    else:
        builder.wait_for_release(view, num_rows)
    return True
