"""A run's state validation without re-reading unchanged views (0x01A).

:func:`~iterserve.records.validate.validate_state` checks, at every
decision, that each queue member has a view in a lifecycle its queue allows
whose committed rows equal its computed rows, and that the queues list every
view exactly once. The first two are facts of the view object alone, and a
view is an immutable tuple: once a view object passed them in a queue, it
passes them in that queue at every later decision. :class:`StateChecker`
remembers, per queue, the view object each id passed with and checks only
the members whose view object is new; membership, counts and duplicates are
checked in full every time. It raises exactly what ``validate_state``
raises (its named-error path is the same function).
"""

from __future__ import annotations

from itertools import compress, count
from operator import is_not

from iterserve.records.state import SchedulerState
from iterserve.records.validate import QUEUE_LIFECYCLES, explain_state, views_pass
from iterserve.records.view import RequestView

_PRUNE_SLACK = 1024  # ids remembered beyond a queue's length before forgetting retired ones


class StateChecker:
    """``check(state)`` raises what ``validate_state(state)`` raises; one
    instance per run (it remembers the view objects that passed)."""

    __slots__ = ("_passed",)

    def __init__(self) -> None:
        # per queue: id -> the view object that passed that queue's checks
        self._passed: list[dict[str, RequestView]] = [{} for _ in QUEUE_LIFECYCLES]

    def check(self, state: SchedulerState) -> None:
        views = state.views
        queues = [getattr(state, name) for name in QUEUE_LIFECYCLES]
        ids = [*queues[0], *queues[1], *queues[2], *queues[3]]
        if len(ids) != len(views) or len(set(ids)) != len(ids):
            explain_state(state)
        for queue, allowed, passed in zip(queues, QUEUE_LIFECYCLES.values(), self._passed,
                                          strict=True):
            members = list(map(views.get, queue))  # None: no view (explained below)
            fresh = list(compress(count(), map(is_not, members, map(passed.get, queue))))
            if not fresh:
                continue
            new = list(map(members.__getitem__, fresh))
            if None in new or not views_pass(new, allowed):  # type: ignore[arg-type]
                explain_state(state)
            if len(passed) > len(queue) + _PRUNE_SLACK:
                passed.clear()  # forget retired ids; the members are re-checked once
                passed.update(zip(queue, members, strict=True))  # type: ignore[arg-type]
            else:
                passed.update(zip(map(queue.__getitem__, fresh), new, strict=True))  # type: ignore[arg-type]
