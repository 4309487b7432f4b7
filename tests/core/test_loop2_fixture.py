"""The Loop 2 mixed-iteration fixture of 0x01A, reproduced through the real
decode-first policy, validator, simulated executor and transition."""

from __future__ import annotations

import pytest

from iterserve.policies.registry import make_policy
from iterserve.records.plan import IntentKind
from iterserve.records.result import CompletedInterval, IterationResult
from iterserve.records.spec import HiddenTruth
from iterserve.records.transition import advance
from iterserve.records.validate import validate_plan, validate_result, validate_state
from iterserve.records.view import FinishReason, Lifecycle, WorkKind
from iterserve.sim.executor import SimulatedExecutor

from .helpers import LOOP2_DECISION, LOOP2_STATE_VERSION, loop2_state, loop2_workload, replace

DECODE_FIRST_KEY = ("phase_rank", "priority_rank", "arrival_order", "request_id",
                    "request_generation")


def _plan():
    workload, state = loop2_workload(), loop2_state()
    return workload, state, make_policy("decode-first").choose(state)


def _expected_result() -> IterationResult:
    """0x01A: A completes [0,2) and emits nothing; B emits its second token and
    stops (EOS); C emits its third token. Service is debited from completed
    rows only: alpha 2 + 1, beta 1."""
    return IterationResult(
        decision_id=LOOP2_DECISION,
        input_state_version=LOOP2_STATE_VERSION,
        completed=(
            CompletedInterval("req-B", 2, 3, 4, True, 2, FinishReason.STOP),
            CompletedInterval("req-C", 1, 3, 4, True, 3, None),
            CompletedInterval("req-A", 0, 0, 2, False, None, None),
        ),
        service={"client-alpha": 3, "client-beta": 1},
        duration=1.0,
    )


def test_fixture_state_is_a_legal_cut():
    validate_state(loop2_state())


def test_decode_first_reproduces_the_fixture_plan():
    workload, state, plan = _plan()
    validate_plan(workload, state, plan)
    selected = [(w.request_id, w.generation, w.snapshot_version, w.start, w.end, w.kind)
                for w in plan.work]
    assert selected == [
        ("req-B", 2, 9, 3, 4, WorkKind.DECODE_ROW),
        ("req-C", 1, 6, 3, 4, WorkKind.DECODE_ROW),
        ("req-A", 0, 3, 0, 2, WorkKind.PREFILL_CHUNK),
    ]
    assert [list(w.positions) for w in plan.work] == [[3], [3], [0, 1]]
    assert (plan.tokens_used, plan.sequences_used) == (4, 3)
    assert (plan.decision_id, plan.input_state_version) == (LOOP2_DECISION, LOOP2_STATE_VERSION)
    assert (plan.policy_id, plan.policy_version) == ("decode-first", "1")
    assert plan.tie_break_key == DECODE_FIRST_KEY
    # The recorded key order is the spec's "req-B:2, req-C:1, req-A:0".
    assert [w.tie_break for w in plan.work] == [
        (0, 0, 2, "req-B", 2), (0, 0, 3, "req-C", 1), (2, 0, 1, "req-A", 0)]
    # req-A is waiting: the plan admits it; nothing else changes queues.
    assert [(i.kind, i.request_id, i.generation) for i in plan.intents] == [
        (IntentKind.ADMIT, "req-A", 0)]


def test_unready_and_terminal_requests_are_not_selected():
    _, _, plan = _plan()
    chosen = {w.request_id for w in plan.work} | {i.request_id for i in plan.intents}
    assert "req-D" not in chosen and "req-E" not in chosen


def test_readiness_alone_keeps_req_d_out():
    """req-D precedes req-A in key order: were it ready it would take the slot."""
    state = loop2_state()
    views = dict(state.views)
    views["req-D"] = replace(views["req-D"], is_ready=True)
    ready_state = replace(state, views=views)
    plan = make_policy("decode-first").choose(ready_state)
    validate_plan(loop2_workload(), ready_state, plan)
    assert [w.request_id for w in plan.work] == ["req-B", "req-C", "req-D"]


def test_planning_advances_nothing():
    state = loop2_state()
    before = dict(state.views)
    _plan()
    assert dict(state.views) == before and state.service == {}


@pytest.mark.parametrize("source", ["hand-built", "simulated-executor"])
def test_result_publishes_only_completed_progress(source):
    workload, state, plan = _plan()
    if source == "hand-built":
        result = _expected_result()
    else:
        result = SimulatedExecutor(HiddenTruth({"req-B": 2})).execute(plan, state)
        assert result == _expected_result()
    validate_result(plan, state, result)
    after = advance(state, plan, result)
    validate_state(after)

    a, b, c = (after.views[r] for r in ("req-A", "req-B", "req-C"))
    assert (a.num_emitted, a.num_computed, a.num_committed) == (0, 2, 2)
    assert a.lifecycle is Lifecycle.RUNNING and a.first_token_time is None
    assert b.lifecycle is Lifecycle.FINISHED and b.finish_reason is FinishReason.STOP
    assert (b.num_emitted, b.logical_length, b.num_committed) == (2, 5, 4)
    assert (c.num_emitted, c.num_computed, c.logical_length) == (3, 4, 5)
    assert c.lifecycle is Lifecycle.RUNNING
    assert after.service == {"client-alpha": 3, "client-beta": 1}

    assert after.finished == ("req-B",)
    assert set(after.running) == {"req-A", "req-C"}
    assert after.waiting == ("req-D",)
    assert "req-E" not in after.views  # retired terminal generation leaves the state
    assert after.views["req-D"] == state.views["req-D"]
    assert (after.decision_id, after.state_version) == (LOOP2_DECISION + 1, LOOP2_STATE_VERSION + 1)
    # every touched snapshot moves on, so a plan bound to the old one is stale
    for rid in ("req-A", "req-B", "req-C"):
        assert after.views[rid].snapshot_version > state.views[rid].snapshot_version


def test_service_debit_adds_to_existing_counters():
    workload, state, plan = _plan()
    state = replace(state, service={"client-alpha": 10, "client-gamma": 7})
    after = advance(state, plan, _expected_result())
    assert after.service == {"client-alpha": 13, "client-beta": 1, "client-gamma": 7}
