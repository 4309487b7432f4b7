"""The request lifecycle (0x0C): the explicit transition table, the queue
intents that drive it through the pure transition, rebuild after recompute,
and cancellation publishing a successor generation."""

from __future__ import annotations

import itertools

import pytest

from iterserve.engine.loop import Engine, bind_policy
from iterserve.policies.registry import make_policy
from iterserve.records import errors as E
from iterserve.records.plan import IntentKind, IterationPlan, QueueIntent
from iterserve.records.receipts import (
    ForeignStatus,
    PreservationResult,
    binding_of,
    preserved_at_once,
)
from iterserve.records.result import IterationResult
from iterserve.records.spec import Capacity, HiddenTruth, OnlineWorkload
from iterserve.records.state import SchedulerState
from iterserve.records.transition import advance, cancel
from iterserve.records.validate import validate_plan, validate_result, validate_state
from iterserve.records.view import (
    TRANSITIONS,
    FinishReason,
    IllegalTransition,
    Lifecycle,
    RequestView,
    WorkKind,
    check_transition,
)
from iterserve.records.workload import parse_workload
from iterserve.sim.executor import SimulatedExecutor
from iterserve.sim.factory import make_simulated_executor

from .helpers import Recorder, loop2_state, loop2_workload, random_workload_json, replace

L = Lifecycle
LIVE_EXITS = {L.CANCELLED, L.ABORTED}
#: 0x0C: RUNNING -> PREEMPT_PENDING -> SUSPENDED_* -> RESUME_PENDING -> RUNNING;
#: any live state may be cancelled or aborted; terminal states are final.
SPEC_TABLE = {
    L.WAITING: {L.RUNNING, L.REJECTED} | LIVE_EXITS,
    L.RUNNING: {L.FINISHED, L.PREEMPT_PENDING, L.WAITING} | LIVE_EXITS,
    L.PREEMPT_PENDING: {L.SUSPENDED_PRESERVED, L.SUSPENDED_RECOMPUTE} | LIVE_EXITS,
    L.SUSPENDED_PRESERVED: {L.RESUME_PENDING, L.SUSPENDED_RECOMPUTE} | LIVE_EXITS,
    L.SUSPENDED_RECOMPUTE: {L.RESUME_PENDING, L.WAITING} | LIVE_EXITS,
    L.RESUME_PENDING: {L.RUNNING} | LIVE_EXITS,
    L.FINISHED: set(),
    L.CANCELLED: set(),
    L.REJECTED: set(),
    L.ABORTED: set(),
}


def test_table_is_the_spec_table():
    assert {k: set(v) for k, v in TRANSITIONS.items()} == SPEC_TABLE
    assert {s for s in L if s.is_terminal} == {L.FINISHED, L.CANCELLED, L.REJECTED, L.ABORTED}


@pytest.mark.parametrize(("before", "after"),
                         [(b, a) for b, a in itertools.product(L, L) if b is not a],
                         ids=lambda s: s.value)
def test_check_transition_follows_the_table(before, after):
    """Every ordered pair of distinct states (staying put is not a transition)."""
    if after in SPEC_TABLE[before]:
        check_transition(before, after)
    else:
        with pytest.raises(IllegalTransition, match=f"(?i){before.value} -> {after.value}"):
            check_transition(before, after)


@pytest.mark.parametrize(("before", "after"), [
    (L.FINISHED, L.RUNNING), (L.CANCELLED, L.WAITING), (L.WAITING, L.FINISHED),
    (L.RUNNING, L.SUSPENDED_PRESERVED), (L.SUSPENDED_PRESERVED, L.RUNNING),
    (L.RESUME_PENDING, L.WAITING), (L.REJECTED, L.ABORTED),
], ids=lambda s: s.value)
def test_refused_examples(before, after):
    with pytest.raises(IllegalTransition):
        check_transition(before, after)


# --- intents through validate_plan and advance ---------------------------------------
WORKLOAD = OnlineWorkload("lifecycle", "iteration", Capacity(8, 4), ())


def _view(rid, lifecycle, *, p=3, e=0, c=0, gen=0, snap=0, order=0, max_out=8):
    return RequestView(rid, gen, snap, "client", 0, float(order), order, p, max_out,
                       num_emitted=e, num_computed=c, num_committed=c, lifecycle=lifecycle)


def _state(*views, version=3, decision=2):
    queues = {"waiting": [], "running": [], "suspended": [], "finished": []}
    for v in views:
        if v.lifecycle is L.WAITING:
            queues["waiting"].append(v.request_id)
        elif v.lifecycle in (L.SUSPENDED_PRESERVED, L.SUSPENDED_RECOMPUTE):
            queues["suspended"].append(v.request_id)
        elif v.lifecycle.is_terminal:
            queues["finished"].append(v.request_id)
        else:
            queues["running"].append(v.request_id)
    state = SchedulerState(decision, version, float(decision),
                           *(tuple(queues[q]) for q in ("waiting", "running", "suspended", "finished")),
                           views={v.request_id: v for v in views}, max_num_batched_tokens=8, max_num_seqs=4)
    validate_state(state)
    return state


