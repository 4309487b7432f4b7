"""The run's state checker raises what ``validate_state`` raises: on every
negative state fixture, whether it starts fresh, has already passed the
valid state's views, or meets the fixture through a view delta (as a
transition makes it: only the listed views are re-read), and it stays exact
over a whole run: a corrupted running view, and a waiting queue with a
replaced view inside the run it keeps, an id listed twice or one missing."""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Callable
from typing import Any

import pytest

from iterserve.admission.overload import make_gate
from iterserve.cost import parse_cost_model
from iterserve.engine.observer import EngineObserver
from iterserve.policies.registry import policy_for
from iterserve.records import errors as E
from iterserve.records.plan import IterationPlan
from iterserve.records.result import IterationResult
from iterserve.records.state import SchedulerState
from iterserve.records.state_check import StateChecker
from iterserve.records.validate import validate_state
from iterserve.records.view import Lifecycle
from iterserve.records.view_delta import changes_since, next_delta
from iterserve.sim.generators import generate_workload
from iterserve.sim.report import RunConfig, run_simulation
from iterserve.sim.workload_spec import parse_spec

from .test_negative_fixtures import CASES, _base
from .test_state_digest_incremental import SPEC


def _state_makers() -> list[tuple[str, Callable[[Any], Any], type[Exception]]]:
    """The negative fixtures that mutate the state alone (``_state_case``)."""
    return [(name, check.__closure__[0].cell_contents, error) for name, check, error in CASES
            if check.__qualname__.startswith("_state_case.")]


def test_there_are_state_fixtures() -> None:
    assert len(_state_makers()) >= 3


@pytest.mark.parametrize(("make", "error"), [(m, e) for _, m, e in _state_makers()],
                         ids=[name for name, _, _ in _state_makers()])
@pytest.mark.parametrize("warm", [False, True, "linked"])
def test_the_checker_raises_what_validate_state_raises(make, error, warm: bool | str) -> None:
    base = _base()
    checker = StateChecker()
    if warm:
        checker.check(base.state)  # the unchanged views are remembered as passed
    bad = make(base)
    if warm == "linked":  # as a transition made it: only the listed views are re-read
        bad = _linked(base.state, bad)
        assert changes_since(base.state.views, bad.views, bad.view_delta) is not None
    with pytest.raises(E.ContractViolation) as expected:
        validate_state(bad)
    with pytest.raises(E.ContractViolation) as raised:
        checker.check(bad)
    assert type(raised.value) is type(expected.value) is error
    assert str(raised.value) == str(expected.value)


def _linked(state: SchedulerState, bad: SchedulerState) -> SchedulerState:
    """``bad`` with a view delta from ``state`` that lists every view it
    replaced or deleted, as a transition's would."""
    before, now = state.views, bad.views
    if now is before:
        return bad
    touched = [rid for rid, view in now.items() if before.get(rid) is not view]
    removed = [rid for rid in before if rid not in now]
    return dataclasses.replace(bad, view_delta=next_delta(state.view_delta, before, now,
                                                          touched, removed))


@dataclasses.dataclass
class _Corrupter(EngineObserver):
    """Checks each state with one warm checker, and a copy of it with one
    running view corrupted (committed != computed) that it must refuse."""

    checker: StateChecker = dataclasses.field(default_factory=StateChecker)
    num_refused: int = 0
    num_refused_waiting: int = 0

    def on_step(self, state: SchedulerState, plan: IterationPlan, result: IterationResult,
                successor: SchedulerState) -> None:
        self.checker.check(state)
        if state.running:
            rid = state.running[-1]
            view = state.views[rid]
            bad = dict(state.views)
            bad[rid] = view._replace(num_committed=view.num_computed + 1)
            with pytest.raises(E.UncommittedFrontier):
                self.checker.check(dataclasses.replace(state, views=bad))
            self.checker.check(state)
            with pytest.raises(E.UncommittedFrontier):  # listed by its delta
                self.checker.check(_linked(state, dataclasses.replace(state, views=bad)))
            self.num_refused += 1
        self.checker.check(state)  # a refusal forgets; the state passes again
        if len(state.waiting) >= 3:  # inside the run of waiting members it keeps
            self._refuse_waiting(state)
            self.num_refused_waiting += 1

    def _refuse_waiting(self, state: SchedulerState) -> None:
        middle = state.waiting[len(state.waiting) // 2]
        bad = dict(state.views)
        bad[middle] = state.views[state.running[0] if state.running else middle]._replace(
            request_id=middle, lifecycle=Lifecycle.RUNNING)
        with pytest.raises(E.QueueLifecycleMismatch):
            self.checker.check(dataclasses.replace(state, views=bad))
        self.checker.check(state)
        with pytest.raises(E.QueueLifecycleMismatch):
            self.checker.check(_linked(state, dataclasses.replace(state, views=bad)))
        self.checker.check(state)
        twice = (*state.waiting[1:], state.waiting[1])  # one id twice, the first in no queue
        with pytest.raises(E.DuplicateQueueMember):
            self.checker.check(dataclasses.replace(state, waiting=twice))
        self.checker.check(state)
        missing = state.waiting[:1] + state.waiting[2:]  # a view in no queue
        with pytest.raises(E.UnknownRequest):
            self.checker.check(dataclasses.replace(state, waiting=missing))
        self.checker.check(state)


def test_a_warm_checker_refuses_a_corrupted_view_at_every_decision_of_a_run() -> None:
    manifest = generate_workload(parse_spec(SPEC))
    model = parse_cost_model("linear:8,0.02,0.1")
    config = RunConfig(policy_for("vllm", manifest.online, cost_model=model), model,
                       make_gate("accept-all", {}))
    corrupter = _Corrupter()
    run = run_simulation(manifest, config, io.StringIO(), [corrupter])
    assert run.engine.is_done and corrupter.num_refused > 200
    assert corrupter.num_refused_waiting > 50
