"""Mechanical validation of states, plans and results (0x01A).

``validate_plan`` runs before any execution; ``validate_result`` before any
publication. Each raises the one named error of the first invariant broken.
These checks are the hot path's only safety net, so they stay O(work).
"""

from __future__ import annotations

from collections import Counter

from iterserve.records import errors as E
from iterserve.records.keys import KEY_FIELDS, key_function
from iterserve.records.plan import IntentKind, IterationPlan, WorkItem
from iterserve.records.result import IterationResult
from iterserve.records.spec import OnlineWorkload
from iterserve.records.state import SchedulerState
from iterserve.records.view import Lifecycle, RequestView, WorkKind

_QUEUE_LIFECYCLES = {
    "waiting": frozenset({Lifecycle.WAITING}),
    "running": frozenset({Lifecycle.RUNNING, Lifecycle.PREEMPT_PENDING, Lifecycle.RESUME_PENDING}),
    "suspended": frozenset({Lifecycle.SUSPENDED_PRESERVED, Lifecycle.SUSPENDED_RECOMPUTE}),
    "finished": frozenset(
        {Lifecycle.FINISHED, Lifecycle.CANCELLED, Lifecycle.REJECTED, Lifecycle.ABORTED}
    ),
}


def validate_state(state: SchedulerState) -> None:
    """Every queue member is known, listed once, in a matching lifecycle."""
    seen: set[str] = set()
    for queue_name, allowed in _QUEUE_LIFECYCLES.items():
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


