"""0x07 clock origins: TTFT from original arrival, TBT from previous output."""

import pytest
from metrics_fixtures import merged, stream

from iterserve.metrics import (
    AdmitEvent,
    ArrivalEvent,
    ComputeEvent,
    FinishEvent,
    FirstTokenEvent,
    ObservationWindow,
    Outcome,
    PreemptEvent,
    ResumeEvent,
    SloConfig,
    TokenEvent,
    endpoint_deadline_s,
    evaluate,
    first_token_deadline_s,
    next_token_deadline_s,
    request_clocks,
)
from iterserve.metrics.event_scan import build_timelines


def _clocks(events):  # type: ignore[no-untyped-def]
    (timeline,) = build_timelines(events).values()
    return request_clocks(timeline)


def test_ttft_counts_from_original_arrival_across_queueing_and_preemption() -> None:
    events = [
        ArrivalEvent(1.0, "r"),
        AdmitEvent(1.5, "r"),  # queued 0.5 s
        ComputeEvent(1.6, "r", num_rows=4),
        PreemptEvent(1.6, "r"),
        ResumeEvent(2.0, "r"),
        ComputeEvent(2.1, "r", num_rows=4, is_rebuild=True),
        FirstTokenEvent(2.2, "r"),
        TokenEvent(2.3, "r", token_index=1),
        PreemptEvent(2.3, "r", mode="swap"),
        ResumeEvent(2.8, "r"),
        TokenEvent(2.9, "r", token_index=2),
        FinishEvent(2.9, "r", reason="eos", num_output_tokens=3),
    ]
    clocks = _clocks(events)
    assert clocks.ttft_s == pytest.approx(1.2)  # not 0.7 (admission) nor 0.2 (resume)
    assert clocks.queue_s == pytest.approx(0.5)
    assert clocks.tbt_gaps_s == pytest.approx((0.1, 0.6))  # the stall stays in the gap
    assert clocks.tpot_s == pytest.approx(0.35)
    assert clocks.end_to_end_s == pytest.approx(1.9)


def test_one_output_request_has_undefined_tpot_but_counts_for_ttft_and_completion() -> None:
    log = merged(stream("one", 0.0, [0.05]), stream("two", 0.0, [0.05, 0.07]))
    (timeline, *_) = build_timelines(log).values()
    assert request_clocks(timeline).tpot_s is None  # never 0
    assert request_clocks(timeline).tbt_gaps_s == ()
    slo = SloConfig(ttft_ms=100.0, tpot_ms=10.0)
    report = evaluate(log, slo, ObservationWindow(0.0, 1.0))
    verdicts = {item.request_id: item for item in report.request_outcomes}
    assert verdicts["one"].outcome is Outcome.SLO_VALID
    assert verdicts["two"].outcome is Outcome.COMPLETED_MISS  # TPOT 20 ms > 10 ms
    assert verdicts["two"].missed_clocks == ("tpot",)
    assert report.outcomes.num_completed == 2
    assert report.samples.ttft_s == pytest.approx((0.05, 0.05))
    assert report.samples.tpot_s == pytest.approx((0.02,))  # only the defined one
    assert report.to_dict()["latency_ms"]["tpot"]["n"] == 1


def test_one_output_request_still_fails_a_late_first_token() -> None:
    report = evaluate(
        stream("one", 0.0, [0.5]), SloConfig(ttft_ms=100.0, tpot_ms=10.0), ObservationWindow(0, 1)
    )
    assert report.request_outcomes[0].missed_clocks == ("ttft",)


def test_deadlines_keep_their_origins() -> None:
    assert first_token_deadline_s(2.0, 0.03) == pytest.approx(2.03)
    assert next_token_deadline_s(2.5, 0.02) == pytest.approx(2.52)
    assert endpoint_deadline_s(2.0, None, ttft_limit_s=0.03, tbt_limit_s=0.02) == pytest.approx(
        2.03
    )
    assert endpoint_deadline_s(2.0, 2.5, ttft_limit_s=0.03, tbt_limit_s=0.02) == pytest.approx(2.52)
    assert endpoint_deadline_s(2.0, 2.5, ttft_limit_s=0.03, tbt_limit_s=None) is None


def test_boundary_met_despite_accumulated_float_rounding() -> None:
    emitted_s = 0.1 + 0.2  # 0.30000000000000004 on an accumulating virtual clock
    assert emitted_s > 0.3
    report = evaluate(
        stream("r", 0.0, [emitted_s]), SloConfig(ttft_ms=300.0), ObservationWindow(0, 1)
    )
    assert report.request_outcomes[0].outcome is Outcome.SLO_VALID
    strict = SloConfig(ttft_ms=300.0, clock_tolerance_ms=0.0)
    assert (
        evaluate(
            stream("r", 0.0, [emitted_s]), strict, ObservationWindow(0, 1)
        ).outcomes.num_completed_miss
        == 1
    )
