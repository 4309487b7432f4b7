"""F59 on a real ``vtc`` run: for two clients f, g backlogged over [t1, t2],

    W_f(t1, t2) - W_g(t1, t2) = [c_f(t2) - c_g(t2)] - [c_f(t1) - c_g(t1)],

with the service W computed from the decision log's facts alone (the
plan's admissions, the result's completed intervals, the workload's client
ids and prompt lengths) and the counters c read from the run's ledger
trace. The log side is an independent count: per completed interval
[s, e) of a request with prompt length p, max(0, min(e, p) - s) prompt
rows at w_p and one output at w_q when the result marks it emitted (F52).
The budget never chunks a prompt, so a request's prompt completes in the
iteration it joins, where VTC charges w_p * p (Algorithm 2): the counter
increment is then the service the log shows. F60's 2U is checked beside it.
"""

from __future__ import annotations

import json
from itertools import combinations
from pathlib import Path

from fairness_helpers import request, simulate, workload

from iterserve.records.spec import FairnessSpec
from iterserve.sim.fairness_bound import vtc_charge_bound
from log_rows import as_rows

W_P, W_Q = 1, 2
A_JOBS = [(4, 3), (2, 1), (3, 2), (4, 1), (1, 3), (2, 2)]  # (prompt, outputs)
B_JOBS = [(3, 1), (1, 2), (4, 3), (2, 1)]


def _run(tmp: Path) -> tuple[dict, list[dict], dict]:  # type: ignore[type-arg]
    requests = [request(f"A{i}", "A", prompt=p, max_out=o) for i, (p, o) in enumerate(A_JOBS)]
    requests += [request(f"B{i}", "B", prompt=p, max_out=o) for i, (p, o) in enumerate(B_JOBS)]
    spec = workload("f59", requests, max_num_batched_tokens=16, max_num_seqs=2,
                    fairness={"prompt_weight": W_P, "output_weight": W_Q})
    spec["capacity"]["kv_rows"] = 64  # every running request at full length: no preemption
    log = tmp / "decisions.jsonl"
    report = simulate(tmp, spec, "vtc", "--decision-log", str(log))
    lines = [as_rows(json.loads(line)) for line in log.read_text().splitlines()]
    return report, [line for line in lines if line["type"] == "iteration"], spec


def _service_by_decision(iterations: list[dict], spec: dict) -> list[dict[str, int]]:  # type: ignore[type-arg]
    """Per decision: weighted service per client from the log's completed facts."""
    by_id = {r["request_id"]: r for r in spec["requests"]}
    out = []
    for line in iterations:
        service: dict[str, int] = {}
        for row in line["result"]["completed"]:
            rid, start, end, emitted = row["request_id"], row["start"], row["end"], row["emitted"]
            req = by_id[rid]
            cost = W_P * max(0, min(end, req["prompt_tokens"]) - start) + W_Q * emitted
            service[req["client_id"]] = service.get(req["client_id"], 0) + cost
        out.append(service)
    return out


def _last_live_decision(iterations: list[dict], spec: dict, client: str) -> int:  # type: ignore[type-arg]
    """The last decision whose input state holds a live request of ``client``
    (every request arrives at tick 0, so it is live until it finishes)."""
    finished = {}
    for line in iterations:
        for row in line["result"]["completed"]:
            if row["finish_reason"] is not None:
                finished[row["request_id"]] = line["decision_id"]
    return max(finished[r["request_id"]] for r in spec["requests"] if r["client_id"] == client)


def test_the_service_difference_is_the_counter_difference_over_every_backlogged_interval(
        tmp_path) -> None:
    report, iterations, spec = _run(tmp_path)
    assert report["fairness"]["bound"]["num_preemptions"] == 0
    assert all(len({row["request_id"] for row in line["result"]["completed"]}) ==
               len(line["result"]["completed"]) for line in iterations)
    trace = report["fairness"]["ledger_trace"]
    assert not trace["truncated"]
    counters = {entry["decision_id"]: entry["counters"] for entry in trace["decisions"]}
    decisions = [line["decision_id"] for line in iterations]
    assert decisions == list(range(len(decisions))) == sorted(counters)
    service = _service_by_decision(iterations, spec)
    # both clients hold a live request at every input state up to `last`: no lift in between
    last = min(_last_live_decision(iterations, spec, c) for c in ("A", "B"))
    assert last >= 4  # the fixture keeps both backlogged for several decisions
    _, two_u = vtc_charge_bound(FairnessSpec(W_P, W_Q), max_input_tokens=4, max_batch_tokens=64)
    checked = 0
    for t1, t2 in combinations(range(last + 1), 2):
        w = {c: sum(service[d].get(c, 0) for d in range(t1, t2)) for c in ("A", "B")}
        c1, c2 = counters[t1], counters[t2]
        endpoint = (c2.get("A", 0) - c2.get("B", 0)) - (c1.get("A", 0) - c1.get("B", 0))
        assert w["A"] - w["B"] == endpoint, (t1, t2, w, c1, c2)  # F59
        for client in ("A", "B"):  # each side: service is the counter increment
            assert w[client] == c2.get(client, 0) - c1.get(client, 0), (t1, t2, client)
        assert abs(w["A"] - w["B"]) <= two_u  # F60
        checked += 1
    assert checked == (last + 1) * last // 2


def test_an_interval_across_a_lift_breaks_the_per_client_identity(tmp_path) -> None:
    """The identity needs both clients backlogged: C arrives after A and B
    have run, and its lift to the minimum active counter moves c_C with no
    service in the log, so the count from the log and the counter increment
    differ over an interval that contains the lift."""
    requests = [request("A0", "A", prompt=4, max_out=6), request("B0", "B", prompt=4, max_out=6),
                request("C0", "C", arrival=3, prompt=2, max_out=1)]
    spec = workload("f59-lift", requests, max_num_batched_tokens=16, max_num_seqs=3,
                    fairness={"prompt_weight": W_P, "output_weight": W_Q})
    spec["capacity"]["kv_rows"] = 64
    log = tmp_path / "decisions.jsonl"
    report = simulate(tmp_path, spec, "vtc", "--decision-log", str(log))
    iterations = [as_rows(json.loads(line)) for line in log.read_text().splitlines()][1:]
    iterations = [line for line in iterations if line["type"] == "iteration"]
    counters = {e["decision_id"]: e["counters"] for e in report["fairness"]["ledger_trace"]
                ["decisions"]}
    service = _service_by_decision(iterations, spec)
    t2 = next(d for d in sorted(counters) if "C" in counters[d])
    w_c = sum(service[d].get("C", 0) for d in range(t2))
    assert w_c == 0 and counters[t2]["C"] > 0  # lifted to A's and B's counter, not served
