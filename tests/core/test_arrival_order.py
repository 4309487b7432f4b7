"""arrival_order: the FCFS rank every tie-break key and FCFS policy uses.

RequestView documents it as "the declared arrival rank"; refill admits "in
arrival order" and ORCA scans "in arrival order" (0x02, 0x03). A workload
file need not list requests in arrival order, so the rank must come from
the arrival times, not from the position in the file.
"""

from __future__ import annotations

import pytest

from iterserve.engine.loop import Engine
from iterserve.policies.registry import make_policy
from iterserve.records.workload import parse_workload
from iterserve.sim.factory import make_simulated_executor

from .helpers import Recorder


def _manifest(requests, **capacity):
    realized = {r["request_id"]: r.pop("realized") for r in requests}
    return parse_workload({
        "workload_id": "arrival-order", "clock": "iteration",
        "capacity": {"max_num_batched_tokens": 4, "max_num_seqs": 1, **capacity},
        "requests": requests,
        "fixture_only_hidden_truth": {"realized_output_tokens": realized},
    })


def _out_of_order():
    """File order X, Y, Z; arrival order Y (0), Z (3), X (5). One slot: Y runs
    to cut 8 while Z and X queue behind it."""
    return _manifest([
        {"request_id": "X", "arrival": 5, "prompt_tokens": 1, "max_output_tokens": 9, "realized": 2},
        {"request_id": "Y", "arrival": 0, "prompt_tokens": 1, "max_output_tokens": 9, "realized": 8},
        {"request_id": "Z", "arrival": 3, "prompt_tokens": 1, "max_output_tokens": 9, "realized": 2},
    ])


def _run(manifest, policy_name):
    recorder = Recorder()
    engine = Engine(manifest.online, make_policy(policy_name), make_simulated_executor(manifest),
                    [recorder])
    engine.run()
    return recorder


def _admission_order(recorder):
    order = []
    for _, plan, _, _ in recorder.steps:
        order += [i.request_id for i in plan.intents if i.kind.value == "admit"]
    return order


def test_in_order_file_admits_in_arrival_order():
    manifest = _manifest([
        {"request_id": "Y", "arrival": 0, "prompt_tokens": 1, "max_output_tokens": 9, "realized": 8},
        {"request_id": "Z", "arrival": 3, "prompt_tokens": 1, "max_output_tokens": 9, "realized": 2},
        {"request_id": "X", "arrival": 5, "prompt_tokens": 1, "max_output_tokens": 9, "realized": 2},
    ])
    assert _admission_order(_run(manifest, "refill")) == ["Y", "Z", "X"]


def test_arrival_order_ranks_by_arrival_time():
    recorder = _run(_out_of_order(), "refill")
    ranks = {}
    for state, _, _, _ in recorder.steps:
        ranks.update({rid: v.arrival_order for rid, v in state.views.items()})
    assert ranks == {"Y": 0, "Z": 1, "X": 2}


@pytest.mark.parametrize("policy_name", ["refill", "static", "orca"])
def test_fcfs_policies_admit_by_arrival_time(policy_name):
    """Z waited since cut 3, X since cut 5: FCFS admits Z first."""
    assert _admission_order(_run(_out_of_order(), policy_name)) == ["Y", "Z", "X"]


def test_orca_with_bounded_kv_does_not_stall_on_file_order():
    """With file-order ranks, ORCA's scan met the later-arriving waiting R
    (file index 0) before the running S, could not reserve R, broke, planned
    nothing and the engine stalled (EngineStalled)."""
    manifest = _manifest([
        {"request_id": "R", "arrival": 1, "prompt_tokens": 2, "max_output_tokens": 8, "realized": 3},
        {"request_id": "S", "arrival": 0, "prompt_tokens": 1, "max_output_tokens": 4, "realized": 4},
    ], max_num_seqs=2, kv_rows=10)
    recorder = _run(manifest, "orca")
    assert _admission_order(recorder) == ["S", "R"]
