"""0x07 "One Burst, Two Overload Contracts", reproduced by the real simulator.

(The metrics-layer twin, tests/metrics/test_metrics_burst.py, scored logs it
built itself; its assertions live here now, on the simulator's own logs.)

10 ms iterations (ms clock, fixed 10 ms cost), 2 rows per iteration, six
requests at t=0 each needing 1 first-token unit + 1 next-token unit,
TTFT 30 ms, TBT 20 ms, least predicted slack (tie-break: next token,
arrival, request id). Window W = [0, 100 ms).
"""

from __future__ import annotations

import pytest
from integration_helpers import (
    BURST,
    BURST_COST,
    BURST_SLO,
    closes,
    emission_ms,
    evaluate_run,
    gate,
    simulate,
    two_row_workload,
)

from iterserve.cost import LinearIterationCost
from iterserve.metrics import ObservationWindow, Outcome
from iterserve.policies.deadline import DeadlineConfig
from iterserve.policies.least_slack import LeastSlack
from iterserve.records.spec import (
    Capacity,
    HiddenTruth,
    OnlineWorkload,
    RequestSpec,
    SloTargets,
    WorkloadManifest,
)

WINDOW = ObservationWindow(0.0, 0.1)


@pytest.fixture(scope="module")
def accept_all():
    return simulate(BURST, gate("accept-all"))


@pytest.fixture(scope="module")
def capped():
    return simulate(BURST, gate("bounded", max_live=4))


def test_accept_all_emits_every_response_but_two_miss_ttft(accept_all) -> None:
    report = evaluate_run(accept_all, WINDOW, "accept-all")
    verdicts = {v.request_id: v for v in report.request_outcomes}
    missed = {rid for rid, v in verdicts.items() if v.outcome is Outcome.COMPLETED_MISS}
    assert missed == {"E", "F"}
    assert verdicts["E"].missed_clocks == ("ttft",) == verdicts["F"].missed_clocks
    counts = report.outcomes
    assert (counts.num_offered, counts.num_completed, counts.num_slo_valid) == (6, 6, 4)
    assert (counts.num_rejected, counts.num_unfinished) == (0, 0)
    assert report.rates.num_emitted_tokens == 12
    # least slack, derived by the policy: A,B first; at 10 ms next tokens beat
    # equal-slack first tokens; at 30 ms E,F (slack -10 ms) beat C,D (+10 ms)
    assert emission_ms(accept_all) == {"A": [10, 20], "B": [10, 20], "C": [30, 50],
                                       "D": [30, 50], "E": [40, 60], "F": [40, 60]}
    assert sorted(round(t * 1000, 6) for t in report.samples.ttft_s) == [10, 10, 30, 30, 40, 40]


def test_four_live_cap_protects_the_four_admitted(capped) -> None:
    report = evaluate_run(capped, WINDOW, "bounded")
    counts = report.outcomes
    assert (counts.num_offered, counts.num_admitted, counts.num_slo_valid) == (6, 4, 4)
    assert (counts.num_completed_miss, counts.num_rejected, counts.num_unfinished) == (0, 2, 0)
    assert dict(counts.reject_reasons) == {"max_live": 2}
    assert capped.engine.rejected == {"E": "max_live", "F": "max_live"}
    assert report.rates.num_emitted_tokens == 8
    assert emission_ms(capped) == {"A": [10, 20], "B": [10, 20], "C": [30, 40], "D": [30, 40]}
    assert report.attainment.admitted == pytest.approx(1.0)


def test_both_contracts_give_the_same_request_goodput(accept_all, capped) -> None:
    both = [evaluate_run(accept_all, WINDOW, "accept-all"), evaluate_run(capped, WINDOW, "cap")]
    assert [r.rates.request_goodput_per_s for r in both] == pytest.approx([40.0, 40.0])
    # ...with different throughput and failure surfaces
    assert [r.rates.request_throughput_per_s for r in both] == pytest.approx([60.0, 40.0])
    assert [r.outcomes.num_rejected for r in both] == [0, 2]
    assert [r.outcomes.num_completed_miss for r in both] == [2, 0]
    assert all(closes(r) for r in both)
    assert both[0].attainment.offered_load == both[1].attainment.offered_load == \
        pytest.approx(4 / 6)
    assert both[0].attainment.admitted == pytest.approx(4 / 6)
    assert both[1].attainment.admitted == pytest.approx(1.0)
    for report in both:
        counts = report.outcomes
        assert counts.num_slo_valid + counts.num_completed_miss + counts.num_rejected \
            + counts.num_unfinished == counts.num_offered == 6


def test_twelve_samples_withhold_the_tail(accept_all) -> None:
    latency = evaluate_run(accept_all, WINDOW, "accept-all").to_dict()["latency_ms"]
    assert latency["ttft"]["n"] == 6
    assert latency["ttft"]["p95"] == {"status": "insufficient_sample", "n": 6}
    assert latency["ttft"]["p50"]["status"] == "ok"
    assert latency["ttft"]["p50"]["value"] == pytest.approx(30.0)
    assert latency["tbt"]["p99"] == {"status": "insufficient_sample", "n": 6}


def test_edf_matches_least_slack_under_a_fixed_cost() -> None:
    """With a fixed cost every slack is deadline - now - 10 ms: same order."""
    run = simulate(BURST, gate("accept-all"), policy="edf")
    assert emission_ms(run) == emission_ms(simulate(BURST, gate("accept-all")))


def test_least_slack_prefers_the_costlier_endpoint_edf_does_not() -> None:
    """Equal deadlines, prompts of 1 and 4 rows, 10 ms per prefill row: B's
    predicted finish is later, so its slack is smaller (0x07 F33-F34)."""
    slo = SloTargets(ttft_ms=100.0)
    online = OnlineWorkload("costlier", "ms", Capacity(max_num_batched_tokens=4, max_num_seqs=1),
                            (RequestSpec("A", 0.0, 1, 4, slo=slo), RequestSpec("B", 0.0, 4, 4, slo=slo)))
    manifest = WorkloadManifest(online, HiddenTruth({"A": 1, "B": 1}))
    cost = LinearIterationCost(0.0, 10.0, 10.0)
    first = {name: simulate(manifest, gate("accept-all"), policy=name, cost=cost)
             .recorder.log().events for name in ("least-slack", "edf")}
    first_token = {name: next(e.request_id for e in events if e.kind == "first_token")
                   for name, events in first.items()}
    assert first_token == {"least-slack": "B", "edf": "A"}


def test_one_output_request_has_no_tpot_but_counts() -> None:
    run = simulate(two_row_workload([("solo", 0.0)], realized=1), gate("accept-all"))
    report = evaluate_run(run, ObservationWindow(0.0, 0.1), "one-output")
    clocks = report.request_clocks[0]
    assert clocks.num_output_tokens == 1 and clocks.tpot_s is None
    assert clocks.ttft_s == pytest.approx(0.01)
    assert report.outcomes.num_completed == report.outcomes.num_slo_valid == 1
    latency = report.to_dict()["latency_ms"]
    assert latency["tpot"]["n"] == 0 and latency["ttft"]["n"] == 1


def test_policy_contract_names_the_cost_model() -> None:
    assert BURST_COST.model_id in LeastSlack(DeadlineConfig(BURST_COST)).contract.assumptions
    assert BURST_SLO.ttft_ms == 30.0
