"""Layer-wise residency (0x09B, F64) and the simulated layer pipeline: every
figure below is worked by hand.

The pipeline fixture: 4 layers of 1 ms compute, layer 0 resident, layers
1-3 offloaded with 1.5 ms transfers on one link, the iteration at t=0.
Deadlines (planned starts) 0, 1, 2, 3 ms. Layer 1's prefetch is issued at 0
(when layer 0 starts) and lands at 1.5: it starts at 1.5 (0.5 late, 0.5
stall), ends 2.5. Layer 2's is issued at 1.5 (link free, layer 1 started)
and lands at 3.0: starts 3.0 (1.0 late, 0.5 stall), ends 4.0. Layer 3's is
issued at 3.0 and lands at 4.5: starts 4.5 (1.5 late, 0.5 stall), ends 5.5.
Delay 5.5 - 4 = 1.5 ms. Transfers [0,1.5], [1.5,3], [3,4.5] overlap the
compute [0,1], [1.5,2.5], [3,4] for 3 of their 4.5 ms."""

from __future__ import annotations

import pytest

from iterserve.admission.layer_residency import (
    LayerFact,
    LayerStatus,
    gpu_resident_bytes,
    is_eligible,
    readiness_deadlines,
)
from iterserve.sim.layer_pipeline import run_layer_pipeline, summarize

MS = 1e-3
READY, INFLIGHT, MISS = LayerStatus.READY, LayerStatus.INFLIGHT, LayerStatus.MISS


def test_f64_counts_only_resident_layers_of_every_request() -> None:
    """r1: 4 layers of 1000 B, two READY; r2: 4 layers of 300 B, three READY
    and one INFLIGHT: M_GPU = 2*1000 + 3*300 = 2900 (a full-stack ledger
    would say 4*1000 + 4*300 = 5200)."""
    facts = [LayerFact("r1", 0, READY, 1000), LayerFact("r1", 1, READY, 1000),
             LayerFact("r1", 2, INFLIGHT, 1000, 0.5), LayerFact("r1", 3, MISS, 1000),
             *(LayerFact("r2", layer, READY, 300) for layer in range(3)),
             LayerFact("r2", 3, INFLIGHT, 300, 0.25)]
    assert gpu_resident_bytes(facts) == 2900


def test_a_miss_or_an_unreported_layer_makes_the_request_ineligible() -> None:
    ready = [LayerFact("r", layer, READY, 1) for layer in range(3)]
    assert is_eligible(ready, 3)
    assert is_eligible([*ready[:2], LayerFact("r", 2, INFLIGHT, 1, 9.0)], 3)
    assert not is_eligible([*ready[:2], LayerFact("r", 2, MISS, 1)], 3)
    assert not is_eligible(ready[:2], 3)


def test_readiness_deadlines_are_the_planned_layer_starts() -> None:
    """Compute 2, 1, 3 ms from t=10 ms: deadlines 10, 12, 13 ms; layer 2
    predicted at 14 ms is 1 ms late, layer 1 predicted at 11 ms is on time."""
    facts = [LayerFact("r", 0, READY, 1), LayerFact("r", 1, INFLIGHT, 1, 11 * MS),
             LayerFact("r", 2, INFLIGHT, 1, 14 * MS)]
    deadlines = readiness_deadlines(facts, 10 * MS, [2 * MS, 1 * MS, 3 * MS])
    assert [d.deadline_s for d in deadlines] == pytest.approx([10 * MS, 12 * MS, 13 * MS])
    assert [d.predicted_lateness_s for d in deadlines] == pytest.approx([0, 0, 1 * MS])
    with pytest.raises(ValueError, match="eligible"):
        readiness_deadlines([*facts[:2], LayerFact("r", 2, MISS, 1)], 0.0, [1, 1, 1])


def test_fact_fields_are_checked() -> None:
    with pytest.raises(ValueError, match="INFLIGHT"):
        LayerFact("r", 0, INFLIGHT, 1)
    with pytest.raises(ValueError, match="INFLIGHT"):
        LayerFact("r", 0, READY, 1, 0.5)
    with pytest.raises(ValueError, match=">= 0"):
        LayerFact("r", -1, READY, 1)


def test_the_pipeline_waits_for_each_layer_and_measures_its_lateness() -> None:
    run = run_layer_pipeline(0.0, [1 * MS] * 4, [0.0, 1.5 * MS, 1.5 * MS, 1.5 * MS])
    got = [(t.deadline_s, t.ready_s, t.start_s, t.finish_s, t.stall_s, t.lateness_s)
           for t in run.layers]
    hand = [(0, 0, 0, 1, 0, 0), (1, 1.5, 1.5, 2.5, 0.5, 0.5), (2, 3, 3, 4, 0.5, 1),
            (3, 4.5, 4.5, 5.5, 0.5, 1.5)]
    for row, expected in zip(got, hand, strict=True):
        assert row == pytest.approx(tuple(x * MS for x in expected))
    assert run.delay_s == pytest.approx(1.5 * MS) and run.is_delayed
    assert (run.transfer_s, run.overlap_s) == pytest.approx((4.5 * MS, 3 * MS))


