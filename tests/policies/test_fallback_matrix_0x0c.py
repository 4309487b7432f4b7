"""0x0C's fallback matrix on the runtime path: a FAILED preservation takes
the run's declared fallback (``kv.preservation_fallback``), never "ready".

Fixture (0x0D's, in swap mode): zero free rows, running [A, B]; B (p=3,
e=2) holds T_target = 4 rows; FCFS preempts B by preservation, which fails.
By hand, from the matrix:

- recompute: B at the front of waiting, computed 0, epoch 1; its next
  interval is the rebuild [0, 4);
- remain_suspended: B stays in the suspended queue as SUSPENDED_RECOMPUTE,
  computed 0, epoch 1; a resume pass brings it back with the rebuild [0, 4);
- abort: B is ABORTED (terminal, finish reason abort).
"""

from __future__ import annotations

import dataclasses

import pytest
from policy_helpers import choose_validated, decoding_view, state_of, waiting_view

from iterserve.engine.kv_residency import KvResidency
from iterserve.engine.loop import Engine
from iterserve.engine.observer import EngineObserver
from iterserve.kv.config import BlockManagerConfig
from iterserve.policies.registry import make_policy
from iterserve.records.plan import IntentKind
from iterserve.records.preemption import FallbackMode, PreemptionMode
from iterserve.records.receipts import ForeignStatus, PreservationResult, binding_of
from iterserve.records.result import CompletedInterval, IterationResult, WorkFailure
from iterserve.records.spec import Capacity, HiddenTruth, KvSpec, OnlineWorkload, RequestSpec
from iterserve.records.state import CapacityFacts, RunRules
from iterserve.records.transition import advance
from iterserve.records.validate import validate_result, validate_state
from iterserve.records.view import FinishReason, Lifecycle, WorkKind
from iterserve.sim.executor import SimulatedExecutor


def _setup(fallback: FallbackMode):
    views = [decoding_view("A", 0, num_prompt=2, num_emitted=2),
             decoding_view("B", 1, num_prompt=3, num_emitted=2),
             waiting_view("W", 2, num_prompt=1)]
    state = state_of(views, max_num_batched_tokens=16, max_num_seqs=8,
                     capacity=CapacityFacts(1, 7, 0))
    requests = tuple(RequestSpec(v.request_id, v.arrival, v.num_prompt_tokens,
                                 v.max_output_tokens) for v in views)
    kv = KvSpec(7, 1, 7, preemption_mode=PreemptionMode.SWAP, preservation_fallback=fallback)
    workload = OnlineWorkload("fallback", "iteration", Capacity(16, 8), requests, kv=kv)
    bound, plan = choose_validated(make_policy("vllm"), workload, state)
    assert [(i.kind, i.request_id) for i in plan.intents] == [
        (IntentKind.PREEMPT_PRESERVE_EXACT, "B")]
    return dataclasses.replace(state, rules=RunRules.of(workload)), workload, plan


def _after_failed_swap(fallback: FallbackMode):
    state, workload, plan = _setup(fallback)
    result = IterationResult(plan.decision_id, plan.input_state_version, tuple(
        _decode_a(plan)), failures=(WorkFailure("B", 0, "swap_out_failed:no_host_blocks"),),
        service={"client": 1}, capacity=CapacityFacts(1, 7, 4))
    validate_result(plan, state, result)
    successor = advance(state, plan, result)
    validate_state(successor)
    return successor, workload


def _decode_a(plan):
    return [CompletedInterval(w.request_id, w.generation, w.start, w.end, True, 7)
            for w in plan.work]


def test_recompute_fallback_rebuilds_from_the_front_of_waiting() -> None:
    successor, _ = _after_failed_swap(FallbackMode.RECOMPUTE)
    b = successor.view("B")
    assert (b.lifecycle, b.num_computed, b.suspension_epoch) == (Lifecycle.WAITING, 0, 1)
    assert successor.waiting[0] == "B" and "B" not in successor.suspended


