"""The view deltas the transitions keep list every view they replace: over
a preempting, overloaded run, the ids :func:`changes_since` gives between
two decision states (several transitions apart) hold every id whose view
object differs and every id that left; a state whose views were swapped
under its delta, or a reader further behind than the links kept, gets None."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from iterserve.cost import parse_cost_model
from iterserve.engine.observer import EngineObserver
from iterserve.policies.registry import policy_for
from iterserve.records.plan import IterationPlan
from iterserve.records.result import IterationResult
from iterserve.records.state import SchedulerState
from iterserve.records.state_check import StateChecker
from iterserve.records.state_digest import StateDigester
from iterserve.records.view_delta import (
    MAX_LINKS,
    UNTRACKED,
    ViewDelta,
    changes_since,
    next_delta,
)
from iterserve.sim.follower import can_fork
from iterserve.sim.generators import generate_workload
from iterserve.sim.report import RunConfig, run_simulation
from iterserve.sim.workload_spec import parse_spec
from oracles.state_digest_reference import state_digest

from .test_state_digest_incremental import SPEC


@dataclasses.dataclass
class _DeltaChecker(EngineObserver):
    last: SchedulerState | None = None
    num_checked: int = 0
    num_changed: int = 0

    def on_step(self, state: SchedulerState, plan: IterationPlan, result: IterationResult,
                successor: SchedulerState) -> None:
        for cut in (state, successor):
            self._check(cut)

    def _check(self, state: SchedulerState) -> None:
        last = self.last
        self.last = state
        if last is None:
            return
        found = changes_since(last.views, state.views, state.view_delta)
        assert found is not None, "the links reach the last decision's views"
        ids, gone = found
        before, now = last.views, state.views
        changed = {rid for rid, view in now.items() if before.get(rid) is not view}
        left = set(before) - set(now)
        assert changed <= set(ids) and set(ids) <= set(now)
        assert left <= set(gone) and not set(gone) & set(now)
        assert len(ids) == len(set(ids))
        self.num_checked += 1
        self.num_changed += bool(changed)


def test_every_replaced_view_is_listed_over_a_run() -> None:
    manifest = generate_workload(parse_spec(SPEC))
    model = parse_cost_model("linear:8,0.02,0.1")
    checker = _DeltaChecker()
    run = run_simulation(manifest, RunConfig(policy_for("vllm", manifest.online,
                                                        cost_model=model), model), None,
                         [checker])
    assert run.engine.is_done and checker.num_checked > 200 and checker.num_changed > 100
    assert run.executor.kv is not None and run.executor.kv.stats().intents.get("preempt_recompute")


def _state_after(num_iterations: int) -> SchedulerState:
    manifest = generate_workload(parse_spec(SPEC))
    model = parse_cost_model("linear:8,0.02,0.1")
    config = RunConfig(policy_for("vllm", manifest.online, cost_model=model), model,
                       max_iterations=num_iterations)
    return run_simulation(manifest, config).engine.state


def test_swapped_views_or_a_reader_too_far_behind_get_none() -> None:
    state = _state_after(20)
    assert state.view_delta is not None and state.view_delta.views is state.views
    base = state.view_delta.base
    assert changes_since(base, state.views, state.view_delta) is not None
    assert changes_since(state.views, state.views, state.view_delta) == ([], [])
    swapped = dataclasses.replace(state, views=dict(state.views))
    assert changes_since(base, swapped.views, swapped.view_delta) is None
    assert changes_since(None, state.views, state.view_delta) is None
    assert changes_since({}, state.views, None) is None


def test_links_are_cut_to_half_when_full_and_reach_back_that_far() -> None:
    mappings = [{"r0": None}] + [{f"r{i}": None} for i in range(1, 3 * MAX_LINKS)]
    delta: ViewDelta | None = None
    for number in range(1, len(mappings)):
        delta = next_delta(delta, mappings[number - 1], mappings[number], [f"r{number}"],
                           [f"r{number - 1}"])
        assert delta.num_links <= MAX_LINKS
    assert delta is not None
    last = mappings[-1]
    # the newest MAX_LINKS // 2 links are always kept
    for back in range(1, MAX_LINKS // 2 + 1):
        ids, gone = changes_since(mappings[-1 - back], last, delta)  # type: ignore[misc]
        assert ids == [f"r{len(mappings) - 1}"]
        assert set(gone) == {f"r{len(mappings) - 1 - k}" for k in range(1, back + 1)}
    assert changes_since(mappings[0], last, delta) is None
    # a delta whose base is not the previous delta's mapping starts a new chain
    fresh = next_delta(delta, {"x": None}, {"y": None}, ["y"], ["x"])
    assert fresh.previous is None and fresh.num_links == 1


def test_the_same_question_gets_the_same_answer_and_another_a_new_one() -> None:
    state = _state_after(20)
    delta = state.view_delta
    assert delta is not None
    first = changes_since(delta.base, state.views, delta)
    assert first is not None and changes_since(delta.base, state.views, delta) is first
    if delta.previous is not None:
        further = changes_since(delta.previous.base, state.views, delta)
        assert further is not None and further is not first
        assert set(first[0]) <= set(further[0]) | set(further[1])


def test_an_untracked_state_hands_on_no_links_and_its_readers_reread_every_view() -> None:
    views = {"a": None}
    assert next_delta(UNTRACKED, {}, views, ["a"]) is UNTRACKED
    assert changes_since({}, views, UNTRACKED) is None
    assert changes_since(views, views, UNTRACKED) == ([], [])


@dataclasses.dataclass
class _UntrackedReader(EngineObserver):
    """In the run's process of a followed run: every state is untracked, and
    a digester and a state checker that read it anyway get the reference
    answers (every view re-read)."""

    digester: StateDigester = dataclasses.field(default_factory=StateDigester)
    checker: StateChecker = dataclasses.field(default_factory=StateChecker)
    num_steps: int = 0

    def on_step(self, state: SchedulerState, plan: IterationPlan, result: IterationResult,
                successor: SchedulerState) -> None:
        assert state.view_delta is UNTRACKED and successor.view_delta is UNTRACKED
        assert self.digester.digest(successor) == state_digest(successor)
        self.checker.check(successor)
        self.num_steps += 1


@pytest.mark.skipif(not can_fork(), reason="a followed run needs fork and two CPUs")
def test_the_run_of_a_followed_simulation_records_no_view_deltas(tmp_path: Path) -> None:
    manifest = generate_workload(parse_spec(SPEC))
    model = parse_cost_model("linear:8,0.02,0.1")
    config = RunConfig(policy_for("vllm", manifest.online, cost_model=model), model)
    reader = _UntrackedReader()
    with (tmp_path / "log.jsonl").open("w") as log:
        followed = run_simulation(manifest, config, log, [reader], log_process=True)
    assert reader.num_steps > 200 and followed.engine.is_done
    in_process = tmp_path / "in_process.jsonl"
    with in_process.open("w") as log:
        run_simulation(manifest, config, log)  # tracked: its digests read the deltas
    assert (tmp_path / "log.jsonl").read_bytes() == in_process.read_bytes()