def _intent_plan(state, *intents):
    return IterationPlan(state.decision_id, state.state_version, "test", "1", (), 0, 0, (),
                         tuple(QueueIntent(kind, rid, gen) for kind, rid, gen in intents))


def _apply(state, plan, receipts=None):
    """One intent-only step answered by a synchronous memory owner: a READY
    preservation receipt for each preserve intent, unless ``receipts`` says."""
    validate_plan(WORKLOAD, state, plan)
    if receipts is None:
        receipts = preserved_at_once(plan, state, set())
    result = IterationResult(plan.decision_id, plan.input_state_version, (), duration=0.0,
                             receipts=tuple(receipts))
    validate_result(plan, state, result)
    after = advance(state, plan, result)
    validate_state(after)
    return after


def test_admit_moves_waiting_to_running():
    state = _state(_view("x", L.WAITING))
    after = _apply(state, _intent_plan(state, (IntentKind.ADMIT, "x", 0)))
    assert after.views["x"].lifecycle is L.RUNNING and after.running == ("x",)


def test_queues_no_intent_edits_are_handed_on_as_they_were():
    """A decision that edits neither the waiting nor the suspended queue
    hands both on as the same tuples (a long waiting queue is not copied);
    one that edits a queue gets a new tuple with the edit."""
    state = _state(_view("w1", L.WAITING), _view("w2", L.WAITING, order=1),
                   _view("s", L.SUSPENDED_RECOMPUTE, order=2), _view("r", L.RUNNING, order=3))
    kept = _apply(state, _intent_plan(state, (IntentKind.GUARD, "r", 0)))
    assert kept.waiting is state.waiting and kept.suspended is state.suspended
    admitted = _apply(kept, _intent_plan(kept, (IntentKind.ADMIT, "w1", 0)))
    assert admitted.waiting == ("w2",) and admitted.suspended is kept.suspended
    assert admitted.running == ("r", "w1")
    resumed = _apply(admitted, _intent_plan(admitted, (IntentKind.RESUME, "s", 0)))
    assert resumed.suspended == () and resumed.waiting is admitted.waiting


def test_reject_is_terminal():
    state = _state(_view("x", L.WAITING))
    after = _apply(state, _intent_plan(state, (IntentKind.REJECT, "x", 0)))
    view = after.views["x"]
    assert view.lifecycle is L.REJECTED and view.finish_reason is FinishReason.REJECTED
    assert after.finished == ("x",) and not after.has_live


def test_abort_of_a_running_request_is_terminal():
    state = _state(_view("x", L.RUNNING, e=1, c=3))
    after = _apply(state, _intent_plan(state, (IntentKind.ABORT, "x", 0)))
    assert after.views["x"].lifecycle is L.ABORTED and after.finished == ("x",)


@pytest.mark.parametrize(("lifecycle", "kind", "error"), [
    (L.RUNNING, IntentKind.ADMIT, E.IllegalIntent),
    (L.RUNNING, IntentKind.REJECT, E.IllegalIntent),
    (L.WAITING, IntentKind.RESUME, E.IllegalIntent),
    (L.WAITING, IntentKind.PREEMPT_RECOMPUTE, E.IllegalIntent),
    (L.SUSPENDED_PRESERVED, IntentKind.PREEMPT_PRESERVE_EXACT, E.IllegalIntent),
    (L.FINISHED, IntentKind.ABORT, E.TerminalRequest),
], ids=lambda x: getattr(x, "value", getattr(x, "__name__", str(x))))
def test_refused_intents(lifecycle, kind, error):
    e, c = (0, 0) if lifecycle is L.WAITING else (1, 3)
    state = _state(_view("x", lifecycle, e=e, c=c))
    with pytest.raises(error):
        validate_plan(WORKLOAD, state, _intent_plan(state, (kind, "x", 0)))


def test_two_intents_for_one_request_are_refused():
    state = _state(_view("x", L.WAITING))
    plan = _intent_plan(state, (IntentKind.ADMIT, "x", 0), (IntentKind.REJECT, "x", 0))
    with pytest.raises(E.IllegalIntent):
        validate_plan(WORKLOAD, state, plan)


def _run_step(state, policy_name="refill"):
    policy = make_policy(policy_name)
    bound = bind_policy(WORKLOAD, policy)
    plan = policy.choose(state)
    validate_plan(bound, state, plan)
    result = SimulatedExecutor(HiddenTruth({})).execute(plan, state)
    validate_result(plan, state, result)
    after = advance(state, plan, result)
    validate_state(after)
    return plan, result, after


