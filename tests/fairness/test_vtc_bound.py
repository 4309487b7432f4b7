"""VTC's conditional bound (F57-F60): the arithmetic, the report line, and a
Hypothesis property over workloads that meet the theorem's premises."""

from __future__ import annotations

import tempfile
from pathlib import Path

from fairness_helpers import request, simulate, workload
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from iterserve.records.spec import FairnessSpec
from iterserve.sim.fairness_bound import vtc_charge_bound

WEIGHTS = {"prompt_weight": 1, "output_weight": 2}
MAX_PROMPT, MAX_OUT = 8, 6


def test_u_and_2u_of_the_loop8_fixture_f57() -> None:
    assert vtc_charge_bound(FairnessSpec(1, 2), max_input_tokens=8, max_batch_tokens=4) == (8, 16)


def _premise_workload(a: list[tuple[int, int]], b: list[tuple[int, int]], seqs: int) -> dict:
    """Both clients backlogged from tick 0; memory M holds every running
    request at full length, so nothing is ever preempted."""
    requests = [request(f"A{i}", "A", prompt=p, max_out=o) for i, (p, o) in enumerate(a)]
    requests += [request(f"B{i}", "B", prompt=p, max_out=o) for i, (p, o) in enumerate(b)]
    spec = workload("vtc-premises", requests, max_num_batched_tokens=MAX_PROMPT * seqs,
                    max_num_seqs=seqs, fairness=WEIGHTS)
    spec["capacity"]["kv_rows"] = seqs * (MAX_PROMPT + MAX_OUT)
    return spec


_jobs = st.lists(st.tuples(st.integers(1, MAX_PROMPT), st.integers(1, MAX_OUT)),
                 min_size=1, max_size=12)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(a=_jobs, b=_jobs, seqs=st.integers(1, 4))
def test_vtc_service_difference_stays_within_2u_f60(a, b, seqs) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        report = simulate(Path(tmp), _premise_workload(a, b, seqs), "vtc")
    bound = report["fairness"]["bound"]
    assert bound["applies"] and bound["num_preemptions"] == 0
    assert bound["M"] == seqs * (MAX_PROMPT + MAX_OUT)
    assert bound["observed_max_gap"] == report["fairness"]["max_backlogged_gap"]["value"]
    assert bound["holds"], bound
    # one accounting: the state's W_done equals the event log's completed service
    trace = report["fairness"]["ledger_trace"]
    assert not trace["truncated"]
    final = trace["decisions"][-1]["w_done_after"]
    assert final == {c: v["service"] for c, v in report["fairness"]["per_client"].items()}


def test_fifo_on_the_same_premises_breaks_the_bound(tmp_path) -> None:
    # the property can fail: request FIFO serves every A job before B's
    spec = _premise_workload([(MAX_PROMPT, MAX_OUT)] * 12, [(1, 1)], seqs=1)
    fifo = simulate(tmp_path, spec, "refill")["fairness"]["max_backlogged_gap"]["value"]
    _, bound = vtc_charge_bound(FairnessSpec(1, 2), MAX_PROMPT, MAX_PROMPT + MAX_OUT)
    assert fifo > bound
    vtc = simulate(tmp_path, spec, "vtc")["fairness"]
    assert vtc["max_backlogged_gap"]["value"] <= vtc["bound"]["bound"] == bound


def test_report_md_prints_the_observed_gap_beside_the_bound(tmp_path) -> None:
    spec = _premise_workload([(4, 2)] * 3, [(2, 3)] * 2, seqs=2)
    report = simulate(tmp_path, spec, "vtc")
    text = (Path(report["_out"]) / "report.md").read_text()
    bound = report["fairness"]["bound"]
    assert f"declared bound ({bound['name']}): {bound['bound']:g}" in text
    assert f"observed max gap {bound['observed_max_gap']:g}" in text


def test_unbounded_memory_claims_no_bound(tmp_path) -> None:
    spec = workload("vtc-unbounded", [request("A0", "A"), request("B0", "B")],
                    fairness=WEIGHTS)
    bound = simulate(tmp_path, spec, "vtc")["fairness"]["bound"]
    assert bound["applies"] is False and bound["bound"] is None
