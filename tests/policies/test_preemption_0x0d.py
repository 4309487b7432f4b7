"""0x0D source-shaped preemption: zero free KV rows, running [A, B],
priority(A) = 10 (least favoured), priority(B) = 1.

FCFS preempts the running tail B (its four rows are released) and A gets
its one decode row; PRIORITY picks A, which preempts itself, so no running
row is scheduled; after a running-path preemption there is no waiting pass.
The preempted request returns at the front of waiting with computed 0 and
its emitted outputs intact: its next work is a REBUILD of [0, p + e - 1).
"""

from __future__ import annotations

import dataclasses

import pytest
from policy_helpers import (
    Recorder,
    choose_validated,
    decoding_view,
    execute_and_advance,
    manifest_of,
    state_of,
    waiting_view,
    work_of,
    workload_for,
)

from iterserve.engine.loop import Engine, bind_policy
from iterserve.policies.registry import make_policy
from iterserve.records import errors as E
from iterserve.records.plan import IntentKind
from iterserve.records.spec import Capacity, HiddenTruth, RequestSpec
from iterserve.records.state import CapacityFacts
from iterserve.records.validate import validate_plan
from iterserve.records.view import Lifecycle, WorkKind, derive_kind
from iterserve.sim.executor import SimulatedExecutor
from iterserve.sim.factory import make_simulated_executor

A_ROWS = 3  # A: p=2, e=2 -> c = 3
B_PROMPT, B_EMITTED = 3, 2  # B: p=3, e=2 -> c = 4: B holds four rows
B_ROWS = B_PROMPT + B_EMITTED - 1
TOTAL_ROWS = A_ROWS + B_ROWS


def zero_free_state():
    views = [
        decoding_view("A", 0, num_prompt=2, num_emitted=2, priority=10),
        decoding_view("B", 1, num_prompt=B_PROMPT, num_emitted=B_EMITTED, priority=1),
        waiting_view("W", 2, num_prompt=1, priority=0),
    ]
    facts = CapacityFacts(block_size=1, num_blocks_total=TOTAL_ROWS, num_blocks_free=0)
    state = state_of(views, max_num_batched_tokens=16, max_num_seqs=8, capacity=facts)
    assert state.running == ("A", "B") and state.waiting == ("W",)
    assert state.view("B").num_computed == 4
    return state, workload_for(state, Capacity(max_num_batched_tokens=16, max_num_seqs=8))


def hidden() -> HiddenTruth:
    return HiddenTruth({"A": 50, "B": 50, "W": 50})


def test_fcfs_preempts_the_tail_and_a_schedules_one_row() -> None:
    state, workload = zero_free_state()
    bound, plan = choose_validated(make_policy("vllm"), workload, state)
    assert [(i.kind, i.request_id) for i in plan.intents] == [(IntentKind.PREEMPT_RECOMPUTE, "B")]
    a = state.view("A")
    assert [(w.request_id, w.start, w.end, w.kind) for w in plan.work] == [
        ("A", a.num_computed, a.num_computed + 1, WorkKind.DECODE_ROW)]
    assert work_of(plan, "W") is None, "no waiting pass after a running-path preemption"

    # A's row is legal only because B's four rows are released by this plan
    without_release = dataclasses.replace(plan, intents=())
    with pytest.raises(E.KvCapacityExceeded):
        validate_plan(bound, state, without_release)

    successor = execute_and_advance(SimulatedExecutor(hidden()), plan, state)
    assert successor.waiting[0] == "B"
    assert successor.running == ("A",)
    b = successor.view("B")
    assert b.lifecycle is Lifecycle.WAITING
    assert (b.num_computed, b.num_committed) == (0, 0)
    assert b.num_emitted == B_EMITTED
    assert b.target == B_PROMPT + B_EMITTED - 1 == 4
    assert derive_kind(b, 0, b.target) is WorkKind.REBUILD
    assert derive_kind(b, 0, b.target + 1) is None, "rebuild may not run past p + e - 1"
    assert successor.view("A").num_computed == a.num_computed + 1


def test_fcfs_resumes_the_victim_with_a_rebuild_interval_once_memory_allows() -> None:
    state, workload = zero_free_state()
    _, plan = choose_validated(make_policy("vllm"), workload, state)
    successor = execute_and_advance(SimulatedExecutor(hidden()), plan, state)
    roomy = dataclasses.replace(
        successor, capacity=CapacityFacts(block_size=1, num_blocks_total=64, num_blocks_free=60))
    _, next_plan = choose_validated(make_policy("vllm"), workload, roomy)
    rebuild = work_of(next_plan, "B")
    assert rebuild is not None
    assert (rebuild.start, rebuild.end, rebuild.kind) == (0, B_ROWS, WorkKind.REBUILD)
    assert (IntentKind.ADMIT, "B") in [(i.kind, i.request_id) for i in next_plan.intents]


