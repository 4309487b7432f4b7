"""0x07 "One Burst, Two Overload Contracts": same request goodput, different surfaces."""

from collections import Counter

import pytest
from metrics_fixtures import (
    BURST_SLO,
    burst_accept_all,
    burst_four_live_cap,
    least_slack_tick_oracle,
)

from iterserve.metrics import ObservationWindow, Outcome, evaluate

WINDOW = ObservationWindow(0.0, 0.1)
BURST = [(request_id, 0) for request_id in "ABCDEF"]


def test_hand_built_logs_follow_the_least_slack_rules() -> None:
    derived_accept_all = least_slack_tick_oracle(BURST, max_live=None)
    derived_cap = least_slack_tick_oracle(BURST, max_live=4)
    assert Counter(derived_accept_all) == Counter(burst_accept_all())
    assert Counter(derived_cap) == Counter(burst_four_live_cap())


def test_accept_all_emits_everything_but_two_requests_miss_ttft() -> None:
    report = evaluate(burst_accept_all(), BURST_SLO, WINDOW, label="accept-all")
    verdicts = {item.request_id: item for item in report.request_outcomes}
    assert {rid for rid, item in verdicts.items() if item.outcome is Outcome.COMPLETED_MISS} == {
        "E",
        "F",
    }
    assert verdicts["E"].missed_clocks == ("ttft",)
    counts = report.outcomes
    assert (counts.num_offered, counts.num_slo_valid, counts.num_completed_miss) == (6, 4, 2)
    assert (counts.num_rejected, counts.num_unfinished) == (0, 0)
    assert report.rates.num_emitted_tokens == 12
    assert sorted(round(value * 1000, 6) for value in report.samples.ttft_s) == [
        10,
        10,
        30,
        30,
        40,
        40,
    ]


def test_four_live_cap_protects_four_and_rejects_two() -> None:
    report = evaluate(burst_four_live_cap(), BURST_SLO, WINDOW, label="four-live cap")
    counts = report.outcomes
    assert (counts.num_offered, counts.num_admitted, counts.num_slo_valid) == (6, 4, 4)
    assert (counts.num_completed_miss, counts.num_rejected, counts.num_unfinished) == (0, 2, 0)
    assert dict(counts.reject_reasons) == {"max_live": 2}
    assert report.rates.num_emitted_tokens == 8


def test_both_contracts_deliver_the_same_request_goodput() -> None:
    accept_all = evaluate(burst_accept_all(), BURST_SLO, WINDOW)
    capped = evaluate(burst_four_live_cap(), BURST_SLO, WINDOW)
    assert accept_all.rates.request_goodput_per_s == pytest.approx(40.0)
    assert capped.rates.request_goodput_per_s == pytest.approx(40.0)
    # ...while exposing different throughput and failure surfaces.
    assert accept_all.rates.request_throughput_per_s == pytest.approx(60.0)
    assert capped.rates.request_throughput_per_s == pytest.approx(40.0)
    assert (
        accept_all.attainment.offered_load == capped.attainment.offered_load == pytest.approx(4 / 6)
    )
    assert capped.attainment.admitted == pytest.approx(1.0)
    assert accept_all.attainment.admitted == pytest.approx(4 / 6)
    for report in (accept_all, capped):
        counts = report.outcomes
        closed = (
            counts.num_slo_valid
            + counts.num_completed_miss
            + counts.num_rejected
            + counts.num_unfinished
        )
        assert closed == counts.num_offered == 6


def test_twelve_burst_samples_withhold_the_tail() -> None:
    report = evaluate(burst_accept_all(), BURST_SLO, WINDOW).to_dict()
    ttft = report["latency_ms"]["ttft"]
    assert ttft["n"] == 6
    assert ttft["p95"] == {"status": "insufficient_sample", "n": 6}
    assert ttft["p50"]["status"] == "ok"
    assert ttft["p50"]["value"] == pytest.approx(30.0)
