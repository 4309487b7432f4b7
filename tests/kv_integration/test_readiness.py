"""Foreign readiness (0x09B, 0x0C): a request waiting for remote K/V is not
runnable until a READY fact for its current binding arrives; stale facts
(old generation or epoch) never schedule work."""

from __future__ import annotations

import pytest

from iterserve.admission.readiness import (
    ReadinessBoard,
    ReadinessFact,
    ReadinessKind,
    ReadinessRequirement,
    ReadinessStatus,
)
from iterserve.engine.loop import Engine, EngineStalled
from iterserve.engine.observer import EngineObserver
from iterserve.policies.registry import make_policy
from iterserve.records import Capacity, HiddenTruth, OnlineWorkload, RequestSpec, RequestView
from iterserve.records.receipts import ForeignBinding, binding_of, snapshot_digest
from iterserve.sim.executor import SimulatedExecutor

REMOTE = ReadinessRequirement(ReadinessKind.REMOTE_KV)


class _Scheduled(EngineObserver):
    def __init__(self) -> None:
        self.ids: set[str] = set()

    def on_step(self, state, plan, result, successor) -> None:  # type: ignore[no-untyped-def]
        self.ids.update(work.request_id for work in plan.work)


def _engine() -> Engine:
    requests = (RequestSpec("remote", 0.0, 4, 3), RequestSpec("local", 0.0, 4, 30))
    workload = OnlineWorkload("ready", "iteration", Capacity(16, 4), requests)
    hidden = HiddenTruth({"remote": 3, "local": 30})
    engine = Engine(workload, make_policy("vllm"), SimulatedExecutor(hidden), [_Scheduled()])
    engine.require("remote", [REMOTE])
    return engine


def _fact(generation: int, epoch: int, status: ReadinessStatus = ReadinessStatus.READY):
    binding = ForeignBinding("remote", generation, snapshot_digest("remote", generation, 4, 0), epoch)
    return ReadinessFact(ReadinessKind.REMOTE_KV, binding, status)


def _scheduled(engine: Engine, request_id: str, steps: int) -> bool:
    observer = engine.observers[0]
    assert isinstance(observer, _Scheduled)
    for _ in range(steps):
        engine.step()
    return request_id in observer.ids


def test_unready_request_waits_while_others_run() -> None:
    engine = _engine()
    assert not _scheduled(engine, "remote", 2)
    assert engine.state.views["remote"].is_ready is False


def test_fact_for_another_binding_never_schedules_work() -> None:
    engine = _engine()
    engine.publish_fact(_fact(1, 0))  # a later generation's receipt: not this binding
    assert not _scheduled(engine, "remote", 2)
    with pytest.raises(EngineStalled):  # once "local" ends nothing can make it runnable
        engine.run(max_iterations=200)


@pytest.mark.parametrize(("generation", "epoch"), [(0, 0), (1, 0), (1, 1)],
                         ids=["old-gen-and-epoch", "old-epoch", "current"])
def test_board_accepts_only_the_current_binding(generation: int, epoch: int) -> None:
    """An epoch-10-style receipt cannot satisfy a later epoch (0x0C Loop 9)."""
    board = ReadinessBoard()
    board.require("remote", [REMOTE])
    view = RequestView("remote", 1, 5, "c", 0, 0.0, 0, 4, 3, suspension_epoch=1)
    binding = ForeignBinding("remote", generation, snapshot_digest("remote", generation, 4, 0), epoch)
    board.publish(ReadinessFact(ReadinessKind.REMOTE_KV, binding, ReadinessStatus.READY))
    assert board.is_runnable(view) is ((generation, epoch) == (1, 1))


def test_pending_then_ready_fact_for_the_current_binding() -> None:
    engine = _engine()
    engine.publish_fact(_fact(0, 0, ReadinessStatus.PENDING))
    assert not _scheduled(engine, "remote", 1)
    engine.publish_fact(_fact(0, 0))  # READY for generation 0, epoch 0
    assert binding_of(engine.state.views["remote"]).suspension_epoch == 0
    assert _scheduled(engine, "remote", 1)
    engine.run(max_iterations=200)
    assert engine.is_done