def test_a_fast_link_hides_the_transfers() -> None:
    """0.5 ms transfers: layer l+1 lands 0.5 ms after layer l starts, before it
    ends: no stall, no lateness, every transfer fully overlapped."""
    run = run_layer_pipeline(0.0, [1 * MS] * 4, [0.0, 0.5 * MS, 0.5 * MS, 0.5 * MS])
    assert [t.start_s for t in run.layers] == pytest.approx([0, 1 * MS, 2 * MS, 3 * MS])
    assert not run.is_delayed and run.overlap_s == pytest.approx(run.transfer_s)


def test_layer_zero_offloaded_stalls_the_whole_iteration() -> None:
    """Layer 0 needs 2 ms: nothing computes before t=2; its lateness is 2 ms."""
    run = run_layer_pipeline(0.0, [1 * MS, 1 * MS], [2 * MS, 0.0])
    assert [t.start_s for t in run.layers] == pytest.approx([2 * MS, 3 * MS])
    assert run.layers[0].lateness_s == pytest.approx(2 * MS) and run.overlap_s == 0.0


def test_summary_counts_iterations_delayed_by_cache_readiness() -> None:
    slow = run_layer_pipeline(0.0, [1 * MS] * 4, [0.0, 1.5 * MS, 1.5 * MS, 1.5 * MS])
    fast = run_layer_pipeline(10 * MS, [1 * MS] * 4, [0.0, 0.5 * MS, 0.5 * MS, 0.5 * MS])
    resident = run_layer_pipeline(20 * MS, [1 * MS] * 4, [0.0] * 4)
    summary = summarize([slow, fast, resident])
    assert (summary.num_iterations, summary.num_iterations_delayed) == (3, 1)
    assert summary.total_delay_s == pytest.approx(1.5 * MS)
    assert summary.max_lateness_s == pytest.approx((0, 0.5 * MS, 1 * MS, 1.5 * MS))
    # overlapped 3 + 1.5 ms of 4.5 + 1.5 ms transferred
    assert summary.overlap_fraction == pytest.approx(4.5 / 6.0)
    assert summarize([resident]).overlap_fraction is None


def test_offloaded_layers_stretch_the_simulated_run() -> None:
    """One request, prompt 1, three outputs (three iterations) at fixed:4 on
    the ms clock: 1 ms per layer over 4 layers; with layers 1-3 on the host
    at 1.5 ms each every iteration lasts 5.5 ms (the fixture above), so the
    run ends at 16.5 ms instead of 12."""
    from iterserve.cost import ClockedCost, parse_cost_model
    from iterserve.engine.loop import Engine
    from iterserve.policies.registry import make_policy
    from iterserve.records.workload import parse_workload
    from iterserve.sim.factory import make_simulated_executor
    from iterserve.sim.layer_offload import LayerOffload, LayerOffloadCost

    manifest = parse_workload({
        "workload_id": "layers", "clock": "ms",
        "capacity": {"max_num_batched_tokens": 4, "max_num_seqs": 1},
        "requests": [{"request_id": "r", "arrival": 0, "prompt_tokens": 1,
                      "max_output_tokens": 3}]})
    ends = {}
    for offloaded in (0, 3):
        cost = LayerOffloadCost(ClockedCost(parse_cost_model("fixed:4"), "ms"),
                                LayerOffload(4, offloaded, 1.5))
        engine = Engine(manifest.online, make_policy("refill"),
                        make_simulated_executor(manifest, cost))
        engine.run()
        ends[offloaded] = (engine.state.now, cost.tally.summary())
    assert ends[0][0] == pytest.approx(12.0) and ends[0][1].num_iterations_delayed == 0
    now, summary = ends[3]
    assert now == pytest.approx(16.5)
    assert (summary.num_iterations, summary.num_iterations_delayed) == (3, 3)
    assert summary.total_delay_s == pytest.approx(4.5 * MS)
    assert summary.max_lateness_s == pytest.approx((0, 0.5 * MS, 1 * MS, 1.5 * MS))


def test_layer_offload_is_refused_on_the_iteration_clock_and_checked() -> None:
    from iterserve.cost import ClockedCost, CostModelError
    from iterserve.sim.layer_offload import LayerOffload, LayerOffloadCost

    with pytest.raises(CostModelError, match="ms clock"):
        LayerOffloadCost(ClockedCost.unit(), LayerOffload(2, 1, 1.0))
    with pytest.raises(ValueError, match="offloaded"):
        LayerOffload(2, 3, 1.0)
    with pytest.raises(ValueError, match="transfer_ms"):
        LayerOffload(2, 1, float("nan"))