def test_recompute_preemption_then_rebuild_emits_nothing_and_earns_nothing():
    """0x0C: RECOMPUTE drops computed rows, keeps emitted output; the rebuild
    [0, p + e - 1) emits nothing and debits no service; decode then resumes."""
    state = _state(_view("x", L.RUNNING, p=3, e=2, c=4))
    after = _apply(state, _intent_plan(state, (IntentKind.PREEMPT_RECOMPUTE, "x", 0)))
    x = after.views["x"]
    assert x.lifecycle is L.WAITING and after.waiting == ("x",)
    assert (x.num_emitted, x.num_computed, x.num_committed) == (2, 0, 0)
    assert x.suspension_epoch == 1 and x.is_rebuilding and x.target == 4

    plan, result, rebuilt = _run_step(after)
    assert [(w.start, w.end, w.kind) for w in plan.work] == [(0, 4, WorkKind.REBUILD)]
    assert [c.emitted for c in result.completed] == [False]
    assert dict(result.service) == {} and rebuilt.service == after.service
    x = rebuilt.views["x"]
    assert (x.num_emitted, x.num_computed, x.lifecycle) == (2, 4, L.RUNNING)

    plan, result, decoded = _run_step(rebuilt)
    assert [(w.start, w.end, w.kind) for w in plan.work] == [(4, 5, WorkKind.DECODE_ROW)]
    assert decoded.views["x"].num_emitted == 3 and decoded.service == {"client": 1}


def test_rebuild_claiming_an_emission_is_refused():
    state = _state(_view("x", L.RUNNING, p=3, e=2, c=1))
    policy = make_policy("refill")
    plan = policy.choose(state)
    result = SimulatedExecutor(HiddenTruth({})).execute(plan, state)
    forged = replace(result, completed=(replace(result.completed[0], emitted=True, token_id=3),))
    with pytest.raises(E.WrongOutputClock):
        validate_result(plan, state, forged)


def test_reaching_max_output_tokens_finishes_with_length():
    state = _state(_view("x", L.RUNNING, p=2, e=2, c=3, max_out=3))
    _, _, after = _run_step(state)
    x = after.views["x"]
    assert x.lifecycle is L.FINISHED and x.finish_reason is FinishReason.LENGTH
    assert x.num_emitted == 3 and after.finished == ("x",)


def test_preserve_preemption_goes_through_preempt_pending_and_keeps_rows():
    """0x0C: RUNNING -> PREEMPT_PENDING -> SUSPENDED_PRESERVED; rows are kept."""
    state = _state(_view("x", L.RUNNING, p=3, e=2, c=4))
    after = _apply(state, _intent_plan(state, (IntentKind.PREEMPT_PRESERVE_EXACT, "x", 0)))
    x = after.views["x"]
    assert x.lifecycle is L.SUSPENDED_PRESERVED and after.suspended == ("x",)
    assert "x" not in after.running and x.suspension_epoch == 1
    assert (x.num_emitted, x.num_computed, x.num_committed) == (2, 4, 4)


@pytest.mark.parametrize("suspended", [L.SUSPENDED_PRESERVED, L.SUSPENDED_RECOMPUTE],
                         ids=lambda s: s.value)
def test_resume_goes_through_resume_pending(suspended):
    """0x0C: SUSPENDED_* -> RESUME_PENDING -> RUNNING, through the table."""
    state = _state(_view("x", suspended, p=3, e=2, c=4))
    after = _apply(state, _intent_plan(state, (IntentKind.RESUME, "x", 0)))
    assert after.running == ("x",) and after.suspended == ()
    assert after.views["x"].lifecycle is L.RUNNING


def test_preservation_in_flight_stays_preempt_pending_until_its_receipt():
    """0x0C: PREEMPT_PENDING -> SUSPENDED_PRESERVED spans iterations when the
    memory owner preserves asynchronously; a stale receipt settles nothing
    and a pending request cannot resume."""
    state = _state(_view("x", L.RUNNING, p=3, e=2, c=4))
    plan = _intent_plan(state, (IntentKind.PREEMPT_PRESERVE_EXACT, "x", 0))
    inflight = PreservationResult(binding_of(state.views["x"], 1), ForeignStatus.INFLIGHT)
    pending = _apply(state, plan, [inflight])
    assert pending.views["x"].lifecycle is L.PREEMPT_PENDING and pending.suspended == ("x",)
    with pytest.raises(E.IllegalIntent):
        _apply(pending, _intent_plan(pending, (IntentKind.RESUME, "x", 0)))
    stale = PreservationResult(binding_of(state.views["x"], 0), ForeignStatus.READY, 4)
    assert _apply(pending, _intent_plan(pending), [stale]).views["x"].lifecycle is \
        L.PREEMPT_PENDING
    ready = PreservationResult(binding_of(pending.views["x"]), ForeignStatus.READY, 4)
    settled = _apply(pending, _intent_plan(pending), [ready])
    assert settled.views["x"].lifecycle is L.SUSPENDED_PRESERVED
    assert settled.views["x"].suspension_epoch == 1 and settled.views["x"].num_computed == 4


