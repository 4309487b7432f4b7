"""Plan and result validation stated row by row: the oracle the product's
column passes (:mod:`iterserve.records.validate_batch`, whose refusals
:mod:`iterserve.records.validate` names) are tested against. Only the work
and completion rules are written out here; the other checks (intents,
ledger, KV, tie-break, failures, receipts) are the product's own, through
:func:`~iterserve.records.validate.check_plan` and
:func:`~iterserve.records.validate.check_result`."""

from __future__ import annotations

from collections import Counter

from iterserve.records import errors as E
from iterserve.records import validate as V
from iterserve.records.frontier import check_output_clock, completion_service, interval_kind
from iterserve.records.plan import IterationPlan
from iterserve.records.result import IterationResult
from iterserve.records.spec import OnlineWorkload
from iterserve.records.state import SchedulerState
from iterserve.records.validate_batch import WorkColumns, work_columns
from iterserve.records.view import Lifecycle


def validate_plan(workload: OnlineWorkload, state: SchedulerState, plan: IterationPlan) -> None:
    V.check_plan(workload, state, plan, _work_rows)


def validate_result(plan: IterationPlan, state: SchedulerState, result: IterationResult) -> None:
    V.check_result(plan, state, result, _completion_service)


def _work_rows(state: SchedulerState, plan: IterationPlan, admitted: set[str],
               leaving: set[str]) -> WorkColumns:
    _validate_work(state, plan, admitted, leaving)
    return work_columns(plan.work, state.views)


def _validate_work(
    state: SchedulerState, plan: IterationPlan, admitted: set[str], leaving: set[str]
) -> int:
    """Each item binds a current, ready, admitted view and its only legal
    interval: a cheap check of every rule per item, and on any doubt the
    product's detailed checks raise the named error."""
    seen: set[str] = set()
    views = state.views
    running = Lifecycle.RUNNING
    num_tokens = 0
    for work in plan.work:
        # one unpack of the 8-field item is cheaper than 7 NamedTuple attribute reads
        rid, generation, snapshot, start, end, kind, positions, _ = work
        view = views.get(rid)
        if not (
            view is not None
            and view.generation == generation
            and view.snapshot_version == snapshot
            and view.is_ready
            and rid not in seen
            and rid not in leaving
            and (view.lifecycle is running or rid in admitted)
            and positions == range(start, end)
            and interval_kind(view.num_prompt_tokens, view.num_emitted, view.num_computed,
                              start, end) is kind
        ):
            V._explain_work(state, work, seen, admitted, leaving)
            raise E.ContractViolation(f"{rid}: refused by no named rule")
        seen.add(rid)
        num_tokens += end - start
    return num_tokens


def _completion_service(plan: IterationPlan, state: SchedulerState,
                        result: IterationResult) -> Counter[str]:
    """Each completion answers open planned work of its generation inside
    the planned interval and keeps the output clock; returns the service
    rows per client."""
    planned = V._planned(plan)
    service: Counter[str] = Counter()
    done: set[str] = set()
    views = state.views
    for item in result.completed:
        rid, generation, start, end, emitted, _, finish_reason = item  # one unpack (hot path)
        work = planned.get(rid)
        if work is None:
            raise E.UnplannedCompletion(f"{rid} completed without planned work")
        if generation != work.generation:
            raise E.StaleGeneration(f"{rid}: completion for generation {generation}")
        if rid in done:
            raise E.DuplicateCompletion(f"{rid} completed twice")
        done.add(rid)
        planned_start, kind = work.start, work.kind
        if start != planned_start or not planned_start < end <= work.end:
            raise E.CompletionBeyondPlan(
                f"{rid}: completed [{start},{end}) outside planned [{planned_start},{work.end})"
            )
        view = views[rid]
        has_finish = finish_reason is not None
        rows = completion_service(view.num_prompt_tokens, view.num_emitted,
                                  view.max_output_tokens, kind, start, end, emitted, has_finish)
        if rows is None:
            check_output_clock(rid, view.num_prompt_tokens, view.num_emitted,
                               view.max_output_tokens, kind, end, emitted, has_finish)
        elif rows:
            service[view.client_id] += rows
    return service
