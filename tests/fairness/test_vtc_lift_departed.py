"""F56's other branch: a client that becomes active when no client is
active is lifted to the counter of the last client that left (VTC
Algorithm 2), not reset to zero and not left at its stored value."""

from __future__ import annotations

from fairness_helpers import request, simulate, workload

from iterserve.records.ledger import ClientLedger, lift
from iterserve.records.spec import FairnessSpec

WP1_WQ2 = {"prompt_weight": 1, "output_weight": 2}


def test_a_client_arriving_into_an_empty_active_set_takes_the_last_departed_counter(
        tmp_path) -> None:
    # A0: 2 prompt rows, 1 output. Joined at tick 0: 1 * 2 = 2; its prefill
    # emits the one output: + 2 -> 4; it finishes and A leaves. B0 arrives at
    # tick 5 into an empty active set: max(0, last departed 4) = 4.
    spec = workload("vtc-lift-departed", [request("A0", "A", prompt=2, max_out=1),
                                          request("B0", "B", arrival=5)],
                    max_num_batched_tokens=2, max_num_seqs=2, fairness=WP1_WQ2)
    trace = simulate(tmp_path, spec, "vtc")["fairness"]["ledger_trace"]["decisions"]
    assert trace[0]["counters_after"] == {"A": 4.0}
    b_first = next(step for step in trace if step["now"] >= 5)
    assert b_first["now"] == 5
    assert b_first["counters"] == {"A": 4.0, "B": 4.0}
    # B0 joins (1 row) and emits: 4 + 1 + 2
    assert b_first["counters_after"] == {"A": 4.0, "B": 7.0}


def test_lift_into_an_empty_active_set_uses_the_last_departed_and_never_lowers() -> None:
    ledger = ClientLedger(FairnessSpec(1, 2), counters={"A": 9.0, "B": 2.0, "C": 12.0},
                          last_departed=9.0)
    lifted = lift(ledger, active=set(), arriving=["B", "C", "D"], now=3.0)
    # B: max(2, 9) = 9 (nobody active yet: the last departed); then C and D
    # find B active: C keeps 12 > 9, D (never seen, 0) takes min(B, C) = 9
    assert dict(lifted.counters) == {"A": 9.0, "B": 9.0, "C": 12.0, "D": 9.0}
    assert dict(lifted.active_since) == {"B": 3.0, "C": 3.0, "D": 3.0}


def test_an_empty_history_lifts_to_zero() -> None:
    lifted = lift(ClientLedger(FairnessSpec(1, 2)), active=set(), arriving=["A"], now=0.0)
    assert dict(lifted.counters) == {"A": 0.0}
