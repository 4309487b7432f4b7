"""0x06's runtime extension branch: growing a running request's blocks is
answered GRANTED, TEMPORARILY_UNAVAILABLE (short now, but blocks whose
release is in flight cover it) or FAILED, and the engine acts on each:
GRANTED runs the rows, TEMPORARILY_UNAVAILABLE waits holding the blocks (no
victim), FAILED leads the next plan to a preemption intent.

Hand-derived fixture (block size 4, 4 device blocks): r0 (prompt 4) holds
1 block after its prefill. A foreign owner then takes the 3 other blocks
(e.g. a transfer into the pool) after the capacity facts were published,
so the plan schedules r0's decode row 4, which opens a 2nd block: needed 1,
available 0. If the foreign blocks' release is in flight, 3 are pending:
1 <= 0 + 3, TEMPORARILY_UNAVAILABLE; if not, 0 pending: FAILED.
"""

from __future__ import annotations

import pytest

from iterserve.engine.loop import Engine
from iterserve.kv import (
    BlockManager,
    BlockManagerConfig,
    ExtensionResult,
    ExtensionStatus,
    RequestKey,
)
from iterserve.policies.registry import make_policy
from iterserve.records import Capacity, RequestSpec
from iterserve.records.plan import IntentKind
from iterserve.records.spec import HiddenTruth, KvSpec, OnlineWorkload, WorkloadManifest
from iterserve.sim.factory import make_simulated_executor

A, B, F = RequestKey("a", 0), RequestKey("b", 0), RequestKey("foreign", 0)


def test_the_allocator_answers_each_branch_with_its_counts() -> None:
    manager = BlockManager(BlockManagerConfig(4, 4, 0, True))
    manager.allocate(A, num_rows=4)
    shared = list(range(8))
    manager.allocate(F, shared + [1, 2, 3, 4])  # 3 blocks
    manager.commit(F, 12)
    manager.allocate(B, shared[:4] + [9])  # not allowed: no free block left
    assert not manager.is_resident(B)
    assert manager.extension_status(A, 5) == ExtensionResult(A, ExtensionStatus.FAILED, 1, 0, 0)
    manager.begin_release(F)
    assert manager.num_blocks_pending_release == 3
    answer = manager.extend(A, 5)
    assert answer == ExtensionResult(A, ExtensionStatus.TEMPORARILY_UNAVAILABLE, 1, 0, 3)
    assert answer.failure_reason == "extension_temporarily_unavailable"
    assert manager.num_rows(A) == 4  # nothing changed
    assert manager.extend(A, 4).status is ExtensionStatus.GRANTED  # no new block needed
    manager.release(F)  # the release completes: its 3 blocks are available (cached, evictable)
    assert manager.num_blocks_pending_release == 0
    granted = manager.extend(A, 9)  # rows 4..8: 2 new blocks of the 3 available
    assert granted == ExtensionResult(A, ExtensionStatus.GRANTED, 2, 3, 0)
    assert len(manager.block_table(A)) == 3
    manager.audit()


def test_a_block_shared_with_a_live_request_is_not_pending() -> None:
    manager = BlockManager(BlockManagerConfig(4, 4, 0, True))
    tokens = list(range(8))
    manager.allocate(F, tokens)
    manager.commit(F, 8)  # 2 cached-identity blocks
    manager.allocate(B, tokens[:4] + [9])  # shares F's first block, 1 fresh
    manager.begin_release(F)
    assert manager.num_blocks_pending_release == 1  # only F's second block returns
    with pytest.raises(Exception, match="holds no blocks"):
        manager.begin_release(RequestKey("nobody", 0))


def _engine(pending: bool) -> tuple[Engine, object]:
    requests = (RequestSpec("r0", 0.0, 4, 6),)
    kv = KvSpec(num_kv_blocks=4, block_size=4, bytes_per_row=8)
    online = OnlineWorkload("extension", "iteration", Capacity(16, 4), requests, kv=kv)
    executor = make_simulated_executor(WorkloadManifest(online, HiddenTruth({"r0": 6})))
    engine = Engine(online, make_policy("vllm"), executor)
    assert engine.step()  # r0's prefill [0, 4): one block
    manager = executor.kv.manager
    manager.allocate(F, num_rows=12)  # the foreign owner takes the other 3 blocks
    if pending:
        manager.begin_release(F)
    return engine, executor


class _Steps:
    def __init__(self) -> None:
        self.steps: list = []  # type: ignore[type-arg]

    def on_step(self, state, plan, result, successor) -> None:  # type: ignore[no-untyped-def]
        self.steps.append((plan, result, successor))


def _watch(engine: Engine) -> _Steps:
    steps = _Steps()
    engine.observers.append(steps)  # type: ignore[arg-type]
    return steps


def test_temporarily_unavailable_waits_holding_the_blocks_then_runs() -> None:
    engine, executor = _engine(pending=True)
    steps = _watch(engine)
    assert engine.step()  # decode row 4 was planned on the stale facts: the allocator waits it
    plan, result, successor = steps.steps[-1]
    assert [(w.request_id, w.start, w.end) for w in plan.work] == [("r0", 4, 5)]
    assert [(f.request_id, f.reason) for f in result.failures] == [
        ("r0", "extension_temporarily_unavailable")]
    assert successor.capacity.num_blocks_free == 0
    assert successor.capacity.num_blocks_pending_release == 3
    assert engine.step()  # the next plan waits too: no work, and no victim
    plan, result, successor = steps.steps[-1]
    assert plan.is_empty and not plan.intents
    assert successor.running == ("r0",) and successor.views["r0"].num_computed == 4
    executor.kv.manager.release(F)  # the release completes
    assert engine.step()  # an empty plan again (its facts predate the release) publishes it
    assert steps.steps[-1][2].capacity.num_blocks_free == 3
    assert engine.step()  # granted now
    plan, result, _ = steps.steps[-1]
    assert [(c.request_id, c.start, c.end) for c in result.completed] == [("r0", 4, 5)]
    assert not result.failures


def test_failed_leads_the_next_plan_to_a_preemption_intent() -> None:
    engine, executor = _engine(pending=False)
    steps = _watch(engine)
    assert engine.step()
    plan, result, successor = steps.steps[-1]
    assert [(f.request_id, f.reason) for f in result.failures] == [("r0", "extension_failed")]
    assert successor.capacity.num_blocks_pending_release == 0
    assert engine.step()  # no block will come back: the shared preemption step acts
    plan, _, successor = steps.steps[-1]
    assert [(i.kind, i.request_id) for i in plan.intents] == [
        (IntentKind.PREEMPT_RECOMPUTE, "r0")]
    assert successor.waiting == ("r0",)
