"""Hypothesis: failed and planned work earn nothing (0x09A publication rule),
through ``iterserve simulate`` with injected execution failures."""

from __future__ import annotations

import tempfile
from pathlib import Path

from fairness_helpers import request, simulate, workload
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

_requests = st.lists(st.tuples(st.sampled_from("ABC"), st.integers(1, 6), st.integers(1, 4),
                               st.integers(0, 3)), min_size=1, max_size=8)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reqs=_requests, failures=st.lists(st.tuples(st.integers(0, 7), st.integers(0, 12)),
                                         max_size=6),
       policy=st.sampled_from(["vtc", "vtc-completed", "least-service"]))
def test_only_completed_work_moves_w_done(reqs, failures, policy) -> None:
    specs = [request(f"r{i}", client, arrival=arrival, prompt=p, max_out=o)
             for i, (client, p, o, arrival) in enumerate(reqs)]
    injected = sorted({(f"r{i % len(reqs)}", d) for i, d in failures})
    spec = workload("ledger-property", specs, max_num_batched_tokens=4, max_num_seqs=2,
                    fairness={"prompt_weight": 1, "output_weight": 2},
                    fixture_only_hidden_truth={"injected_failures": [
                        {"request_id": rid, "decision_id": d} for rid, d in injected]})
    with tempfile.TemporaryDirectory() as tmp:
        report = simulate(Path(tmp), spec, policy)
    failed_clients = {rid: specs[int(rid[1:])]["client_id"] for rid, _ in injected}
    for step in report["fairness"]["ledger_trace"]["decisions"]:
        hit = {failed_clients[rid] for rid in step["failed"]}
        for client, reserved in step["c_select_reserved"].items():
            before = step["w_done"].get(client, 0.0)
            after = step["w_done_after"].get(client, 0.0)
            if client not in hit:  # every selected interval completed: its predicted cost
                assert after - before == reserved - before
            assert before <= after <= reserved
        for client in set(step["w_done_after"]) - set(step["c_select_reserved"]):
            assert step["w_done_after"][client] == step["w_done"].get(client, 0.0)
    final = report["fairness"]["ledger_trace"]["decisions"][-1]["w_done_after"]
    assert final == {c: v["service"] for c, v in report["fairness"]["per_client"].items()
                     if v["service"]}