def test_failed_preservation_receipt_falls_back_to_recompute():
    state = _state(_view("x", L.RUNNING, p=3, e=2, c=4))
    plan = _intent_plan(state, (IntentKind.PREEMPT_PRESERVE_EXACT, "x", 0))
    failed = PreservationResult(binding_of(state.views["x"], 1), ForeignStatus.FAILED)
    after = _apply(state, plan, [failed])
    assert after.waiting == ("x",) and after.views["x"].lifecycle is L.WAITING
    assert (after.views["x"].num_emitted, after.views["x"].num_computed) == (2, 0)


def test_preserve_then_resume_decodes_without_rebuild():
    state = _state(_view("x", L.RUNNING, p=3, e=2, c=4))
    suspended = _apply(state, _intent_plan(state, (IntentKind.PREEMPT_PRESERVE_EXACT, "x", 0)))
    resumed = _apply(suspended, _intent_plan(suspended, (IntentKind.RESUME, "x", 0)))
    plan, result, after = _run_step(resumed)
    assert [(w.start, w.end, w.kind) for w in plan.work] == [(4, 5, WorkKind.DECODE_ROW)]
    assert after.views["x"].num_emitted == 3


# --- cancellation --------------------------------------------------------------------
@pytest.mark.parametrize("lifecycle", [L.WAITING, L.RUNNING, L.PREEMPT_PENDING,
                                       L.SUSPENDED_PRESERVED, L.SUSPENDED_RECOMPUTE,
                                       L.RESUME_PENDING], ids=lambda s: s.value)
def test_cancel_from_any_live_point_publishes_a_successor_generation(lifecycle):
    e, c = (0, 0) if lifecycle is L.WAITING else (1, 3)
    other = _view("y", L.WAITING, order=1)
    state = _state(_view("x", lifecycle, e=e, c=c, gen=3, snap=5), other)
    after = cancel(state, "x")
    validate_state(after)
    x = after.views["x"]
    assert x.generation == 4 and x.snapshot_version > 5
    assert x.lifecycle is L.CANCELLED and x.finish_reason is FinishReason.CANCELLED
    assert "x" not in after.waiting + after.running + after.suspended
    assert after.finished == ("x",)
    assert after.state_version == state.state_version + 1
    assert after.views["y"] == other


def test_cancel_of_a_terminal_request_changes_nothing():
    state = loop2_state()
    assert cancel(state, "req-E") is state


def test_plan_bound_to_the_old_generation_is_rejected_after_cancel():
    """0x01A: a cancellation that changes the generation invalidates the old plan
    before packing or publication."""
    workload, state = loop2_workload(), loop2_state()
    plan = make_policy("decode-first").choose(state)
    validate_plan(workload, state, plan)
    after = cancel(state, "req-C")
    with pytest.raises(E.StaleStateVersion):
        validate_plan(workload, after, plan)
    # even re-addressed to the new state version, req-C's old generation is stale
    rebased = replace(plan, input_state_version=after.state_version)
    with pytest.raises(E.StaleGeneration):
        validate_plan(workload, after, rebased)
    # and a result of the old plan cannot publish into the new state
    result = SimulatedExecutor(HiddenTruth({})).execute(plan, state)
    with pytest.raises(E.StaleResult):
        validate_result(plan, after, result)
    # the policy re-plans without the cancelled generation
    replanned = make_policy("decode-first").choose(after)
    validate_plan(workload, after, replanned)
    assert "req-C" not in {w.request_id for w in replanned.work}


def test_engine_runs_on_after_a_mid_run_cancel():
    manifest = parse_workload(random_workload_json(seed=5, num_requests=6))
    recorder = Recorder()
    engine = Engine(manifest.online, make_policy("refill"), make_simulated_executor(manifest),
                    [recorder])
    while not engine.state.running:
        engine.step()
    victim = engine.state.running[0]
    engine.cancel(victim)
    cancels = recorder.cancels
    assert [rid for rid, _, _ in cancels] == [victim]
    assert cancels[0][2].views[victim].generation == cancels[0][1].views[victim].generation + 1
    recorder.steps.clear()
    engine.run()
    assert recorder.steps, "the run must go on after the cancel"
    for state, plan, _, _ in recorder.steps:
        assert victim not in {w.request_id for w in plan.work} | {i.request_id for i in plan.intents}
        assert victim not in state.waiting + state.running + state.suspended
    assert not engine.state.has_live
