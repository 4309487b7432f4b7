"""BatchComposition: per executed iteration, the rows it carried by kind and
a resource sample at its decision, for plots and the run summary.

An engine observer; it changes nothing; or made at a run's end from its
:class:`~iterserve.engine.trace.RunTrace` (:func:`composition_of`), which
counts the same rows at every decision anyway. Per iteration with work it keeps an
:class:`~iterserve.metrics.capacity.IterationComposition` (prefill, decode
and rebuild rows and the number of sequences with work) and a
:class:`~iterserve.metrics.series.ResourceSample` (waiting requests,
suspended ones included, and the suspended count; running requests; KV
blocks used of the total, both 0 when memory is unbounded), each stamped
at the decision: its state's ``now`` times ``seconds_per_clock_unit``.

:class:`~iterserve.engine.events.EventRecorder` keeps one; a simulation's
recorder takes the one made from the run trace instead
(:mod:`iterserve.sim.report`): no second count of every plan's rows, in
the follower process that writes the events or anywhere else.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import add, attrgetter

from iterserve.engine.observer import EngineObserver
from iterserve.engine.trace import IterationRecord
from iterserve.metrics.capacity import IterationComposition
from iterserve.metrics.columns import RecordColumns
from iterserve.metrics.series import ResourceSample
from iterserve.records.columns import field_columns
from iterserve.records.plan import IterationPlan, rows_by_kind
from iterserve.records.result import IterationResult
from iterserve.records.state import SchedulerState, blocks_used_of_total


class BatchComposition(EngineObserver):
    """The per-iteration composition and resource samples of a run."""

    __slots__ = ("seconds_per_clock_unit", "iterations", "samples")

    def __init__(self, seconds_per_clock_unit: float = 1.0) -> None:
        if not seconds_per_clock_unit > 0:
            raise ValueError("seconds_per_clock_unit must be > 0")
        self.seconds_per_clock_unit = seconds_per_clock_unit
        # a record per executed iteration, kept to the report: one array per field
        self.iterations = RecordColumns(IterationComposition, "dqqqq")
        self.samples = RecordColumns(ResourceSample, "dqqqqq")

    def on_step(self, state: SchedulerState, plan: IterationPlan, result: IterationResult,
                successor: SchedulerState) -> None:
        if plan.work:
            self.record(state, plan, state.now * self.seconds_per_clock_unit)

    def record(self, state: SchedulerState, plan: IterationPlan, time_s: float) -> None:
        """The iteration ``plan`` decided on ``state``, stamped ``time_s``."""
        num_prefill, num_decode, num_rebuild = rows_by_kind(plan.work)
        self.iterations.append(IterationComposition(
            time_s, num_prefill, num_decode, num_rebuild,
            num_sequences=len(set(field_columns(plan.work)[0]))))
        used, total = blocks_used_of_total(state.capacity)
        self.samples.append(ResourceSample(
            time_s, len(state.waiting) + len(state.suspended), len(state.running), used, total,
            num_suspended=len(state.suspended)))


_TRACE_FIELDS = attrgetter(
    "start", "num_prefill_rows", "num_decode_rows", "num_rebuild_rows", "num_sequences",
    "num_waiting", "num_running", "num_suspended", "num_kv_blocks_used", "num_kv_blocks_total")


def composition_of(iterations: Sequence[IterationRecord],
                   seconds_per_clock_unit: float) -> BatchComposition:
    """What a :class:`BatchComposition` observing the run would hold, from
    its trace's iteration records (a record per iteration with work, its
    decision's ``now``, rows, sequences, queues and KV use), a field column
    at a time. A valid plan names each request once: its sequences are its
    work items."""
    composition = BatchComposition(seconds_per_clock_unit)
    if not iterations:
        return composition
    (starts, prefill, decode, rebuild, sequences, waiting, running, suspended, used,
     total) = zip(*map(_TRACE_FIELDS, iterations), strict=True)
    times_s = [start * seconds_per_clock_unit for start in starts]
    composition.iterations.extend_columns([times_s, prefill, decode, rebuild, sequences])
    composition.samples.extend_columns(
        [times_s, list(map(add, waiting, suspended)), running, used, total, suspended])
    return composition
