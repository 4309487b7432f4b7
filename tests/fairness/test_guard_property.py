"""Hypothesis: under the starvation guard with horizon H (iteration clock),
no client stays backlogged without a completed event for more than H + 1
ticks (the forced interval completes one iteration after the guard fires),
whatever the policy, while every client can be given a slot at once."""

from __future__ import annotations

import tempfile
from pathlib import Path

from fairness_helpers import request, simulate, workload
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

_jobs = st.lists(st.tuples(st.sampled_from("ABC"), st.integers(1, 6), st.integers(1, 4),
                           st.integers(0, 10), st.integers(0, 3)), min_size=2, max_size=14)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs=_jobs, horizon=st.integers(2, 5),
       policy=st.sampled_from(["priority", "refill", "least-service", "mlfq", "vtc-completed"]))
def test_guard_bounds_every_unserved_stretch(jobs, horizon, policy) -> None:
    specs = [request(f"r{i}", client, arrival=arrival, prompt=p, max_out=o, priority=prio)
             for i, (client, p, o, arrival, prio) in enumerate(jobs)]
    spec = workload("guard-property", specs, max_num_batched_tokens=16, max_num_seqs=3)
    with tempfile.TemporaryDirectory() as tmp:
        report = simulate(Path(tmp), spec, policy, "--starvation-horizon", str(horizon))
    for client, entry in report["fairness"]["per_client"].items():
        assert entry["longest_unserved_s"] <= horizon + 1, (client, entry)
