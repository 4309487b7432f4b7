"""Mechanical validation of states, plans and results (0x01A).

``validate_plan`` runs before any execution; ``validate_result`` before any
publication. Each raises the one named error of the first invariant broken.
These checks are the hot path's only safety net, so they stay O(work): a
plan's work and a result's completions are first accepted as a whole by the
column passes of :mod:`iterserve.records.validate_batch`, and only what
those leave in doubt goes through the row-by-row checks here, which name the
error (tests/core/test_validate_batch.py pins that the two agree).
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from itertools import islice, repeat
from typing import NoReturn

from iterserve.records import errors as E
from iterserve.records.dependencies import check_dependencies
from iterserve.records.frontier import (
    check_interval,
    check_output_clock,
    completion_service,
)
from iterserve.records.keys import KEY_FIELDS, keys_function
from iterserve.records.kv_abi import blocks_opened_total
from iterserve.records.plan import (
    IntentKind,
    IterationPlan,
    WorkItem,
    work_request_id,
)
from iterserve.records.prefix_claims import reclaimed_blocks_of
from iterserve.records.receipts import binding_of
from iterserve.records.release_waits import check_release_waits
from iterserve.records.reservation import check_reservations
from iterserve.records.result import IterationResult
from iterserve.records.spec import OnlineWorkload
from iterserve.records.state import SchedulerState
from iterserve.records.validate_batch import (
    WorkColumns,
    accepted_service,
    accepted_work,
)
from iterserve.records.view import Lifecycle, RequestView

QUEUE_LIFECYCLES = {
    "waiting": frozenset({Lifecycle.WAITING}),
    "running": frozenset({Lifecycle.RUNNING, Lifecycle.PREEMPT_PENDING, Lifecycle.RESUME_PENDING}),
    "suspended": frozenset({Lifecycle.SUSPENDED_PRESERVED, Lifecycle.SUSPENDED_RECOMPUTE,
                            Lifecycle.PREEMPT_PENDING}),  # preservation in flight (0x0C)
    "finished": frozenset(
        {Lifecycle.FINISHED, Lifecycle.CANCELLED, Lifecycle.REJECTED, Lifecycle.ABORTED}
    ),
}


def validate_state(state: SchedulerState) -> None:
    """Every queue member is known, listed once, in a matching lifecycle.

    Every decision checks every live request, so the check runs at C speed
    (``map`` over the queues); on any doubt :func:`explain_state` raises
    the named error."""
    views = state.views
    queues = [getattr(state, name) for name in QUEUE_LIFECYCLES]
    ids = [*queues[0], *queues[1], *queues[2], *queues[3]]
    if len(ids) != len(views) or len(set(ids)) != len(ids) or not all(
        _queue_ok(views, queue, allowed)
        for queue, allowed in zip(queues, QUEUE_LIFECYCLES.values(), strict=True)
    ):
        explain_state(state)


_LIFECYCLE = operator.attrgetter("lifecycle")
_COMMITTED = operator.attrgetter("num_committed")
_COMPUTED = operator.attrgetter("num_computed")
_ID = operator.attrgetter("request_id")


def _queue_ok(views: Mapping[str, RequestView], queue: tuple[str, ...],
              allowed: frozenset[Lifecycle]) -> bool:
    """Each member has a view in an ``allowed`` lifecycle whose committed
    rows equal its computed rows."""
    if not queue:
        return True
    try:
        members = list(map(views.__getitem__, queue))
    except KeyError:
        return False
    return views_pass(members, repeat(allowed))


def views_pass(members: list[RequestView], allowed: Iterable[frozenset[Lifecycle]]) -> bool:
    """Each view is in a lifecycle its queue allows (``allowed``: each
    member's queue's set) and its committed rows equal its computed rows:
    facts of the view alone, checked at C speed. The one statement of the
    per-view state rule (the run's incremental checker asks it of the views
    that changed)."""
    return (all(map(frozenset.__contains__, allowed, map(_LIFECYCLE, members)))
            and all(map(operator.eq, map(_COMMITTED, members), map(_COMPUTED, members))))


def explain_state(state: SchedulerState) -> NoReturn:
    """Raise the named error for a state the fast check refused."""
    seen: set[str] = set()
    for queue_name, allowed in QUEUE_LIFECYCLES.items():
        for request_id in getattr(state, queue_name):
            if request_id in seen:
                raise E.DuplicateQueueMember(f"{request_id} appears in more than one queue slot")
            seen.add(request_id)
            view = state.views.get(request_id)
            if view is None:
                raise E.UnknownRequest(f"{request_id} is queued but has no view")
            if view.lifecycle not in allowed:
                raise E.QueueLifecycleMismatch(
                    f"{request_id} is in {queue_name} with lifecycle {view.lifecycle.value}"
                )
            if view.num_committed != view.num_computed:
                raise E.UncommittedFrontier(f"{request_id}: committed != computed at the cut")
    if len(seen) != len(state.views):
        raise E.UnknownRequest("a view belongs to no queue")
    raise E.ContractViolation("state refused")  # unreachable: the fast check is exact


#: a plan's work rule: the work's columns when legal, else the named error raised
WorkRule = Callable[[SchedulerState, IterationPlan, set[str], set[str]], WorkColumns]
#: a result's completion rule: the service rows per client when legal, else the named error
CompletionRule = Callable[[IterationPlan, SchedulerState, IterationResult], Counter[str]]


def validate_plan(workload: OnlineWorkload, state: SchedulerState, plan: IterationPlan) -> None:
    """Reject any plan that is not legal work against ``state`` (0x01A)."""
    check_plan(workload, state, plan, _accepted_work)


def check_plan(workload: OnlineWorkload, state: SchedulerState, plan: IterationPlan,
               work_rule: WorkRule) -> None:
    """:func:`validate_plan` with ``work_rule`` for the work items (the
    tests' row-by-row oracle takes this seam)."""
    if plan.input_state_version != state.state_version or plan.decision_id != state.decision_id:
        raise E.StaleStateVersion(
            f"plan for v{plan.input_state_version}/d{plan.decision_id}, "
            f"state is v{state.state_version}/d{state.decision_id}"
        )
    identity = workload.policy
    if identity is not None and (
        plan.policy_id != identity.policy_id or plan.policy_version != identity.policy_version
    ):
        raise E.PolicyIdentityMismatch(
            f"plan by {plan.policy_id}@{plan.policy_version}, run bound to "
            f"{identity.policy_id}@{identity.policy_version}"
        )
    admitted, leaving = _validate_intents(state, plan)
    columns = work_rule(state, plan, admitted, leaving)
    _validate_ledger(state, plan, sum(columns.widths))
    _validate_kv(state, plan, columns)
    if plan.release_waits:  # 0x06: waits on a release in flight, within the run's bound
        named = {intent.request_id for intent in plan.intents}
        named.update(map(_ID, columns.views))
        check_release_waits(state.views, state.release_waits,
                            state.capacity.num_blocks_pending_release,
                            state.rules.extension_wait_max_iterations, plan.release_waits, named)
    _validate_tie_break(state, plan, columns)
    if plan.reservations:  # ORCA's n_rsrv intents (0x03)
        check_reservations(state.views, state.running, _admissions(plan), plan.reservations)
    if plan.dependencies:  # the readiness facts selected rows bind (0x01A)
        check_dependencies(state.views, {item.request_id for item in plan.work},
                           plan.dependencies)


def _admissions(plan: IterationPlan) -> list[tuple[str, int]]:
    return [(i.request_id, i.generation) for i in plan.intents if i.kind is IntentKind.ADMIT]


def _validate_intents(state: SchedulerState, plan: IterationPlan) -> tuple[set[str], set[str]]:
    """Intents name current generations in lifecycles they may leave.

    Returns the ids the plan admits or resumes, and the ids it removes from
    service (preempted, rejected, aborted), which may hold no work.
    """
    admitted: set[str] = set()
    leaving: set[str] = set()
    touched: set[str] = set()
    for intent in plan.intents:
        view = _resolve(state, intent.request_id, intent.generation)
        if intent.request_id in touched:
            raise E.IllegalIntent(f"{intent.request_id} has more than one queue intent")
        touched.add(intent.request_id)
        source = _INTENT_SOURCES[intent.kind]
        if view.lifecycle not in source:
            raise E.IllegalIntent(
                f"{intent.kind.value} of {intent.request_id} in lifecycle {view.lifecycle.value}"
            )
        if intent.kind in (IntentKind.ADMIT, IntentKind.RESUME):
            admitted.add(intent.request_id)
        elif intent.kind is not IntentKind.GUARD:
            leaving.add(intent.request_id)
    return admitted, leaving


_INTENT_SOURCES = {
    IntentKind.ADMIT: frozenset({Lifecycle.WAITING}),
    IntentKind.RESUME: frozenset({Lifecycle.SUSPENDED_PRESERVED, Lifecycle.SUSPENDED_RECOMPUTE}),
    IntentKind.PREEMPT_RECOMPUTE: frozenset({Lifecycle.RUNNING}),
    IntentKind.PREEMPT_PRESERVE_EXACT: frozenset({Lifecycle.RUNNING}),
    IntentKind.REJECT: frozenset({Lifecycle.WAITING}),
    IntentKind.GUARD: frozenset({Lifecycle.RUNNING}),
    IntentKind.ABORT: frozenset(
        {Lifecycle.WAITING, Lifecycle.RUNNING, Lifecycle.SUSPENDED_PRESERVED,
         Lifecycle.SUSPENDED_RECOMPUTE, Lifecycle.PREEMPT_PENDING}
    ),
}


def _resolve(state: SchedulerState, request_id: str, generation: int) -> RequestView:
    view = state.views.get(request_id)
    if view is None:
        raise E.UnknownRequest(f"{request_id} is not in the state")
    if generation != view.generation:
        raise E.StaleGeneration(f"{request_id}: generation {generation}, state has {view.generation}")
    if view.lifecycle.is_terminal:
        raise E.TerminalRequest(f"{request_id}:{generation} is {view.lifecycle.value}")
    return view


def _accepted_work(state: SchedulerState, plan: IterationPlan, admitted: set[str],
                   leaving: set[str]) -> WorkColumns:
    """The work's columns, every item checked at once; the named error of the
    first broken rule when the batch pass refuses."""
    columns = accepted_work(plan.work, state.views, admitted, leaving)
    if columns is None:
        _name_refused_work(state, plan, admitted, leaving)
    return columns


def _name_refused_work(state: SchedulerState, plan: IterationPlan, admitted: set[str],
                       leaving: set[str]) -> NoReturn:
    """Raise the named error of the first item, in plan order, that breaks a
    rule of the work the batch pass (:func:`accepted_work`) refused."""
    seen: set[str] = set()
    for work in plan.work:
        _explain_work(state, work, seen, admitted, leaving)
        seen.add(work.request_id)
    raise E.ContractViolation("work refused by the batch pass with no broken rule")


def _explain_work(state: SchedulerState, work: WorkItem, seen: set[str], admitted: set[str],
                  leaving: set[str]) -> None:
    """Raise the named error of the first rule ``work`` breaks."""
    view = _resolve(state, work.request_id, work.generation)
    if work.request_id in seen:
        raise E.DuplicateWork(f"{work.request_id} has more than one interval")
    if work.snapshot_version != view.snapshot_version:
        raise E.StaleSnapshot(
            f"{work.request_id}: snapshot {work.snapshot_version}, state has {view.snapshot_version}"
        )
    if not view.is_ready:
        raise E.NotReady(f"{work.request_id}: a readiness fact is not READY")
    if view.lifecycle is not Lifecycle.RUNNING and work.request_id not in admitted:
        raise E.NotAdmitted(f"{work.request_id} is {view.lifecycle.value} and not admitted")
    if work.request_id in leaving:
        raise E.IllegalIntent(f"{work.request_id} has work and leaves service in one plan")
    _validate_interval(view, work)


def _validate_interval(view: RequestView, work: WorkItem) -> None:
    check_interval(work.request_id, view.num_prompt_tokens, view.num_emitted, view.num_computed,
                   work.start, work.end, work.kind)
    if work.positions != range(work.start, work.end):
        raise E.ForgedPositions(f"{work.request_id}: positions != range({work.start},{work.end})")


def _validate_ledger(state: SchedulerState, plan: IterationPlan, tokens: int) -> None:
    """``tokens``: the work's token rows."""
    if tokens != plan.tokens_used or len(plan.work) != plan.sequences_used:
        raise E.LedgerDrift(
            f"ledger says {plan.tokens_used} tokens/{plan.sequences_used} seqs, "
            f"work has {tokens}/{len(plan.work)}"
        )
    if tokens > state.max_num_batched_tokens:
        raise E.TokenBudgetExceeded(f"{tokens} token rows > budget {state.max_num_batched_tokens}")
    if len(plan.work) > state.max_num_seqs:
        raise E.SequenceBudgetExceeded(
            f"{len(plan.work)} sequences > budget {state.max_num_seqs}"
        )


def _validate_kv(state: SchedulerState, plan: IterationPlan, columns: WorkColumns) -> None:
    """New blocks fit in the published free blocks, plus the blocks the
    plan's own preemptions and aborts release only when the memory owner
    publishes that it releases at once (before it backs the plan's work,
    0x0D). Otherwise PREEMPT_PENDING is not free capacity (0x0C): only a
    matching READY release publishes it, in a later state's capacity fact.

    Logical feasibility only: the allocator still publishes the physical
    result (reservation is not allocation, 0x00D).
    """
    facts = state.capacity
    if facts.num_blocks_free is None:
        return
    views = state.views
    freed = resumed = 0
    for intent in plan.intents:
        held = facts.blocks_for(views[intent.request_id].num_computed)
        if intent.kind in _RELEASING:
            freed += held
        elif intent.kind is IntentKind.RESUME:
            resumed += held  # swapped-in rows need device blocks again
    if not facts.releases_at_once:
        freed = 0
    needed = resumed + blocks_opened_total(columns.starts, columns.ends, columns.widths,
                                           facts.block_size)
    needed += reclaimed_blocks_of(state.reclaimed_prefix_blocks, map(_ID, columns.views))
    if needed > facts.num_blocks_free + freed:
        raise E.KvCapacityExceeded(
            f"plan needs {needed} new KV blocks, {facts.num_blocks_free} free + {freed} released"
            + ("" if facts.releases_at_once else
               " (its own preemptions free blocks only after their READY release)")
        )


_RELEASING = frozenset({IntentKind.PREEMPT_RECOMPUTE, IntentKind.PREEMPT_PRESERVE_EXACT, IntentKind.ABORT})


def _validate_tie_break(state: SchedulerState, plan: IterationPlan,
                        columns: WorkColumns) -> None:
    """Recorded keys must recompute from the state and be in order. Every
    key is derived once, at C speed; on any doubt
    :func:`_explain_tie_break` raises the named error of the first item."""
    names = plan.tie_break_key
    unknown = [name for name in names if name not in KEY_FIELDS]
    if unknown:
        raise E.ForgedTieBreak(f"unknown tie-break field(s) {unknown}")
    if not plan.work:
        return
    derived = keys_function(names, state)(columns.views)
    if derived != list(columns.tie_breaks) or any(
            map(operator.lt, islice(derived, 1, None), derived)):
        _explain_tie_break(plan, derived)


def _explain_tie_break(plan: IterationPlan, derived: list[tuple[object, ...]]) -> NoReturn:
    """Raise the named error for the first item whose recorded key differs
    from ``derived`` or breaks the order."""
    previous: tuple[object, ...] | None = None
    for work, key in zip(plan.work, derived, strict=True):
        if key != work.tie_break:
            raise E.ForgedTieBreak(f"{work.request_id}: recorded {work.tie_break}, derived {key}")
        if previous is not None and key < previous:
            raise E.ForgedTieBreak(f"{work.request_id}: work is out of tie-break order")
        previous = key
    raise E.ContractViolation("tie-break refused")  # unreachable: the fast check is exact


def validate_result(plan: IterationPlan, state: SchedulerState, result: IterationResult) -> None:
    """Reject results that do not answer exactly this plan (0x01A)."""
    check_result(plan, state, result, _accepted_service)


def check_result(plan: IterationPlan, state: SchedulerState, result: IterationResult,
                 completion_rule: CompletionRule) -> None:
    """:func:`validate_result` with ``completion_rule`` for the completions."""
    if (
        result.decision_id != plan.decision_id
        or result.input_state_version != plan.input_state_version
        or plan.input_state_version != state.state_version
    ):
        raise E.StaleResult(
            f"result for v{result.input_state_version}/d{result.decision_id}, "
            f"plan is v{plan.input_state_version}/d{plan.decision_id}"
        )
    service = completion_rule(plan, state, result)
    if result.failures:
        _validate_failures(plan, result)
    claimed = {client: rows for client, rows in result.service.items() if rows}
    if claimed != dict(service):
        raise E.ServiceDebitMismatch(f"result debits {claimed}, completed rows give "
                                     f"{_in_completion_order(service, result, state)}")
    if result.receipts:
        _validate_receipts(plan, state, result)
    if result.releases:
        _validate_releases(plan, state, result)


def _accepted_service(plan: IterationPlan, state: SchedulerState,
                      result: IterationResult) -> Counter[str]:
    """Service rows per client, every completion checked at once; the named
    error of the first broken rule when the batch pass refuses."""
    service = accepted_service(plan.work, result.completed, state.views)
    if service is None:
        _name_refused_completions(plan, state, result)
    return service


def _name_refused_completions(plan: IterationPlan, state: SchedulerState,
                              result: IterationResult) -> NoReturn:
    """Raise the named error of the first completion, in result order, that
    breaks a rule (it answers open planned work of its generation inside
    the planned interval and keeps the output clock) of the completions the
    batch pass (:func:`accepted_service`) refused."""
    planned = _planned(plan)
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
        if completion_service(view.num_prompt_tokens, view.num_emitted, view.max_output_tokens,
                              kind, start, end, emitted, has_finish) is None:
            check_output_clock(rid, view.num_prompt_tokens, view.num_emitted,
                               view.max_output_tokens, kind, end, emitted, has_finish)
    raise E.ContractViolation("completions refused by the batch pass with no broken rule")


def _in_completion_order(service: Counter[str], result: IterationResult,
                         state: SchedulerState) -> dict[str, int]:
    """``service`` with its clients in the order their first completion comes."""
    views = state.views
    order = dict.fromkeys(views[item.request_id].client_id for item in result.completed)
    return {client: service[client] for client in order if service[client]}


def _planned(plan: IterationPlan) -> dict[str, WorkItem]:
    """Each request's planned item (the last one, should an id repeat)."""
    return dict(zip(map(work_request_id, plan.work), plan.work, strict=True))  # at C speed


def _validate_failures(plan: IterationPlan, result: IterationResult) -> None:
    """A failure answers open planned work or an intent of this plan, in its
    generation, for a request that did not also complete (the completions
    are valid by now)."""
    planned = _planned(plan)
    done = {item.request_id for item in result.completed}
    intents = {intent.request_id: intent.generation for intent in plan.intents}
    for failure in result.failures:
        rid = failure.request_id
        work = planned.get(rid)
        expected = work.generation if work is not None else intents.get(rid)
        if expected is None or rid in done:
            raise E.UnplannedCompletion(f"{rid}: failure for no open planned work")
        if failure.generation != expected:
            raise E.StaleGeneration(f"{rid}: failure for generation {failure.generation}")


def _validate_receipts(plan: IterationPlan, state: SchedulerState,
                       result: IterationResult) -> None:
    """A preservation receipt answers a preserve intent of this plan or a
    request whose preservation is in flight (PREEMPT_PENDING), once (0x0C)."""
    preserving = {i.request_id for i in plan.intents
                  if i.kind is IntentKind.PREEMPT_PRESERVE_EXACT}
    seen: set[str] = set()
    for receipt in result.receipts:
        rid = receipt.binding.request_id
        view = state.views.get(rid)
        pending = view is not None and view.lifecycle is Lifecycle.PREEMPT_PENDING
        if rid in seen or not (rid in preserving or pending):
            raise E.UnplannedCompletion(f"{rid}: preservation receipt for no open preservation")
        seen.add(rid)


_RELEASING_KINDS = frozenset({IntentKind.PREEMPT_RECOMPUTE, IntentKind.ABORT, IntentKind.REJECT})
_PREEMPTING_KINDS = frozenset({IntentKind.PREEMPT_RECOMPUTE, IntentKind.PREEMPT_PRESERVE_EXACT})


def _validate_releases(plan: IterationPlan, state: SchedulerState,
                       result: IterationResult) -> None:
    """A release receipt answers, once, an intent of this plan that releases
    device blocks (a recompute, an abort, a reject, a preservation: swapped
    out or failed) or a request whose release is pending (PREEMPT_PENDING), and is
    bound to exactly the binding that intent opened (a preemption opens the
    next suspension epoch, 0x0C)."""
    expected = {}
    for intent in plan.intents:
        kind = intent.kind
        if kind in _RELEASING_KINDS or kind is IntentKind.PREEMPT_PRESERVE_EXACT:
            view = state.views[intent.request_id]
            expected[intent.request_id] = binding_of(
                view, view.suspension_epoch + (kind in _PREEMPTING_KINDS))
    seen: set[str] = set()
    for release in result.releases:
        rid = release.binding.request_id
        binding = expected.get(rid)
        pending = state.views.get(rid)
        if binding is None and pending is not None and (
                pending.lifecycle is Lifecycle.PREEMPT_PENDING):
            binding = binding_of(pending)
        if rid in seen or binding is None or release.binding != binding:
            raise E.UnmatchedRelease(f"{rid}: release receipt {release.binding} answers no "
                                     f"releasing intent of plan d{plan.decision_id}")
        seen.add(rid)
