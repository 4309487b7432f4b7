"""A run's state validation without re-reading unchanged views (0x01A).

:func:`~iterserve.records.validate.validate_state` checks, at every
decision, that each queue member has a view in a lifecycle its queue allows
whose committed rows equal its computed rows, and that the queues list every
view exactly once. The first two are facts of the view object alone, and a
view is an immutable tuple: once a view object passed them in a queue, it
passes them in that queue at every later decision.

:class:`StateChecker` remembers the queue of every listed id (the checked
state's) and the views mapping it checked. Per decision it takes the ids
whose view the transitions replaced since then (the state's
:class:`~iterserve.records.view_delta.ViewDelta` links, see
:func:`~iterserve.records.view_delta.changes_since`) and, per queue, the
members outside the run it kept in order (the waiting queue loses
admissions at its front and gains arrivals at its back: found with slice
compares); only those ids are looked up and re-checked, and the remembered
queue of each id is updated for them. The counts then prove the queues
list every view once: the remembered ids were the checked state's views,
the ids that left the views are listed nowhere, every id re-checked has a
view and a queue, and there are as many listed ids as views. Where the
links do not reach back it runs ``validate_state`` and remembers the
state anew. It raises exactly what ``validate_state`` raises (its
named-error path is the same function).
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import chain, repeat

from iterserve.records.id_queue import Queue, queue_changes
from iterserve.records.state import SchedulerState
from iterserve.records.validate import (
    QUEUE_LIFECYCLES,
    explain_state,
    validate_state,
    views_pass,
)
from iterserve.records.view import RequestView
from iterserve.records.view_delta import changes_since
from iterserve.records.view_map import views_or_none

_NUM_FRONT_TRIES = 8  # ids entering a queue's front (preempted requests) looked past
_NUM_NEARBY = 64  # members of the remembered queue searched before all of it
_ALLOWED = tuple(QUEUE_LIFECYCLES.values())  # by queue number


class StateChecker:
    """``check(state)`` raises what ``validate_state(state)`` raises; one
    instance per run (it remembers the state that passed last)."""

    __slots__ = ("_views", "_queues", "_where")

    def __init__(self) -> None:
        self._forget()

    def _forget(self) -> None:
        self._views: Mapping[str, RequestView] | None = None  # the mapping checked last
        empty: tuple[str, ...] = ()
        self._queues = [empty for _ in QUEUE_LIFECYCLES]
        self._where: dict[str, int] = {}  # every listed id: its queue's number

    def check(self, state: SchedulerState) -> None:
        views = state.views
        found = changes_since(self._views, views, state.view_delta)
        queues = [getattr(state, name) for name in QUEUE_LIFECYCLES]
        if found is None:
            self._check_anew(state, queues)
            return
        ids, gone = found
        where = self._where  # updated in place: a refused state forgets it
        edits = list(map(_queue_edits, queues, self._queues))
        for left, _ in edits:
            for _ in map(where.pop, left, repeat(None)):
                pass  # left the queue
        entered: list[str] = []
        num_known = len(where)
        for number, (_, new) in enumerate(edits):
            where.update(zip(new, repeat(number)))
            entered += new
        to_check = list(dict.fromkeys(chain(ids, entered))) if entered else ids
        numbers = list(map(where.get, to_check))
        members = views_or_none(views, to_check)
        num_listed = sum(map(len, queues))
        if (len(where) != num_known + len(entered)  # an entering id was listed already
                or None in numbers or None in members
                or not views_pass(members,  # type: ignore[arg-type]
                                  map(_ALLOWED.__getitem__, numbers))  # type: ignore[arg-type]
                or any(map(where.__contains__, gone))
                or num_listed != len(views) or len(where) != num_listed):
            self._explain(state)
        self._views, self._queues = views, queues

    def _check_anew(self, state: SchedulerState, queues: list[tuple[str, ...]]) -> None:
        self._forget()
        validate_state(state)
        self._where = {rid: number for number, queue in enumerate(queues) for rid in queue}
        self._views, self._queues = state.views, queues

    def _explain(self, state: SchedulerState) -> None:
        self._forget()  # a refused state leaves nothing remembered
        explain_state(state)


def _queue_edits(queue: Queue, before: Queue) -> tuple[list[str], list[str]]:
    """The ids that left ``before`` and those that entered ``queue`` (each
    entered id is checked again): a shared queue says so itself
    (:func:`~iterserve.records.id_queue.queue_changes`); otherwise what is
    outside the run of ids ``queue`` kept in order (:func:`_common_run`)."""
    if queue is before:
        return [], []
    changes = queue_changes(before, queue)
    if changes is not None:
        left, front, back = changes
        return left, [*front, *back]
    queue, before = tuple(queue), tuple(before)
    start, old_start, size = _common_run(queue, before)
    return ([*before[:old_start], *before[old_start + size:]],
            [*queue[:start], *queue[start + size:]])


def _common_run(queue: tuple[str, ...], before: tuple[str, ...]) -> tuple[int, int, int]:
    """``(start, old_start, size)`` with ``queue[start:start + size] ==
    before[old_start:old_start + size]`` running to the end of one of them:
    the members ``queue`` kept in order. ``(0, 0, 0)`` when none is found
    among the first few members (everything is then checked again). Each
    is looked for near the front of ``before`` first (admissions leave
    there): a long search for an id that entered compares every string."""
    num_tries = min(len(queue), _NUM_FRONT_TRIES)
    for end in (_NUM_NEARBY, len(before)):
        for start in range(num_tries):
            try:
                old_start = before.index(queue[start], 0, end)
            except ValueError:
                continue  # entered at the front
            size = min(len(queue) - start, len(before) - old_start)
            if queue[start:start + size] == before[old_start:old_start + size]:
                return start, old_start, size
            return 0, 0, 0
    return 0, 0, 0

