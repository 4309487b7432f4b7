"""0x01A: a selected row binds its readiness dependencies. "remote" waits on
a REMOTE_KV fact; once the fact is READY for its binding (generation 0,
snapshot digest of (remote, 0, p=4), epoch 0) the plan that selects it
names that fact, bound to that binding; "local" waits on nothing and names
none. A plan whose row names a fact for another binding, or names
dependencies for a row it does not select, is refused."""

from __future__ import annotations

import dataclasses

import pytest

from iterserve.admission.readiness import (
    ReadinessFact,
    ReadinessKind,
    ReadinessRequirement,
    ReadinessStatus,
)
from iterserve.engine.loop import Engine
from iterserve.engine.observer import EngineObserver
from iterserve.policies.registry import make_policy
from iterserve.records import Capacity, HiddenTruth, OnlineWorkload, RequestSpec
from iterserve.records.dependencies import ReadinessDependency
from iterserve.records.errors import NotReady
from iterserve.records.receipts import ForeignBinding, snapshot_digest
from iterserve.records.validate import validate_plan
from iterserve.sim.executor import SimulatedExecutor

WORKLOAD = OnlineWorkload("ready", "iteration", Capacity(16, 4),
                          (RequestSpec("remote", 0.0, 4, 3), RequestSpec("local", 0.0, 4, 3)))
BINDING = ForeignBinding("remote", 0, snapshot_digest("remote", 0, 4, 0), 0)  # by hand


class _Plans(EngineObserver):
    def __init__(self) -> None:
        self.steps: list = []  # type: ignore[type-arg]

    def on_step(self, state, plan, result, successor) -> None:  # type: ignore[no-untyped-def]
        self.steps.append((state, plan))


def _run() -> _Plans:
    plans = _Plans()
    engine = Engine(WORKLOAD, make_policy("vllm"), SimulatedExecutor(
        HiddenTruth({"remote": 3, "local": 3})), [plans])
    engine.require("remote", [ReadinessRequirement(ReadinessKind.REMOTE_KV)])
    engine.step()  # remote is not ready: only local runs
    engine.publish_fact(ReadinessFact(ReadinessKind.REMOTE_KV, BINDING, ReadinessStatus.READY))
    engine.run(max_iterations=20)
    assert engine.is_done
    return plans


def test_every_row_of_the_waiting_request_names_the_fact_it_depends_on() -> None:
    plans = _run()
    first, *later = plans.steps
    assert {w.request_id for w in first[1].work} == {"local"} and not first[1].dependencies
    selected = [plan for _, plan in later if any(w.request_id == "remote" for w in plan.work)]
    assert len(selected) == 3  # prefill emits output 1, then two decode rows
    # the admitting row consumes the fact; the decode rows after it run on
    # what was admitted (the snapshot, and its digest, moved with each output)
    assert selected[0].dependencies == (("remote", (ReadinessDependency("remote_kv", None,
                                                                        BINDING),)),)
    assert [plan.dependencies for plan in selected[1:]] == [(), ()]


def test_a_dependency_for_another_binding_or_an_unselected_row_is_refused() -> None:
    state, plan = next((s, p) for s, p in _run().steps if p.dependencies)
    validate_plan(WORKLOAD, state, plan)
    stale = ForeignBinding("remote", 0, BINDING.snapshot_digest, 1)  # a later epoch's fact
    forged = dataclasses.replace(plan, dependencies=(
        ("remote", (ReadinessDependency("remote_kv", None, stale),)),))
    with pytest.raises(NotReady, match="its binding is"):
        validate_plan(WORKLOAD, state, forged)
    stray = dataclasses.replace(plan, dependencies=plan.dependencies + (
        ("nobody", (ReadinessDependency("remote_kv", None, BINDING),)),))
    with pytest.raises(NotReady, match="does not select"):
        validate_plan(WORKLOAD, state, stray)