def test_remain_suspended_fallback_keeps_it_suspended_until_a_resume_rebuilds_it() -> None:
    successor, workload = _after_failed_swap(FallbackMode.REMAIN_SUSPENDED)
    b = successor.view("B")
    assert (b.lifecycle, b.num_computed, b.suspension_epoch) == (
        Lifecycle.SUSPENDED_RECOMPUTE, 0, 1)
    assert successor.suspended == ("B",) and "B" not in successor.waiting
    roomy = dataclasses.replace(successor, capacity=CapacityFacts(1, 64, 60))
    _, plan = choose_validated(make_policy("vllm"), workload, roomy)
    assert (IntentKind.RESUME, "B") in [(i.kind, i.request_id) for i in plan.intents]
    rebuild = next(w for w in plan.work if w.request_id == "B")
    assert (rebuild.start, rebuild.end, rebuild.kind) == (0, 4, WorkKind.REBUILD)


def test_abort_fallback_ends_the_request() -> None:
    successor, _ = _after_failed_swap(FallbackMode.ABORT)
    b = successor.view("B")
    assert (b.lifecycle, b.finish_reason) == (Lifecycle.ABORTED, FinishReason.ABORT)
    assert successor.finished == ("B",)
    assert "B" not in (*successor.waiting, *successor.running, *successor.suspended)


@pytest.mark.parametrize(("fallback", "lifecycle"), [
    (FallbackMode.RECOMPUTE, Lifecycle.WAITING),
    (FallbackMode.REMAIN_SUSPENDED, Lifecycle.SUSPENDED_RECOMPUTE),
    (FallbackMode.ABORT, Lifecycle.ABORTED)])
def test_a_failed_receipt_after_an_inflight_one_takes_the_same_fallback(fallback,
                                                                        lifecycle) -> None:
    state, _, plan = _setup(fallback)
    binding = binding_of(state.view("B"), 1)
    inflight = IterationResult(plan.decision_id, plan.input_state_version,
                               tuple(_decode_a(plan)), service={"client": 1},
                               receipts=(PreservationResult(binding, ForeignStatus.INFLIGHT),))
    validate_result(plan, state, inflight)
    pending = advance(state, plan, inflight)
    assert pending.view("B").lifecycle is Lifecycle.PREEMPT_PENDING
    empty = dataclasses.replace(plan, decision_id=pending.decision_id, work=(), intents=(),
                                input_state_version=pending.state_version, tokens_used=0,
                                sequences_used=0)
    failed = IterationResult(empty.decision_id, empty.input_state_version, (),
                             receipts=(PreservationResult(binding, ForeignStatus.FAILED),))
    validate_result(empty, pending, failed)
    settled = advance(pending, empty, failed)
    validate_state(settled)
    b = settled.view("B")
    assert b.lifecycle is lifecycle
    assert b.lifecycle is Lifecycle.ABORTED or b.num_computed == 0


@pytest.mark.parametrize("fallback", list(FallbackMode))
def test_an_engine_run_whose_swaps_fail_follows_the_declared_fallback(fallback) -> None:
    """No host blocks: every preservation fails. A (p=2) at t=0, B (p=2) at
    t=1, five KV rows, both asked for 8 outputs (3 realized): B's growth
    preempts. Recompute and remain-suspended finish both requests with
    their 3 outputs; abort ends the victim ABORTED."""
    requests = (RequestSpec("A", 0.0, 2, 8), RequestSpec("B", 1.0, 2, 8))
    kv = KvSpec(5, 1, 0, preemption_mode=PreemptionMode.SWAP, preservation_fallback=fallback)
    workload = OnlineWorkload("swap-fails", "iteration", Capacity(16, 4), requests, kv=kv)
    residency = KvResidency(BlockManagerConfig(5, 1, 0))
    executor = SimulatedExecutor(HiddenTruth({"A": 3, "B": 3}), kv=residency, workload=workload)
    ends: dict[str, tuple[int, FinishReason | None]] = {}

    class _Ends(EngineObserver):
        def on_step(self, state, plan, result, successor) -> None:  # type: ignore[no-untyped-def]
            ends.update((rid, (v.num_emitted, v.finish_reason))
                        for rid, v in successor.views.items())

    engine = Engine(workload, make_policy("vllm"), executor, [_Ends()])
    engine.run(max_iterations=200)
    assert engine.is_done and residency.manager.audit().num_blocks_used == 0
    stats = residency.stats().intents
    assert stats.get("preempt_preserve", 0) >= 1 and stats.get("preserve_fallback_recompute", 0) >= 1
    if fallback is FallbackMode.ABORT:
        assert FinishReason.ABORT in {reason for _, reason in ends.values()}
    else:
        assert ends == {"A": (3, FinishReason.STOP), "B": (3, FinishReason.STOP)}