def test_priority_victim_is_a_itself_and_nothing_runs() -> None:
    state, workload = zero_free_state()
    _, plan = choose_validated(make_policy("vllm-priority"), workload, state)
    assert [(i.kind, i.request_id) for i in plan.intents] == [(IntentKind.PREEMPT_RECOMPUTE, "A")]
    assert plan.work == (), "no running row (and no waiting pass) after A preempts itself"
    assert plan.tokens_used == 0 and plan.sequences_used == 0

    successor = execute_and_advance(SimulatedExecutor(hidden()), plan, state)
    assert successor.waiting[:2] == ("A", "W")
    assert successor.running == ("B",)
    a = successor.view("A")
    assert (a.num_computed, a.num_emitted) == (0, 2)
    assert derive_kind(a, 0, a.target) is WorkKind.REBUILD
    b = successor.view("B")
    assert (b.num_computed, b.num_emitted) == (B_ROWS, B_EMITTED), "B untouched"


@pytest.mark.parametrize(("policy_name", "victim", "runs"),
                         [("vllm", "L", "M"), ("vllm-priority", "M", "L")])
def test_a_victim_already_placed_in_this_plan_is_unscheduled(policy_name, victim, runs) -> None:
    """Running [M, L], one free row: M (priority 10) takes it, then L
    (priority 1) is short. FCFS: the tail L preempts itself and M keeps its
    row. PRIORITY: M is least favoured; its placed row and budgets are
    removed before L schedules (0x0D)."""
    views = [decoding_view("M", 0, num_prompt=2, num_emitted=2, priority=10),
             decoding_view("L", 1, num_prompt=3, num_emitted=2, priority=1)]
    facts = CapacityFacts(block_size=1, num_blocks_total=8, num_blocks_free=1)
    state = state_of(views, max_num_batched_tokens=16, max_num_seqs=8, capacity=facts)
    workload = workload_for(state, Capacity(max_num_batched_tokens=16, max_num_seqs=8))
    _, plan = choose_validated(make_policy(policy_name), workload, state)
    assert [(i.kind, i.request_id) for i in plan.intents] == [
        (IntentKind.PREEMPT_RECOMPUTE, victim)]
    assert [w.request_id for w in plan.work] == [runs]
    assert (plan.tokens_used, plan.sequences_used) == (1, 1)


def test_engine_releases_the_rows_of_a_request_that_preempts_itself() -> None:
    """The priority shape inside a real run: A (priority 10) is admitted
    alone at t=0, B (priority 1) at t=1, filling all five KV rows. At t=2 A
    is first in running, least favoured and short of a row: it preempts
    itself and the plan holds no work. Its three rows must still be released
    by the memory owner, so B can keep decoding and both finish."""
    requests = [RequestSpec("A", 0.0, 2, 8, priority=10), RequestSpec("B", 1.0, 2, 8, priority=1)]
    manifest = manifest_of(requests, Capacity(max_num_batched_tokens=16, max_num_seqs=4, kv_rows=5),
                           {"A": 3, "B": 3}, "0x0d-self-preemption")
    policy = make_policy("vllm-priority")
    recorder = Recorder(bind_policy(manifest.online, policy))
    executor = make_simulated_executor(manifest)
    engine = Engine(manifest.online, policy, executor, [recorder])
    def preempts(plan) -> bool:
        return any(i.kind is IntentKind.PREEMPT_RECOMPUTE for i in plan.intents)

    for _ in range(10):
        engine.step()
        if preempts(recorder.steps[-1][1]):
            break
    state, plan, _, successor = recorder.steps[-1]
    assert state.running == ("A", "B") and state.capacity.num_blocks_free == 0
    assert plan.work == ()
    assert [(i.kind, i.request_id) for i in plan.intents] == [(IntentKind.PREEMPT_RECOMPUTE, "A")]
    assert executor.kv is not None
    assert executor.kv.facts().num_blocks_free == 3, "A's three rows were not released"
    assert successor.capacity.num_blocks_free == 3, "published capacity facts are stale"
    engine.run(max_iterations=50)
    assert engine.is_done
    assert executor.kv.facts().num_blocks_free == 5
