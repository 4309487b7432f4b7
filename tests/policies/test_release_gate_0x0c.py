"""0x0C: PREEMPT_PENDING is not free capacity; only a matching READY
release publishes it. The 0x0D fixture (zero free rows, running [A, B]; A
holds 3 rows, B 4) under a memory owner that does not release at once:

- FCFS preempts the tail B, but A's one decode row is NOT in the same plan
  (B's 4 rows are pending, not free); A waits, holding B's first row for it;
- a result whose release for B is INFLIGHT leaves B PREEMPT_PENDING with
  its 4 rows still held; A waits again (no second victim);
- the READY release bound to B's epoch-1 binding puts B at the front of
  waiting with computed 0; the capacity fact of that cut holds B's 4 rows.

The expectations below are counted by hand from those rules, not taken
from a run.
"""

from __future__ import annotations

import dataclasses

import pytest
from policy_helpers import (
    Recorder,
    choose_validated,
    decoding_view,
    manifest_of,
    state_of,
    waiting_view,
    workload_for,
)

from iterserve.cli.main import main
from iterserve.engine.decision_log import DecisionLogWriter
from iterserve.engine.kv_residency import KvResidency
from iterserve.engine.loop import Engine, bind_policy
from iterserve.kv.config import BlockManagerConfig
from iterserve.policies.registry import make_policy
from iterserve.records import errors as E
from iterserve.records.plan import IntentKind, make_work
from iterserve.records.receipts import (
    ForeignBinding,
    ForeignStatus,
    ReleaseResult,
    snapshot_digest,
)
from iterserve.records.result import IterationResult
from iterserve.records.spec import Capacity, RequestSpec
from iterserve.records.state import CapacityFacts
from iterserve.records.transition import advance
from iterserve.records.validate import validate_plan, validate_result
from iterserve.records.view import Lifecycle, WorkKind
from iterserve.sim.executor import SimulatedExecutor

# B: p=3, e=2 -> c = 4; its preemption opens suspension epoch 1
B_EPOCH_1 = ForeignBinding("B", 0, snapshot_digest("B", 0, 3, 2), 1)
B_EPOCH_0 = ForeignBinding("B", 0, snapshot_digest("B", 0, 3, 2), 0)


def _state(releases_at_once: bool):
    views = [decoding_view("A", 0, num_prompt=2, num_emitted=2),
             decoding_view("B", 1, num_prompt=3, num_emitted=2),
             waiting_view("W", 2, num_prompt=1)]
    facts = CapacityFacts(1, 7, 0, releases_at_once=releases_at_once)
    state = state_of(views, max_num_batched_tokens=16, max_num_seqs=8, capacity=facts)
    return state, workload_for(state, Capacity(max_num_batched_tokens=16, max_num_seqs=8))


def _result(plan, state, releases, free: int = 0) -> IterationResult:
    return IterationResult(plan.decision_id, plan.input_state_version, (),
                           capacity=CapacityFacts(1, 7, free, releases_at_once=False),
                           releases=releases)


def test_a_pending_release_is_not_free_capacity_for_the_plan_that_asks_for_it() -> None:
    state, workload = _state(releases_at_once=False)
    bound, plan = choose_validated(make_policy("vllm"), workload, state)
    assert [(i.kind, i.request_id) for i in plan.intents] == [(IntentKind.PREEMPT_RECOMPUTE, "B")]
    assert plan.work == (), "A's row would need one of B's four pending rows"
    a = state.view("A")
    with_a = dataclasses.replace(plan, work=(make_work("A", 0, a.snapshot_version, 3, 4,
                                                       WorkKind.DECODE_ROW),),
                                 tokens_used=1, sequences_used=1)
    with pytest.raises(E.KvCapacityExceeded, match="READY release"):
        validate_plan(bound, state, with_a)


def test_a_memory_owner_that_releases_at_once_keeps_the_0x0d_decision() -> None:
    """0x0D's source-shaped FCFS: B releases four rows and A schedules one,
    in one plan (vLLM's scheduler frees synchronously)."""
    state, workload = _state(releases_at_once=True)
    _, plan = choose_validated(make_policy("vllm"), workload, state)
    assert [(w.request_id, w.start, w.end) for w in plan.work] == [("A", 3, 4)]


