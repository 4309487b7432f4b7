"""0x0C resume tickets on the runtime path (the simulated executor here; the
torch executor's slow tests in tests/engine_model/test_engine_preemption.py
hold the same through the shared KV residency).

Every resume (a RESUME of a preserved request, the ADMIT of a recompute
victim back in waiting) is granted by ``derive_resume_ticket`` from the
intent and its receipts. By the spec's rule the rebuild interval is
[T_ready, T_target) with T_target = p + e - 1 of the victim when it was
preempted: exact preservation rebuilds nothing, recompute rebuilds all of
it, and the rebuilt rows are exactly the REBUILD rows the plans ran.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from iterserve.engine.kv_residency import KvResidency
from iterserve.engine.loop import Engine
from iterserve.engine.observer import EngineObserver
from iterserve.kv.config import BlockManagerConfig
from iterserve.policies.registry import make_policy
from iterserve.records.plan import IntentKind, IterationPlan, QueueIntent
from iterserve.records.preemption import PreemptionMode
from iterserve.records.state import RunRules
from iterserve.records.view import Lifecycle
from iterserve.records.workload import load_workload
from iterserve.sim.executor import SimulatedExecutor

SMALL_KV = Path(__file__).resolve().parents[2] / "examples" / "small_kv.json"
BYTES_PER_ROW = 131072  # small_kv's kv.bytes_per_row


class _Targets(EngineObserver):
    """T_target of each victim when preempted (p + e - 1, or the rows a
    prompt had computed when cut mid-prefill), and the rows computed again
    below a recompute victim's T_target afterwards (REBUILD rows, or prefill
    rows of a prompt cut mid-prefill)."""

    def __init__(self) -> None:
        self.targets: list[int] = []
        self.rebuilt_rows = 0
        self.released_rows = 0
        self._debt: dict[str, int] = {}

    def on_step(self, state, plan, result, successor) -> None:  # type: ignore[no-untyped-def]
        for item in result.completed:
            debt = self._debt.get(item.request_id, 0)
            self.rebuilt_rows += max(0, min(item.end, debt) - item.start)
        for intent in plan.intents:
            if intent.kind in (IntentKind.PREEMPT_RECOMPUTE, IntentKind.PREEMPT_PRESERVE_EXACT,
                               IntentKind.ABORT, IntentKind.REJECT):
                self.released_rows += state.views[intent.request_id].num_computed
            if intent.kind in (IntentKind.PREEMPT_RECOMPUTE, IntentKind.PREEMPT_PRESERVE_EXACT):
                view = state.views[intent.request_id]
                target = (view.num_prompt_tokens + view.num_emitted - 1 if view.num_emitted
                          else view.num_computed)
                self.targets.append(target)
                if intent.kind is IntentKind.PREEMPT_RECOMPUTE:
                    self._debt[intent.request_id] = target


def _run(mode: str):
    manifest = load_workload(SMALL_KV)
    spec = manifest.online.kv
    assert spec is not None
    online = dataclasses.replace(manifest.online, kv=dataclasses.replace(
        spec, preemption_mode=PreemptionMode(mode)))
    assert spec.bytes_per_row == BYTES_PER_ROW
    kv = KvResidency(BlockManagerConfig(spec.num_kv_blocks, spec.block_size,
                                        spec.num_host_blocks), bytes_per_row=BYTES_PER_ROW)
    watch = _Targets()
    engine = Engine(online, make_policy("vllm"), SimulatedExecutor(
        manifest.hidden, kv=kv, workload=online), [watch])
    engine.run(max_iterations=10_000)
    assert engine.is_done
    return kv, watch


@pytest.mark.parametrize("mode", ["recompute", "swap"])
def test_every_resume_is_ticketed_with_the_legal_rebuild_interval(mode) -> None:
    kv, watch = _run(mode)
    tickets = kv.suspensions.tickets
    assert tickets and kv.suspensions.num_blocked == 0
    assert sorted(t.semantic_target_tokens for t in tickets) == sorted(watch.targets)
    for ticket in tickets:
        expected_ready = 0 if mode == "recompute" else ticket.semantic_target_tokens
        assert ticket.rebuild_interval == (expected_ready, ticket.semantic_target_tokens)
        assert "release" in ticket.matched_receipts
    assert kv.suspensions.recompute_overhead_tokens == watch.rebuilt_rows
    stats = kv.stats()
    assert (stats.num_resume_tickets, stats.recompute_overhead_tokens) == (
        len(tickets), watch.rebuilt_rows)
    # every row a victim or an ended request held is released once, at the declared bytes per row
    assert stats.reclaimed_bytes == watch.released_rows * BYTES_PER_ROW


def test_a_resume_without_a_ready_release_is_refused_as_a_fact() -> None:
    """Release in flight -> no resume ticket (0x0C's eighth contract): the
    resume's memory action fails, naming the blocker."""
    manifest = load_workload(SMALL_KV)
    spec = manifest.online.kv
    assert spec is not None
    kv = KvResidency(BlockManagerConfig(spec.num_kv_blocks, spec.block_size, 0),
                     release_lag_iterations=5)
    executor = SimulatedExecutor(manifest.hidden, kv=kv, workload=manifest.online)
    engine = Engine(manifest.online, make_policy("vllm"), executor)
    while not any(engine.state.views[rid].lifecycle is Lifecycle.PREEMPT_PENDING
                  for rid in engine.state.suspended):
        engine.step()
    state = engine.state
    rid = next(r for r in state.suspended
               if state.views[r].lifecycle is Lifecycle.PREEMPT_PENDING)
    view = state.views[rid]
    forged = dict(state.views) | {rid: view._replace(lifecycle=Lifecycle.SUSPENDED_RECOMPUTE)}
    forged_state = dataclasses.replace(state, views=forged, rules=RunRules())
    plan = IterationPlan(state.decision_id, state.state_version, "vllm", "x", (), 0, 0,
                         intents=(QueueIntent(IntentKind.RESUME, rid, view.generation),))
    outcome = kv.apply_intents(plan, forged_state)
    assert outcome.failures == ((rid, "no_resume_ticket:release_inflight"),)


@pytest.mark.parametrize("policy", ["vllm", "vllm-priority", "sarathi-serve", "edf",
                                    "least-slack", "orca", "vtc", "mlfq"])
@pytest.mark.parametrize("mode", ["recompute", "swap"])
def test_under_a_delayed_release_no_validated_plan_counts_pending_blocks(policy, mode) -> None:
    """Every plan is validated against the published free blocks alone (the
    engine validates each one: a plan that counted a PREEMPT_PENDING
    victim's blocks raises KvCapacityExceeded); the run still finishes,
    every resume is ticketed and nothing leaks."""
    manifest = load_workload(SMALL_KV)
    spec = manifest.online.kv
    assert spec is not None
    online = dataclasses.replace(manifest.online, kv=dataclasses.replace(
        spec, preemption_mode=PreemptionMode(mode)))
    kv = KvResidency(BlockManagerConfig(spec.num_kv_blocks, spec.block_size,
                                        spec.num_host_blocks), release_lag_iterations=2)
    engine = Engine(online, make_policy(policy), SimulatedExecutor(
        manifest.hidden, kv=kv, workload=online))
    engine.run(max_iterations=20_000)
    assert engine.is_done and kv.manager.audit().num_blocks_used == 0
    assert not kv.has_pending_releases and kv.suspensions.num_blocked == 0


def test_a_delayed_release_is_announced_as_pending_release() -> None:
    """The KV residency's INFLIGHT releases are the allocator's releases in
    flight: the capacity facts count their blocks as pending (0x06's
    TEMPORARILY_UNAVAILABLE branch can then happen in a run) until the
    READY receipt frees them."""
    manifest = load_workload(SMALL_KV)
    spec = manifest.online.kv
    assert spec is not None
    kv = KvResidency(BlockManagerConfig(spec.num_kv_blocks, spec.block_size,
                                        spec.num_host_blocks), release_lag_iterations=2)
    online = dataclasses.replace(manifest.online, kv=dataclasses.replace(
        spec, preemption_mode=PreemptionMode("recompute")))
    engine = Engine(online, make_policy("vllm", reserve_full_isl=0), SimulatedExecutor(
        manifest.hidden, kv=kv, workload=online))
    pending = []
    while engine.step():
        pending.append(engine.state.capacity.num_blocks_pending_release)
    assert max(pending) > 0 and pending[-1] == 0
    assert kv.manager.audit().num_blocks_used == 0
