"""Which checks an engine runs: ``validate`` (plans before they run, results
before they advance the state) and ``check_states`` (each decision's state,
``validate_state``; by default as ``validate``). A followed simulation
checks its states in the follower (tests/lab/test_follower.py)."""

from __future__ import annotations

import dataclasses

import pytest

from iterserve.engine import loop
from iterserve.engine.loop import Engine
from iterserve.policies.registry import make_policy
from iterserve.records.errors import UnknownRequest
from iterserve.records.workload import parse_workload
from iterserve.sim.factory import make_simulated_executor


def _manifest():
    requests = [{"request_id": f"r{i}", "arrival": i, "prompt_tokens": 3,
                 "max_output_tokens": 6} for i in range(4)]
    return parse_workload({
        "workload_id": "checks", "clock": "iteration",
        "capacity": {"max_num_batched_tokens": 16, "max_num_seqs": 4},
        "requests": requests,
        "fixture_only_hidden_truth": {"realized_output_tokens": {
            r["request_id"]: 6 for r in requests}},
    })


@pytest.fixture
def broken_states(monkeypatch) -> None:
    """From decision 3 on, the transition leaves a running id out of every queue."""
    real = loop.advance

    def broken(state, plan, result):  # type: ignore[no-untyped-def]
        successor = real(state, plan, result)
        if successor.decision_id != 3 or not successor.running:
            return successor
        return dataclasses.replace(successor, running=successor.running[1:])

    monkeypatch.setattr(loop, "advance", broken)


def _run(**checks: bool) -> Engine:
    manifest = _manifest()
    engine = Engine(manifest.online, make_policy("vllm"), make_simulated_executor(manifest),
                    **checks)
    engine.run()
    return engine


@pytest.mark.parametrize("checks", [{}, {"validate": True}, {"validate": False,
                                                                 "check_states": True}])
def test_a_broken_state_is_refused_where_states_are_checked(broken_states, checks) -> None:
    with pytest.raises(UnknownRequest, match="a view belongs to no queue"):
        _run(**checks)


@pytest.mark.parametrize("checks", [{"validate": False}, {"check_states": False}])
def test_no_state_check_where_none_is_asked_for(broken_states, checks) -> None:
    engine = _run(**checks)  # nothing checked the states: the dropped request is lost
    state = engine.state
    listed = {*state.waiting, *state.running, *state.suspended, *state.finished}
    assert state.decision_id > 3 and set(state.views) - listed


def test_the_checks_do_not_change_a_valid_run() -> None:
    runs = [_run(validate=v, check_states=c) for v in (True, False) for c in (True, False)]
    assert len({(run.num_iterations, run.state.now) for run in runs}) == 1
