"""Hypothesis: failed and planned work earn nothing (0x09A publication rule),
through ``iterserve simulate`` with injected execution failures.

The expectation is computed here, from the decision log alone, by the
spec's rule (F52, F53, 0x0C) walked request by request: a completed
interval before the first output earns w_p per row, plus w_q when it
reaches the prompt length (the first output); a decode row [p+e-1, p+e)
earns w_q; a rebuild interval earns nothing; a failed work item completes
nothing. The product's per-decision W_done (the client ledger) and the
C_select reservations must equal it.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from fairness_helpers import request, simulate, workload
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from log_rows import as_rows

W_P, W_Q = 1.0, 2.0

_requests = st.lists(st.tuples(st.sampled_from("ABC"), st.integers(1, 6), st.integers(1, 4),
                               st.integers(0, 3)), min_size=1, max_size=8)


def interval_worth(prompt: int, emitted: int, start: int, end: int) -> tuple[float, bool]:
    """(weighted service, emits) of [start, end) at ``emitted`` outputs so far."""
    if emitted == 0:  # prefill: every row is new input work
        reaches = end == prompt
        return W_P * (end - start) + (W_Q if reaches else 0.0), reaches
    if start == prompt + emitted - 1 and end == start + 1:  # ordinary decode row
        return W_Q, True
    return 0.0, False  # rebuild after preemption: recomputed rows, no output


def oracle_steps(log: Path) -> dict[int, tuple[dict[str, float], dict[str, float], set[str]]]:
    """Per decision: (W_done gained, predicted cost of the plan's work, failed
    request ids), per client, from the log's plans and completed intervals."""
    lines = [as_rows(json.loads(line)) for line in log.read_text().splitlines()]
    requests = {r["request_id"]: r for r in lines[0]["workload"]["requests"]}
    emitted = dict.fromkeys(requests, 0)
    steps = {}
    for line in lines[1:]:
        if line.get("type") != "iteration":
            continue
        failed = {failure["request_id"] for failure in line["result"]["failures"]}
        predicted: dict[str, float] = {}
        for item in line["plan"]["work"]:
            spec = requests[item["request_id"]]
            worth, _ = interval_worth(spec["prompt_tokens"], emitted[item["request_id"]],
                                      item["start"], item["end"])
            predicted[spec["client_id"]] = predicted.get(spec["client_id"], 0.0) + worth
        gained: dict[str, float] = {}
        for item in line["result"]["completed"]:
            rid = item["request_id"]
            assert rid not in failed  # a failed item completes nothing
            spec = requests[rid]
            worth, emits = interval_worth(spec["prompt_tokens"], emitted[rid], item["start"],
                                          item["end"])
            assert item["emitted"] is emits
            emitted[rid] += emits
            gained[spec["client_id"]] = gained.get(spec["client_id"], 0.0) + worth
        steps[line["decision_id"]] = (gained, predicted, failed)
    return steps


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reqs=_requests, failures=st.lists(st.tuples(st.integers(0, 7), st.integers(0, 12)),
                                         max_size=6),
       policy=st.sampled_from(["vtc", "vtc-completed", "least-service"]),
       kv_rows=st.sampled_from([None, 10]))
def test_only_completed_work_moves_w_done(reqs, failures, policy, kv_rows) -> None:
    specs = [request(f"r{i}", client, arrival=arrival, prompt=p, max_out=o)
             for i, (client, p, o, arrival) in enumerate(reqs)]
    injected = sorted({(f"r{i % len(reqs)}", d) for i, d in failures})
    spec = workload("ledger-property", specs, max_num_batched_tokens=4, max_num_seqs=2,
                    fairness={"prompt_weight": W_P, "output_weight": W_Q},
                    fixture_only_hidden_truth={"injected_failures": [
                        {"request_id": rid, "decision_id": d} for rid, d in injected]})
    if kv_rows is not None:  # the longest request fits alone: preemption, then rebuilds
        spec["capacity"]["kv_rows"] = kv_rows
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "decisions.jsonl"
        report = simulate(Path(tmp), spec, policy, "--decision-log", str(log))
        expected = oracle_steps(log)
    trace = report["fairness"]["ledger_trace"]
    assert not trace["truncated"]
    totals: dict[str, float] = {}
    for step in trace["decisions"]:
        gained, predicted, failed = expected[step["decision_id"]]
        assert sorted(failed) == step["failed"]
        for client in set(step["w_done_after"]) | set(gained):
            before = step["w_done"].get(client, 0.0)
            assert step["w_done_after"].get(client, 0.0) - before == gained.get(client, 0.0)
            totals[client] = totals.get(client, 0.0) + gained.get(client, 0.0)
        # C_select: W_done plus the predicted cost of the client's selected work
        assert {c: v - step["w_done"].get(c, 0.0)
                for c, v in step["c_select_reserved"].items()} == predicted
    per_client = {c: v["service"] for c, v in report["fairness"]["per_client"].items()
                  if v["service"]}
    assert per_client == {c: v for c, v in totals.items() if v}