def test_inflight_release_keeps_the_victim_pending_and_ready_release_frees_it() -> None:
    state, workload = _state(releases_at_once=False)
    bound, plan = choose_validated(make_policy("vllm"), workload, state)
    inflight = _result(plan, state, (ReleaseResult(B_EPOCH_1, ForeignStatus.INFLIGHT),))
    validate_result(plan, state, inflight)
    pending = advance(state, plan, inflight)
    b = pending.view("B")
    assert (b.lifecycle, b.suspension_epoch, b.num_computed) == (Lifecycle.PREEMPT_PENDING, 1, 4)
    assert pending.suspended == ("B",) and pending.running == ("A",)
    assert pending.waiting == ("W",)

    # A waits again for B's rows: no second victim, no work, nothing admitted
    _, again = choose_validated(make_policy("vllm"), workload, pending)
    assert again.is_empty

    stale = _result(again, pending, (ReleaseResult(B_EPOCH_0, ForeignStatus.READY, 0),), free=4)
    with pytest.raises(E.UnmatchedRelease):
        validate_result(again, pending, stale)

    ready = _result(again, pending, (ReleaseResult(B_EPOCH_1, ForeignStatus.READY, 0),), free=4)
    validate_result(again, pending, ready)
    freed = advance(pending, again, ready)
    b = freed.view("B")
    assert (b.lifecycle, b.num_computed, b.num_emitted) == (Lifecycle.WAITING, 0, 2)
    assert freed.waiting[:2] == ("B", "W") and freed.suspended == ()
    assert freed.capacity.num_blocks_free == 4
    _, then = choose_validated(make_policy("vllm"), workload, freed)
    assert [(w.request_id, w.start, w.end) for w in then.work][0] == ("A", 3, 4)


def test_a_release_for_no_releasing_intent_is_refused() -> None:
    state, workload = _state(releases_at_once=False)
    _, plan = choose_validated(make_policy("vllm"), workload, state)
    a_binding = ForeignBinding("A", 0, snapshot_digest("A", 0, 2, 2), 1)
    forged = _result(plan, state, (ReleaseResult(a_binding, ForeignStatus.READY, 0),))
    with pytest.raises(E.UnmatchedRelease):
        validate_result(plan, state, forged)


def _lagged_run(lag: int, log=None):
    """A (p=2) alone at t=0, B (p=2) at t=1, five KV rows: B's growth
    preempts a request (0x0D self-preemption shape, FCFS)."""
    requests = [RequestSpec("A", 0.0, 2, 8), RequestSpec("B", 1.0, 2, 8)]
    manifest = manifest_of(requests, Capacity(max_num_batched_tokens=16, max_num_seqs=4,
                                              kv_rows=5), {"A": 3, "B": 3}, "release-lag")
    kv = KvResidency(BlockManagerConfig(5, 1), release_lag_iterations=lag)
    executor = SimulatedExecutor(manifest.hidden, kv=kv, workload=manifest.online)
    policy = make_policy("vllm")
    recorder = Recorder(bind_policy(manifest.online, policy))
    observers = [recorder]
    if log is not None:
        observers.append(DecisionLogWriter(log, bind_policy(manifest.online, policy),
                                           executor.capacity()))
    engine = Engine(manifest.online, policy, executor, observers)
    engine.run(max_iterations=100)
    assert engine.is_done and kv.manager.audit().num_blocks_used == 0
    assert not kv.has_pending_releases
    return recorder, {rid: (v.num_emitted, v.finish_reason) for rid, v in
                      recorder.steps[-1][3].views.items()}


def test_a_delayed_release_spans_iterations_and_the_run_ends_with_the_same_outputs(
        tmp_path) -> None:
    _, at_once = _lagged_run(0)
    path = tmp_path / "decisions.jsonl"
    with path.open("w") as log:
        recorder, lagged = _lagged_run(1, log)
    outputs = {rid: (3, at_once[rid][1]) for rid in at_once}
    assert lagged == at_once == outputs
    pending_cuts = [successor for _, _, _, successor in recorder.steps
                    if any(v.lifecycle is Lifecycle.PREEMPT_PENDING
                           for v in successor.views.values())]
    assert pending_cuts, "a preemption under a delayed release must pass through PREEMPT_PENDING"
    for cut in pending_cuts:  # a pending victim's rows are held, not published as free
        held = sum(cut.views[rid].num_computed for rid in (*cut.running, *cut.suspended))
        assert cut.capacity.num_blocks_free == 5 - held
        assert cut.capacity.releases_at_once is False
    assert main(["replay", str(path)]) == 0


