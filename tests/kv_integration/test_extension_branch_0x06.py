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

The wait has a declared bound, ``kv.extension_wait_max_iterations`` (N):
each plan that waits r0 lists it in ``release_waits`` and the state counts
the consecutive waits; a release that never lands leaves r0 waiting N plans,
then the next plan preempts it exactly as on FAILED, its victim record
naming ``extension_wait_bound`` and N; a release that lands after wait N-1
is published by wait N and r0 runs.
"""

from __future__ import annotations

import dataclasses
from typing import TextIO

import pytest

from iterserve.cli.main import main
from iterserve.engine.decision_log import DecisionLogWriter
from iterserve.engine.loop import Engine, bind_policy
from iterserve.kv import (
    BlockManager,
    BlockManagerConfig,
    ExtensionResult,
    ExtensionStatus,
    RequestKey,
)
from iterserve.policies.registry import make_policy
from iterserve.records import Capacity, RequestSpec
from iterserve.records import errors as E
from iterserve.records.plan import IntentKind
from iterserve.records.preemption import PreemptionCause
from iterserve.records.spec import (
    DEFAULT_EXTENSION_WAIT_MAX_ITERATIONS,
    HiddenTruth,
    KvSpec,
    OnlineWorkload,
    WorkloadManifest,
)
from iterserve.records.validate import validate_plan
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


def _engine(pending: bool, bound: int = DEFAULT_EXTENSION_WAIT_MAX_ITERATIONS,
            log: TextIO | None = None) -> tuple[Engine, object]:
    """The fixture after r0's prefill; ``bound``: the run's
    ``kv.extension_wait_max_iterations``; ``log``: a decision log to write."""
    requests = (RequestSpec("r0", 0.0, 4, 6),)
    kv = KvSpec(num_kv_blocks=4, block_size=4, bytes_per_row=8,
                extension_wait_max_iterations=bound)
    online = OnlineWorkload("extension", "iteration", Capacity(16, 4), requests, kv=kv)
    executor = make_simulated_executor(WorkloadManifest(online, HiddenTruth({"r0": 6})))
    policy = make_policy("vllm")
    observers = [] if log is None else [
        DecisionLogWriter(log, bind_policy(online, policy), executor.capacity())]
    engine = Engine(online, policy, executor, observers)
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


# --- the wait's bound (kv.extension_wait_max_iterations) ------------------------------------
def _wait_out(engine: Engine, steps: _Steps, num_waits: int) -> None:
    """The step the allocator answers TEMPORARILY_UNAVAILABLE (its plan read
    stale facts), then ``num_waits`` plans that wait r0 with no victim."""
    assert engine.step()
    assert [f.reason for f in steps.steps[-1][1].failures] == ["extension_temporarily_unavailable"]
    for wait in range(1, num_waits + 1):
        assert engine.step()
        plan, _, successor = steps.steps[-1]
        assert plan.is_empty and plan.release_waits == ("r0",)
        assert successor.release_waits == {"r0": wait}
        assert successor.running == ("r0",)


@pytest.mark.parametrize("bound", [1, 3])
def test_a_release_that_never_lands_preempts_after_exactly_the_bound(bound: int) -> None:
    engine, _ = _engine(pending=True, bound=bound)
    steps = _watch(engine)
    _wait_out(engine, steps, bound)
    assert engine.step()  # waited the bound: FAILED, the shared preemption step
    plan, _, successor = steps.steps[-1]
    assert [(i.kind, i.request_id) for i in plan.intents] == [
        (IntentKind.PREEMPT_RECOMPUTE, "r0")]
    assert not plan.release_waits and not successor.release_waits
    assert successor.waiting == ("r0",)
    victim = plan.intents[0].victim
    assert victim is not None and victim.cause is PreemptionCause.EXTENSION_WAIT_BOUND
    assert victim.release_waits == bound
    assert plan.intents[0].reason.startswith("extension_wait_bound; victim by ")
    assert plan.intents[0].reason.endswith(f"; release_waits={bound}")
    # exactly the preemption FAILED runs: the same victim, kind and score inputs
    failed_engine, _ = _engine(pending=False)
    failed_steps = _watch(failed_engine)
    assert failed_engine.step() and failed_engine.step()
    failed_plan = failed_steps.steps[-1][0]
    assert [i.kind for i in failed_plan.intents] == [i.kind for i in plan.intents]
    assert failed_plan.intents[0].victim == dataclasses.replace(
        victim, cause=PreemptionCause.KV_EXHAUSTED, release_waits=None)


def test_a_release_that_lands_before_the_bound_runs_without_a_victim() -> None:
    bound = 3
    engine, executor = _engine(pending=True, bound=bound)
    steps = _watch(engine)
    _wait_out(engine, steps, bound - 1)
    executor.kv.manager.release(F)  # the release lands after wait N-1
    assert engine.step()  # wait N: its facts predate the release, which it publishes
    plan, _, successor = steps.steps[-1]
    assert plan.release_waits == ("r0",) and successor.release_waits == {"r0": bound}
    assert successor.capacity.num_blocks_free == 3
    assert successor.capacity.num_blocks_pending_release == 0
    assert engine.step()  # granted: r0 runs, no victim
    plan, result, successor = steps.steps[-1]
    assert not plan.intents and not plan.release_waits and not successor.release_waits
    assert [(c.request_id, c.start, c.end) for c in result.completed] == [("r0", 4, 5)]
    while engine.step():
        assert not steps.steps[-1][0].intents
    assert steps.steps[-1][2].views["r0"].num_emitted == 6  # it ran to its end


def test_a_plan_that_waits_past_the_bound_is_refused() -> None:
    engine, _ = _engine(pending=True, bound=2)
    steps = _watch(engine)
    _wait_out(engine, steps, 2)
    state = steps.steps[-1][2]
    assert engine.step()
    preempting = steps.steps[-1][0]
    assert preempting.intents
    forged = dataclasses.replace(preempting, intents=(), release_waits=("r0",))
    with pytest.raises(E.IllegalIntent, match="extension_wait_max_iterations=2"):
        validate_plan(engine.bound_workload, state, forged)


def test_the_waits_and_the_bound_replay_bit_for_bit(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "decisions.jsonl"
    with path.open("w") as log:
        engine, _ = _engine(pending=True, bound=2, log=log)
        for _ in range(4):  # TEMPORARILY_UNAVAILABLE, two waits, the bound's preemption
            assert engine.step()
        engine.observers[0].close(engine.state, is_done=False)
    text = path.read_text()
    assert text.count('"release_waits":["r0"]') == 2
    assert '"extension_wait_max_iterations":2' in text  # the header's workload declares it
    assert "extension_wait_bound; victim by " in text and "; release_waits=2" in text
    assert main(["replay", str(path)]) == 0, capsys.readouterr().err
    edited = tmp_path / "edited.jsonl"
    edited.write_text(text.replace('"release_waits":["r0"],', "", 1))
    capsys.readouterr()
    assert main(["replay", str(edited)]) == 2
    assert "differs" in capsys.readouterr().err


def test_the_bound_is_declared_and_checked() -> None:
    assert KvSpec(4).extension_wait_max_iterations == DEFAULT_EXTENSION_WAIT_MAX_ITERATIONS
    for bad in (0, -1, True, 2.0, (1 << 20) + 1):
        with pytest.raises(ValueError, match="^kv.extension_wait_max_iterations must be"):
            KvSpec(4, extension_wait_max_iterations=bad)  # type: ignore[arg-type]
