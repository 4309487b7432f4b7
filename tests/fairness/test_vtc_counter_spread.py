"""F58: VTC's counter spread max_i c_i - min_i c_i <= U over active clients
while the queue is nonempty (U of F57 from the run's own L_input and M).

The expectations are worked by hand from 0x09A's charging rules (w_p x
prompt at join, w_q per output, the lift), and FIFO on the same workload
shows the measure can exceed U.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from fairness_helpers import request, simulate, workload
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from iterserve.records.ledger import ClientLedger, counter_spread
from iterserve.records.spec import FairnessSpec

WEIGHTS = {"prompt_weight": 1, "output_weight": 2}
MAX_PROMPT, MAX_OUT = 8, 6


def _premises(a: list[tuple[int, int]], b: list[tuple[int, int]], seqs: int,
              **fairness: float) -> dict:
    """Both clients backlogged from tick 0; the pool holds every running
    request at full length (no preemption): M = seqs * (8 + 6) rows."""
    requests = [request(f"A{i}", "A", prompt=p, max_out=o) for i, (p, o) in enumerate(a)]
    requests += [request(f"B{i}", "B", prompt=p, max_out=o) for i, (p, o) in enumerate(b)]
    spec = workload("vtc-spread", requests, max_num_batched_tokens=MAX_PROMPT * seqs,
                    max_num_seqs=seqs, fairness={**WEIGHTS, **fairness})
    spec["capacity"]["kv_rows"] = seqs * (MAX_PROMPT + MAX_OUT)
    return spec


def test_counter_spread_is_max_minus_min_over_the_named_clients() -> None:
    ledger = ClientLedger(FairnessSpec(), counters={"A": 10.0, "B": 3.0, "C": 25.0})
    assert counter_spread(ledger, {"A", "B"}) == 7.0
    assert counter_spread(ledger, {"A", "B", "C"}) == 22.0
    assert counter_spread(ledger, {"A", "D"}) == 10.0  # D never charged: 0
    assert counter_spread(ledger, {"A"}) == 0.0


def test_the_widest_spread_of_a_worked_vtc_run() -> None:
    # A: three (8 prompt, 6 out); B: two (1, 1); budget 16 rows, 2 sequences.
    # tick 0: A and B at 0; A (name order) joins A0 (+8), then B (0 < 8)
    #         joins B0 (+1); A0's 8-row prefill emits (+2), so does B0's -> A 10, B 3
    # tick 1: spread 7 with A1, A2, B1 waiting; B (3 < 10) joins B1 (+1, emits
    #         +2), A0 decodes (+2) -> A 12, B 6: spread 6; then B has left
    spec = _premises([(8, 6)] * 3, [(1, 1)] * 2, seqs=2)
    with tempfile.TemporaryDirectory() as tmp:
        report = simulate(Path(tmp), spec, "vtc")["fairness"]
    widest = report["ledger_trace"]["max_counter_spread"]
    assert (widest["value"], widest["decision_id"]) == (7.0, 1)
    assert widest["counters"] == {"A": 10.0, "B": 3.0}
    # U = max(1 * 8, 2 * 28) = 56 for L_input 8 and M = 2 * 14 rows
    assert report["bound"]["U"] == 56.0
    assert report["bound"]["observed_max_counter_spread"] == 7.0
    assert report["bound"]["spread_holds"] is True


def test_report_md_prints_the_widest_spread_beside_u(tmp_path) -> None:
    report = simulate(tmp_path, _premises([(8, 6)] * 3, [(1, 1)] * 2, seqs=2), "vtc")
    text = (Path(report["_out"]) / "report.md").read_text()
    assert "(F58, max c_i - min c_i <= U=56): 7" in text


_jobs = st.lists(st.tuples(st.integers(1, MAX_PROMPT), st.integers(1, MAX_OUT)),
                 min_size=1, max_size=12)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(a=_jobs, b=_jobs, seqs=st.integers(1, 4))
def test_vtc_counter_spread_stays_within_u_f58(a, b, seqs) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        report = simulate(Path(tmp), _premises(a, b, seqs), "vtc")["fairness"]
    u = max(1 * max(p for p, _ in a + b), 2 * seqs * (MAX_PROMPT + MAX_OUT))  # F57 by hand
    widest = report["ledger_trace"]["max_counter_spread"]
    if widest is not None:
        assert widest["value"] <= u
        assert widest["value"] == max(widest["counters"].values()) - min(
            widest["counters"].values())
    assert report["bound"]["U"] == u


def test_fifo_on_the_same_premises_exceeds_u(tmp_path) -> None:
    # request FIFO (refill) keeps the ledger only under the starvation guard;
    # a horizon past the run's end never fires, so FIFO's decisions are
    # unchanged. Twelve A jobs of (8, 6), one B job, one sequence, weights
    # 1 and 1: U = max(1 * 8, 1 * 14) = 14. FIFO admits A0..A11 first: before
    # B0 runs, A's counter passes 14 while B waits at 0.
    spec = _premises([(MAX_PROMPT, MAX_OUT)] * 12, [(1, 1)], seqs=1, prompt_weight=1,
                     output_weight=1, starvation_horizon=10_000)
    fifo = simulate(tmp_path, spec, "refill")["fairness"]["ledger_trace"]["max_counter_spread"]
    assert fifo["value"] > 14
    assert fifo["counters"]["B"] == 0.0
    spec["fairness"].pop("starvation_horizon")
    vtc = simulate(tmp_path, spec, "vtc")["fairness"]
    assert vtc["ledger_trace"]["max_counter_spread"]["value"] <= 14 == vtc["bound"]["U"]