# --- the victim record keeps its score inputs as fields (0x0C) --------------------------------
def test_the_victim_record_holds_its_score_inputs_and_tie_break_as_fields() -> None:
    from iterserve.records.codec import plan_from_json, plan_to_json
    from iterserve.records.preemption import PreemptionCause

    state, workload = _state(releases_at_once=True)
    _, plan = choose_validated(make_policy("vllm"), workload, state)
    (intent,) = plan.intents
    victim = intent.victim
    assert victim is not None
    # B is the tail (position 1 of the running queue [A, B]), arrived at 1.0, holds p + e - 1 = 4
    assert (victim.chooser, victim.queue_position, victim.queue_length, victim.priority,
            victim.arrival, victim.held_rows, victim.cause) == (
        "fcfs_victim", 1, 2, 0, 1.0, 4, PreemptionCause.KV_EXHAUSTED)
    assert victim.tie_break == (0, 1.0, 1)
    # the log's text is the one it wrote before the record had fields
    assert intent.reason == ("kv_exhausted; victim by fcfs_victim: queue_position=1/2, "
                             "priority=0, arrival=1.0, held_rows=4")
    assert plan_from_json(plan_to_json(plan)).intents == plan.intents


def test_a_priority_victim_names_its_chooser_and_the_least_favoured_priority() -> None:
    views = [decoding_view("A", 0, num_prompt=2, num_emitted=2, priority=10),
             decoding_view("B", 1, num_prompt=3, num_emitted=2, priority=1)]
    state = state_of(views, max_num_batched_tokens=16, max_num_seqs=8,
                     capacity=CapacityFacts(1, 7, 0))
    workload = workload_for(state, Capacity(max_num_batched_tokens=16, max_num_seqs=8))
    _, plan = choose_validated(make_policy("vllm-priority"), workload, state)
    victim = plan.intents[0].victim
    assert victim is not None
    assert (victim.chooser, victim.queue_position, victim.priority, victim.held_rows) == (
        "priority_victim", 0, 10, 3)


# --- the snapshot digest changes with the snapshot (0x0C) -------------------------------------
def test_the_snapshot_digest_is_the_semantic_snapshot_and_moves_with_each_output() -> None:
    import hashlib

    from iterserve.records.receipts import Staleness, binding_of, staleness

    view = decoding_view("B", 1, num_prompt=3, num_emitted=2)
    expected = hashlib.sha256(b"B\x000\x003\x002").hexdigest()
    assert binding_of(view).snapshot_digest == expected
    later = view._replace(num_emitted=3, num_computed=4 + 1, num_committed=4 + 1)
    assert staleness(binding_of(view), binding_of(later)) is Staleness.STALE_DIGEST
    # the ABA case: resumed without a new output, preempted again -> same digest, epoch decides
    again = view._replace(suspension_epoch=1)
    assert binding_of(again).snapshot_digest == expected
    assert staleness(binding_of(view), binding_of(again)) is Staleness.STALE_EPOCH
    # computed rows are not the logical state: a rebuild keeps the digest
    rebuilt = view._replace(num_computed=0, num_committed=0)
    assert binding_of(rebuilt) == binding_of(view)


def test_a_receipt_for_an_earlier_snapshot_of_the_same_epoch_settles_nothing() -> None:
    """At runtime: B preempted with its release in flight; a READY release
    bound to B's snapshot before its last output (same generation, same
    epoch 1, e = 1) is STALE_DIGEST and leaves B pending."""
    state, workload = _state(releases_at_once=False)
    _, plan = choose_validated(make_policy("vllm"), workload, state)
    pending = advance(state, plan, _result(plan, state, (
        ReleaseResult(B_EPOCH_1, ForeignStatus.INFLIGHT),)))
    _, again = choose_validated(make_policy("vllm"), workload, pending)
    older = ForeignBinding("B", 0, snapshot_digest("B", 0, 3, 1), 1)
    stale = _result(again, pending, (ReleaseResult(older, ForeignStatus.READY, 0),), free=4)
    with pytest.raises(E.UnmatchedRelease):
        validate_result(again, pending, stale)
    still = advance(pending, again, stale)  # unvalidated: the transition ignores it too
    assert still.view("B").lifecycle is Lifecycle.PREEMPT_PENDING
