"""The running pass walked request by request: the oracle
:func:`iterserve.plan.passes.running_pass` (whose runs of plain decode steps
take :meth:`~iterserve.plan.builder.PlanBuilder.add_decode_rows` in one
loop) is tested against."""

from __future__ import annotations

from collections.abc import Callable

from iterserve.plan.builder import PlanBuilder
from iterserve.plan.passes import RowsOf, RunningPass
from iterserve.plan.victims import VictimChooser, add_or_preempt
from iterserve.records.view import RequestView


def running_pass(builder: PlanBuilder, running: list[RequestView], rows_of: RowsOf,
                 choose_victim: VictimChooser,
                 skip: Callable[[RequestView], bool] | None = None) -> RunningPass:
    queue = builder.not_aborted(running)
    gone: set[str] = set()
    for view in list(queue):
        if view.request_id in gone or (skip is not None and skip(view)):
            continue
        if not builder.can_add():
            break
        if not add_or_preempt(builder, view, rows_of(view), queue, gone, choose_victim):
            break
    return RunningPass(queue, gone)
