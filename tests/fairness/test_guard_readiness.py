"""F63 excludes clients blocked on foreign readiness: a client whose only
request waits for remote K/V is not ready scheduler work (0x09A, 0x0C), so
the starvation guard counts its eligible stretch from when it is unblocked,
not from its arrival.

Fixture (0x09A's aging trace, one sequence, one row per tick): "low"
(priority 4) arrives at tick 0 but needs a REMOTE_KV fact, published READY
at tick 6; a "high" request (priority 0) arrives every tick. Static
priority never picks "low"; under the guard with horizon 4, worked by hand:
blocked through the decision at tick 5, eligible from tick 6, so unserved
for 4 at tick 10: forced at 10, its output at 11. Counting the blocked
ticks as eligible would force it at tick 6, the moment it is unblocked.
"""

from __future__ import annotations

from fairness_helpers import run_blocked_low

from iterserve.engine.loop import Engine
from iterserve.policies.registry import bind_fairness, make_policy
from iterserve.records.ledger import ClientLedger, blocked_clients, charge, lift
from iterserve.records.spec import FairnessSpec
from iterserve.records.view import RequestView
from iterserve.sim.ledger_trace import LedgerTrace


def _run(ready_at: float) -> tuple[Engine, LedgerTrace]:
    policy = bind_fairness(make_policy("priority"), FairnessSpec(starvation_horizon=4))
    trace = LedgerTrace()
    return run_blocked_low("guard-readiness", policy, [trace], ready_at), trace


def test_the_guard_counts_eligibility_from_the_end_of_the_block() -> None:
    engine, trace = _run(ready_at=6)
    low = [f for f in trace.guard_firings if f["request_id"] == "low"]
    assert [(f["now"], f["intent"]) for f in low] == [(10.0, "admit")]
    assert low[0]["reason"].startswith("starvation_guard: client low unserved for 4 ")
    assert engine.state.views.get("low") is None  # finished and retired


def test_an_unblocked_client_is_guarded_as_before() -> None:
    # ready from the start: eligible from arrival, forced at tick 4 (the
    # existing aging-trace expectation)
    _, trace = _run(ready_at=0)
    assert [f["now"] for f in trace.guard_firings if f["request_id"] == "low"] == [4.0]


def _view(rid: str, client: str, ready: bool) -> RequestView:
    return RequestView(rid, 0, 0, client, 0, 0.0, 0, 4, 2, is_ready=ready)


def test_blocked_clients_are_those_with_no_ready_live_request() -> None:
    views = {"a": _view("a", "A", False), "b1": _view("b1", "B", False),
             "b2": _view("b2", "B", True), "c": _view("c", "C", True)}
    assert blocked_clients(views, views) == {"A"}
    assert blocked_clients(views, ["b1"]) == {"B"}


def test_the_ledger_moves_eligibility_past_a_block_and_past_an_idle_gap() -> None:
    ledger = ClientLedger(FairnessSpec(), active_since={"A": 0.0, "B": 0.0})
    after = charge(ledger, [], {"A", "B"}, {"A", "B"}, now=3.0, blocked=["A"])
    assert dict(after.eligible_from) == {"A": 3.0} and after.blocked == {"A"}
    assert after.unserved_for("A", 5.0) == 2.0 and after.unserved_for("B", 5.0) == 5.0
    # the clock jumps to 9 with arrivals and no decision in between: A stayed blocked
    jumped = lift(after, {"A", "B"}, ["C"], now=9.0)
    assert jumped.unserved_for("A", 9.0) == 0.0
    # unblocked at the next decision: the stretch runs from 9
    served = charge(jumped, [], {"A", "B", "C"}, {"A", "B", "C"}, now=10.0)
    assert served.blocked == frozenset() and served.unserved_for("A", 12.0) == 3.0
    # a client that leaves drops its stretch (it restarts at its next arrival)
    gone = charge(after, [], {"A", "B"}, {"B"}, now=4.0)
    assert dict(gone.eligible_from) == {}


def test_a_ledger_never_blocked_writes_the_json_it_always_did() -> None:
    ledger = charge(ClientLedger(FairnessSpec()), [], {"A"}, {"A"}, now=1.0)
    assert "eligible_from" not in ledger.to_json() and "blocked" not in ledger.to_json()
    blocked = charge(ledger, [], {"A"}, {"A"}, now=2.0, blocked=["A"])
    assert blocked.to_json()["eligible_from"] == {"A": 2.0}
