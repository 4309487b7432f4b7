"""A run's state validation without re-reading unchanged views (0x01A).

:func:`~iterserve.records.validate.validate_state` checks, at every
decision, that each queue member has a view in a lifecycle its queue allows
whose committed rows equal its computed rows, and that the queues list every
view exactly once. The first two are facts of the view object alone, and a
view is an immutable tuple: once a view object passed them in a queue, it
passes them in that queue at every later decision.

:class:`StateChecker` remembers each queue and its view objects as they
passed. Between two decisions a queue mostly keeps one run of its members
in order (the waiting queue loses admissions at its front and gains
arrivals at its back): the checker finds that run with slice compares, and
re-checks only the members outside it and the run's members whose view
object is new. Distinctness is kept the same way: the set of every listed
id loses the ids that left the runs and gains the ones outside them, so a
long waiting queue costs one view lookup per member and no set of its ids.
It raises exactly what ``validate_state`` raises (its named-error path is
the same function).
"""

from __future__ import annotations

from itertools import compress
from operator import is_not

from iterserve.records.state import SchedulerState
from iterserve.records.validate import QUEUE_LIFECYCLES, explain_state, views_pass
from iterserve.records.view import RequestView

_NUM_FRONT_TRIES = 8  # ids entering a queue's front (preempted requests) looked past
_Members = list[RequestView | None]


class StateChecker:
    """``check(state)`` raises what ``validate_state(state)`` raises; one
    instance per run (it remembers the queues and view objects that passed)."""

    __slots__ = ("_queues", "_members", "_ids")

    def __init__(self) -> None:
        self._forget()

    def _forget(self) -> None:
        empty: tuple[str, ...] = ()
        self._queues = [empty for _ in QUEUE_LIFECYCLES]
        self._members: list[_Members] = [[] for _ in QUEUE_LIFECYCLES]
        self._ids: set[str] = set()  # every id the remembered queues list (each once)

    def check(self, state: SchedulerState) -> None:
        views = state.views
        queues = [getattr(state, name) for name in QUEUE_LIFECYCLES]
        ids = self._ids  # updated in place: a refused state forgets it
        added: list[str] = []
        all_members = []
        for queue, allowed, before, passed in zip(
                queues, QUEUE_LIFECYCLES.values(), self._queues, self._members, strict=True):
            members = list(map(views.get, queue))  # None: no view (explained below)
            start, old_start, size = _common_run(queue, before)
            ids.difference_update(before[:old_start], before[old_start + size:])
            added += queue[:start]
            added += queue[start + size:]
            fresh = members[:start] + members[start + size:]
            run, was = members[start:start + size], passed[old_start:old_start + size]
            if run != was:  # a view replaced inside the run: only those are re-read
                fresh += compress(run, map(is_not, run, was))
            if fresh and (None in fresh or not views_pass(fresh, allowed)):  # type: ignore[arg-type]
                self._explain(state)
            all_members.append(members)
        num_listed = sum(map(len, queues))
        ids.update(added)
        if num_listed != len(views) or len(ids) != num_listed:
            self._explain(state)
        self._queues, self._members, self._ids = queues, all_members, ids

    def _explain(self, state: SchedulerState) -> None:
        self._forget()  # a refused state leaves nothing remembered
        explain_state(state)


def _common_run(queue: tuple[str, ...], before: tuple[str, ...]) -> tuple[int, int, int]:
    """``(start, old_start, size)`` with ``queue[start:start + size] ==
    before[old_start:old_start + size]`` running to the end of one of them:
    the members ``queue`` kept in order. ``(0, 0, 0)`` when none is found
    among the first few members (everything is then checked again)."""
    for start in range(min(len(queue), _NUM_FRONT_TRIES)):
        try:
            old_start = before.index(queue[start])
        except ValueError:
            continue  # entered at the front
        size = min(len(queue) - start, len(before) - old_start)
        if queue[start:start + size] == before[old_start:old_start + size]:
            return start, old_start, size
        return 0, 0, 0
    return 0, 0, 0