def validate_plan(workload: OnlineWorkload, state: SchedulerState, plan: IterationPlan) -> None:
    """Reject any plan that is not legal work against ``state`` (0x01A)."""
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
    _validate_work(state, plan, admitted, leaving)
    _validate_ledger(state, plan)
    _validate_kv(state, plan)
    _validate_tie_break(state, plan)


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
    IntentKind.PREEMPT_PRESERVE: frozenset({Lifecycle.RUNNING}),
    IntentKind.REJECT: frozenset({Lifecycle.WAITING}),
    IntentKind.GUARD: frozenset({Lifecycle.RUNNING}),
    IntentKind.ABORT: frozenset(
        {Lifecycle.WAITING, Lifecycle.RUNNING, Lifecycle.SUSPENDED_PRESERVED,
         Lifecycle.SUSPENDED_RECOMPUTE}
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


def _validate_work(
    state: SchedulerState, plan: IterationPlan, admitted: set[str], leaving: set[str]
) -> None:
    """Each item binds a current, ready, admitted view and its only legal
    interval. The loop is the hot path: a cheap check of every invariant
    per item, and on any doubt the detailed checks raise the named error."""
    seen: set[str] = set()
    views = state.views
    running = Lifecycle.RUNNING
    prefill, decode, rebuild = WorkKind.PREFILL_CHUNK, WorkKind.DECODE_ROW, WorkKind.REBUILD
    for work in plan.work:
        rid = work.request_id
        view = views.get(rid)
        start, end = work.start, work.end
        ok = (
            view is not None
            and view.generation == work.generation
            and view.snapshot_version == work.snapshot_version
            and view.is_ready
            and rid not in seen
            and rid not in leaving
            and (view.lifecycle is running or rid in admitted)
            and start == view.num_computed
            and work.positions == range(start, end)
        )
        if ok:
            assert view is not None
            e = view.num_emitted
            if e == 0:
                ok = work.kind is prefill and start < end <= view.num_prompt_tokens
            else:
                target = view.num_prompt_tokens + e - 1
                if start == target:
                    ok = work.kind is decode and end == start + 1
                else:
                    ok = work.kind is rebuild and start < end <= target
        if not ok:
            _explain_work(state, work, seen, admitted, leaving)
        seen.add(rid)


def _explain_work(state: SchedulerState, work: WorkItem, seen: set[str], admitted: set[str],
                  leaving: set[str]) -> None:
    """Raise the named error for an item the fast check refused."""
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
    raise E.ContractViolation(f"{work.request_id}: work item refused")  # unreachable by design


def _validate_interval(view: RequestView, work: WorkItem) -> None:
    c = view.num_computed
    if work.start != c:
        raise E.IntervalBeforeFrontier(
            f"{work.request_id}: interval starts at {work.start}, computed frontier is {c}"
        )
    if work.end <= work.start:
        raise E.EmptyInterval(f"{work.request_id}: [{work.start},{work.end}) is empty")
    if view.is_decoding:
        if work.end != c + 1:
            raise E.MultiRowDecode(f"{work.request_id}: decode must be [{c},{c + 1})")
        kind = WorkKind.DECODE_ROW
    else:
        if work.end > view.target:
            raise E.IntervalBeyondTarget(
                f"{work.request_id}: end {work.end} beyond target {view.target}"
            )
        kind = WorkKind.PREFILL_CHUNK if view.num_emitted == 0 else WorkKind.REBUILD
    if work.kind is not kind:
        raise E.ForgedKind(f"{work.request_id}: kind {work.kind.value}, derived {kind.value}")
    if work.positions != range(work.start, work.end):
        raise E.ForgedPositions(f"{work.request_id}: positions != range({work.start},{work.end})")


def _validate_ledger(state: SchedulerState, plan: IterationPlan) -> None:
    tokens = sum(work.end - work.start for work in plan.work)
    if tokens != plan.tokens_used or len(plan.work) != plan.sequences_used:
        raise E.LedgerDrift(
            f"ledger says {plan.tokens_used} tokens/{plan.sequences_used} seqs, "
            f"work has {tokens}/{len(plan.work)}"
        )
    if tokens > state.token_budget:
        raise E.TokenBudgetExceeded(f"{tokens} token rows > budget {state.token_budget}")
    if len(plan.work) > state.sequence_budget:
        raise E.SequenceBudgetExceeded(
            f"{len(plan.work)} sequences > budget {state.sequence_budget}"
        )


def _validate_kv(state: SchedulerState, plan: IterationPlan) -> None:
    """New blocks fit in free blocks plus blocks the plan's preemptions free.

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
    needed = resumed + sum(
        facts.blocks_for(w.end) - facts.blocks_for(w.start) for w in plan.work
    )
    if needed > facts.num_blocks_free + freed:
        raise E.KvCapacityExceeded(
            f"plan needs {needed} new KV blocks, {facts.num_blocks_free} free + {freed} released"
        )


_RELEASING = frozenset({IntentKind.PREEMPT_RECOMPUTE, IntentKind.PREEMPT_PRESERVE, IntentKind.ABORT})


def _validate_tie_break(state: SchedulerState, plan: IterationPlan) -> None:
    """Recorded keys must recompute from the state and be in order."""
    names = plan.tie_break_key
    unknown = [name for name in names if name not in KEY_FIELDS]
    if unknown:
        raise E.ForgedTieBreak(f"unknown tie-break field(s) {unknown}")
    key_of = key_function(names, state)
    views = state.views
    previous: tuple[object, ...] | None = None
    for work in plan.work:
        key = key_of(views[work.request_id])
        if key != work.tie_break:
            raise E.ForgedTieBreak(f"{work.request_id}: recorded {work.tie_break}, derived {key}")
        if previous is not None and key < previous:
            raise E.ForgedTieBreak(f"{work.request_id}: work is out of tie-break order")
        previous = key


def validate_result(plan: IterationPlan, state: SchedulerState, result: IterationResult) -> None:
    """Reject results that do not answer exactly this plan (0x01A)."""
    if (
        result.decision_id != plan.decision_id
        or result.input_state_version != plan.input_state_version
        or plan.input_state_version != state.state_version
    ):
        raise E.StaleResult(
            f"result for v{result.input_state_version}/d{result.decision_id}, "
            f"plan is v{plan.input_state_version}/d{plan.decision_id}"
        )
    planned = {work.request_id: work for work in plan.work}
    service: Counter[str] = Counter()
    done: set[str] = set()
    views = state.views
    decode, prefill, rebuild = WorkKind.DECODE_ROW, WorkKind.PREFILL_CHUNK, WorkKind.REBUILD
    for item in result.completed:
        rid = item.request_id
        work = planned.get(rid)
        if work is None:
            raise E.UnplannedCompletion(f"{rid} completed without planned work")
        if item.generation != work.generation:
            raise E.StaleGeneration(f"{rid}: completion for generation {item.generation}")
        if rid in done:
            raise E.DuplicateCompletion(f"{rid} completed twice")
        done.add(rid)
        end = item.end
        if item.start != work.start or not work.start < end <= work.end:
            raise E.CompletionBeyondPlan(
                f"{rid}: completed [{item.start},{end}) "
                f"outside planned [{work.start},{work.end})"
            )
        view = views[rid]
        kind = work.kind
        emitted = item.emitted
        if kind is decode:
            fast = emitted and (item.finish_reason is not None
                                or view.num_emitted + 1 < view.max_output_tokens)
        elif kind is prefill:
            fast = not emitted and item.finish_reason is None and end < view.num_prompt_tokens
        else:
            fast = False
        if not fast:
            _validate_output_clock(view, work, end, emitted, item.finish_reason is not None)
        if kind is not rebuild:
            service[view.client_id] += end - item.start
    intents = {intent.request_id: intent.generation for intent in plan.intents}
    for failure in result.failures:
        rid = failure.request_id
        work = planned.get(rid)
        expected = work.generation if work is not None else intents.get(rid)
        if expected is None or rid in done:
            raise E.UnplannedCompletion(f"{rid}: failure for no open planned work")
        if failure.generation != expected:
            raise E.StaleGeneration(f"{rid}: failure for generation {failure.generation}")
    claimed = {client: rows for client, rows in result.service.items() if rows}
    if claimed != dict(service):
        raise E.ServiceDebitMismatch(f"result debits {claimed}, completed rows give {dict(service)}")


def _validate_output_clock(
    view: RequestView, work: WorkItem, end: int, emitted: bool, has_finish: bool
) -> None:
    """Prefill emits token 1 only on reaching p; decode emits one; rebuild none."""
    if work.kind is WorkKind.DECODE_ROW:
        should_emit = True
    elif work.kind is WorkKind.PREFILL_CHUNK:
        should_emit = end == view.num_prompt_tokens
    else:
        should_emit = False
    if emitted != should_emit:
        raise E.WrongOutputClock(
            f"{view.request_id}: emitted={emitted} for {work.kind.value} ending at {end}"
        )
    if has_finish and not emitted:
        raise E.WrongOutputClock(f"{view.request_id}: finish reason on an interval that emitted nothing")
    if emitted and not has_finish and view.num_emitted + 1 >= view.max_output_tokens:
        raise E.WrongOutputClock(
            f"{view.request_id}: output {view.num_emitted + 1} reaches max_output_tokens "
            "without a length stop"
        )
